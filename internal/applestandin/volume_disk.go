package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/loopdisk"
)

// Volume images. Each of Apple's volumes is an ext4 filesystem in an image
// file of the size asked (512 GiB when none; VolumeConfiguration.swift),
// made by containerization's formatter, which puts a lost+found (mode
// 0700) at its root (EXT4+Formatter.swift). `volume create` here makes the
// same of a sparse image file on a loop device, mounted by podman
// (`volume create --opt type=ext4 --opt device=/dev/loopN`): a container
// sees lost+found, a full volume is ENOSPC for the writer, and the host
// loses at most the size. The image is named in a private label, reported
// as the volume's size, and detached and deleted by `volume delete`.
//
// That needs root, losetup, mkfs.ext4 and loop devices on the engine's own
// host (internal/loopdisk). Elsewhere (rootless podman, a remote engine,
// an engine that does not name its storage) a volume is a plain podman
// volume, as is one that `run` creates on the fly: no size is enforced and
// there is no lost+found.

// labelVolImage on a volume names its image file.
const labelVolImage = labelPrefix + "image"

// volumeDisksDir is where the images live: beside the engine's storage,
// in a directory of the stand-in's own.
const volumeDisksDir = "container-standin-disks"

// volumeCreateTimeout bounds making an image.
const volumeCreateTimeout = 2 * time.Minute

// volumeImageDir returns the directory for volume images, or "" and why
// volumes are plain podman volumes here.
func (a *app) volumeImageDir() (string, string) {
	if why := loopdisk.Unavailable(); why != "" {
		return "", why
	}
	for _, k := range []string{"CONTAINER_HOST", "DOCKER_HOST"} {
		if v := os.Getenv(k); v != "" && !strings.HasPrefix(v, "unix://") {
			return "", "the engine is remote"
		}
	}
	root := os.Getenv(envGraphRoot)
	if root == "" {
		r := a.eng.run("info", "--format", "{{.Store.GraphRoot}}")
		if !r.ok() {
			return "", "the engine did not name its storage"
		}
		root = strings.TrimSpace(string(r.stdout))
	}
	if !filepath.IsAbs(root) {
		return "", "the engine did not name its storage"
	}
	return filepath.Join(filepath.Dir(root), volumeDisksDir), ""
}

// makeVolumeImage makes the ext4 image of volume name, size bytes, and
// returns the podman arguments that mount it (with the label naming it),
// and the image to detach and delete should the volume not be made; none
// where images cannot be made here.
func (a *app) makeVolumeImage(name string, size int64) (args []string, img string, err error) {
	dir, why := a.volumeImageDir()
	if why != "" {
		return nil, "", nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	img = filepath.Join(dir, name+"."+hex.EncodeToString(rnd[:])+".ext4")
	ctx, cancel := context.WithTimeout(context.Background(), volumeCreateTimeout)
	defer cancel()
	dev, release, err := loopdisk.Make(ctx, img, size, "")
	if err != nil {
		return nil, "", err
	}
	release() // nothing sweeps the stand-in's images: no hold needed
	return []string{"--label", labelVolImage + "=" + img, "--opt", "type=ext4", "--opt", "device=" + dev}, img, nil
}

// volumeImage is the image file of a volume the stand-in made, or "".
// Only a file in a directory of that name is taken, so a label set by
// hand cannot make volume delete remove another file.
func volumeImage(labels map[string]string) string {
	img := labels[labelVolImage]
	if img == "" || !filepath.IsAbs(img) || !strings.HasSuffix(img, ".ext4") || strings.Contains(img, "..") ||
		filepath.Base(filepath.Dir(img)) != volumeDisksDir {
		return ""
	}
	return img
}

// removeVolumeImage detaches and deletes a removed volume's image.
func removeVolumeImage(labels map[string]string) {
	if img := volumeImage(labels); img != "" {
		loopdisk.Detach(img)
	}
}

// volumeImageSize is the size of a volume's image file, or -1.
func volumeImageSize(labels map[string]string) int64 {
	img := volumeImage(labels)
	if img == "" {
		return -1
	}
	fi, err := os.Stat(img)
	if err != nil {
		return -1
	}
	return fi.Size()
}
