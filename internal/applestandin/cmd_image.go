package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// imageEntry is one Apple image: a reference and the podman image behind it.
type imageEntry struct {
	ref string // normalised Apple reference
	img *podImage
}

// listImages returns every tagged podman image under its Apple reference.
func (a *app) listImages() ([]imageEntry, error) {
	imgs, err := a.readAllImages()
	if err != nil {
		return nil, err
	}
	var out []imageEntry
	refs := map[string]bool{}
	for i := range imgs {
		for _, t := range imgs[i].RepoTags {
			if strings.HasPrefix(t, "<none>") || strings.Contains(t, "/pause:") {
				continue
			}
			ref := appleFromPodman(t)
			if refs[ref] {
				continue
			}
			refs[ref] = true
			out = append(out, imageEntry{ref, &imgs[i]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ref < out[j].ref })
	return out, nil
}

// readAllImages inspects every image podman has. podman fails a listing,
// or an inspect of several images, as a whole when one of them is removed
// while it reads them, and may then print none of the others; Apple's
// list does not fail so, and never leaves out an image that stays. Both
// are read again until they agree; an image that never inspects (a
// damaged one) is then left out, as Apple leaves out what it cannot read.
func (a *app) readAllImages() ([]podImage, error) {
	var r result
	var ids []string
	for try := 0; try < 10; try++ {
		if try > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		if r = a.eng.run("images", "-q", "--no-trunc"); !r.ok() {
			if r.contains("image not known") {
				continue
			}
			return nil, failPlain(r.message())
		}
		ids = ids[:0]
		for _, id := range strings.Fields(string(r.stdout)) {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			return nil, nil
		}
		if r = a.eng.run(append([]string{"image", "inspect"}, ids...)...); r.ok() {
			return parseImages(r.stdout)
		}
		if !r.contains("image not known") && !r.contains("no such image") {
			return nil, failPlain(r.message())
		}
	}
	if len(ids) == 0 {
		return nil, failPlain(r.message())
	}
	var out []podImage
	for _, id := range ids {
		if r := a.eng.run("image", "inspect", id); r.ok() {
			imgs, err := parseImages(r.stdout)
			if err != nil {
				return nil, err
			}
			out = append(out, imgs...)
		}
	}
	return out, nil
}

func parseImages(b []byte) ([]podImage, error) {
	var out []podImage
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("podman image inspect: %w", err)
	}
	return out, nil
}

// findImage resolves an Apple reference to a podman image.
func (a *app) findImage(ref string) (*imageEntry, string, error) {
	full := normalizeRef(ref)
	cands := podmanCandidates(full)
	imgs, err := a.eng.inspectImages(cands...)
	if err != nil || len(imgs) == 0 {
		return nil, "", err
	}
	podRef, img := pickImage(cands, imgs)
	return &imageEntry{full, img}, podRef, nil
}

func hexDigest(d string) string { return strings.TrimPrefix(d, "sha256:") }

// ociConfig rebuilds the image's OCI config from podman's inspect output.
func ociConfig(im *podImage) *Obj {
	o := NewObj().Set("architecture", im.Architecture)
	if cfg, err := decodeOrdered(im.Config); err == nil && cfg != nil {
		o.Set("config", cfg)
	} else {
		o.Set("config", NewObj())
	}
	o.Set("created", im.Created.UTC().Format(time.RFC3339Nano))
	if h, err := decodeOrdered(im.History); err == nil && h != nil {
		o.Set("history", h)
	}
	return o.Set("os", orDefault(im.Os, "linux")).
		Set("rootfs", NewObj().Set("diff_ids", orEmpty(im.RootFS.Layers)).Set("type", orDefault(im.RootFS.Type, "layers")))
}

// descriptorJSON is the image index descriptor ({size, mediaType, digest} in 0.x order).
func descriptorJSON(im *podImage) *Obj {
	return NewObj().Set("size", descriptorSize).Set("mediaType", indexMediaType).Set("digest", im.Digest)
}

// imageJSON renders one image for list/inspect in the version's shape.
func (a *app) imageJSON(e imageEntry, inspect bool) *Obj {
	im := e.img
	platform := NewObj().Set("os", orDefault(im.Os, "linux")).Set("architecture", im.Architecture)
	if oneX(a.v) {
		return NewObj().
			Set("configuration", NewObj().Set("creationDate", isoDate(im.Created)).
				Set("descriptor", descriptorJSON(im)).Set("name", e.ref)).
			Set("id", hexDigest(im.Digest)).
			Set("variants", []any{NewObj().
				Set("config", ociConfig(im)).
				Set("digest", "sha256:"+im.ID).
				Set("platform", platform).
				Set("size", im.Size)})
	}
	if inspect {
		// reconstructed from ImageDetail.swift @0.12.3 (samples §2.5).
		return NewObj().Set("name", e.ref).Set("index", descriptorJSON(im)).
			Set("variants", []any{NewObj().Set("platform", platform).Set("config", ociConfig(im)).Set("size", im.Size)})
	}
	return NewObj().Set("fullSize", decimalSize(im.Size)).Set("reference", e.ref).Set("descriptor", descriptorJSON(im))
}

// decimalSize formats like ByteCountFormatter (.file): decimal units.
// reconstructed: the precision per unit follows Foundation's usual output.
func decimalSize(n int64) string {
	f := float64(n)
	switch {
	case f >= 1e9:
		return fmt.Sprintf("%.2f GB", f/1e9)
	case f >= 1e6:
		return fmt.Sprintf("%.1f MB", f/1e6)
	case f >= 1e3:
		return fmt.Sprintf("%.0f KB", f/1e3)
	case n == 0:
		return "Zero KB"
	}
	return fmt.Sprintf("%d bytes", n)
}

// cmdImageList lists images as a table, references (-q) or JSON.
func cmdImageList(a *app, p *parsed) error {
	format, err := a.checkFormat(p)
	if err != nil {
		return err
	}
	if err := a.up(); err != nil {
		return err
	}
	entries, err := a.listImages()
	if err != nil {
		return err
	}
	switch {
	case format == "json":
		arr := []any{}
		for _, e := range entries {
			arr = append(arr, a.imageJSON(e, false))
		}
		a.printJSON(arr, false)
	case p.Has("quiet"):
		for _, e := range entries {
			fmt.Fprintln(a.stdout, displayRef(e.ref))
		}
	default:
		rows := [][]string{{"NAME", "TAG", "DIGEST"}}
		for _, e := range entries {
			name, tag := refNameTag(displayRef(e.ref))
			d := hexDigest(e.img.Digest)
			if oneX(a.v) {
				d = d[:min(12, len(d))]
			} else {
				d = d[:min(24, len(d))] + "..."
			}
			rows = append(rows, []string{name, tag, d})
		}
		fmt.Fprintln(a.stdout, renderTable(rows))
	}
	return nil
}

// cmdImageInspect prints images as JSON (1.x pretty; missing -> error).
func cmdImageInspect(a *app, p *parsed) error {
	if err := a.up(); err != nil {
		return err
	}
	arr := []any{}
	var missing, found []string
	for _, ref := range p.Pos {
		e, _, err := a.findImage(ref)
		if err != nil {
			return err
		}
		if e == nil {
			missing = append(missing, ref)
			continue
		}
		found = append(found, ref)
		arr = append(arr, a.imageJSON(*e, true))
	}
	if len(missing) > 0 {
		if oneX(a.v) {
			names := make([]string, len(missing))
			for i, m := range missing {
				names[i] = displayRef(normalizeRef(m))
			}
			return a.fail("notFound", "image not found: "+strings.Join(names, ", "))
		}
		// 0.12.3 (samples §2.6): a log line, then the InspectError description.
		var failed []string
		for _, m := range missing {
			fmt.Fprintf(a.stderr, "image inspect failed: [\"name\": %s, \"error\": Image not found]\n", m)
			failed = append(failed, fmt.Sprintf("(%q, notFound: \"Image not found\")", m))
		}
		return failPlain("InspectError(succeeded: " + swiftArray(found) + ", failed: [" + strings.Join(failed, ", ") + "])")
	}
	a.printJSON(arr, true)
	return nil
}

// swiftArray describes a [String] the way Swift prints it.
func swiftArray(s []string) string {
	if len(s) == 0 {
		return "[]"
	}
	return swiftSet(s)
}

// cmdImageDelete removes images (Image/ImageDelete.swift, 0.8.0–1.2.2).
// The names not found are collected (as given), unless --force (0.9.0+)
// ignores them; the found ones are deleted and their full references
// printed; failures then end in internalError "failed to delete one or
// more images: [...]", the same text for a missing image and for one
// that failed to go. Not emulated: the "Reclaimed … in disk space" line
// (stdout before 1.0, a log line after), whose size podman does not tell.
func cmdImageDelete(a *app, p *parsed) error {
	if err := a.up(); err != nil {
		return err
	}
	refs := p.Pos
	if p.Has("all") {
		entries, err := a.listImages()
		if err != nil {
			return err
		}
		refs = nil
		for _, e := range entries {
			refs = append(refs, e.ref)
		}
	}
	var failures []string
	for _, ref := range refs {
		e, podRef, err := a.findImage(ref)
		if err != nil {
			return err
		}
		if e == nil {
			if !p.Has("force") {
				failures = append(failures, ref)
			}
			continue
		}
		if r := a.eng.run("rmi", podRef); !r.ok() {
			// Apple's containers keep their own root filesystems: drop the tag only.
			if r2 := a.eng.run("untag", podRef, podRef); !r2.ok() {
				// reconstructed: the error's description after the XPC round trip.
				fmt.Fprintf(a.stderr, "failed to delete %s: %s\n", e.ref, coded("internalError", r.message()))
				failures = append(failures, e.ref)
				continue
			}
		}
		fmt.Fprintln(a.stdout, e.ref)
	}
	if len(failures) > 0 {
		return a.errImagesDeleteFailed(failures)
	}
	return nil
}

// errImagesDeleteFailed is image delete's final error: internalError
// "failed to delete one or more images: <[String]>" (ImageDelete.swift,
// 0.8.0–1.2.2; Swift prints the array as ["a", "b"]).
func (a *app) errImagesDeleteFailed(refs []string) error {
	return a.fail("internalError", "failed to delete one or more images: "+swiftArray(refs))
}

// cmdImageTag adds a reference to an image and prints the target.
func cmdImageTag(a *app, p *parsed) error {
	if err := a.up(); err != nil {
		return err
	}
	e, podRef, err := a.findImage(p.Pos[0])
	if err != nil {
		return err
	}
	if e == nil {
		return a.fail("notFound", "image not found: "+displayRef(normalizeRef(p.Pos[0])))
	}
	target := normalizeRef(p.Pos[1])
	if r := a.eng.run("tag", podRef, podmanTag(target)); !r.ok() {
		return failPlain(r.message())
	}
	fmt.Fprintln(a.stdout, target)
	return nil
}

// cmdImagePull succeeds for images present locally; nothing can be
// fetched (the stand-in has no registry), so others fail like a pull.
func cmdImagePull(a *app, p *parsed) error {
	if err := a.up(); err != nil {
		return err
	}
	e, _, err := a.findImage(p.Pos[0])
	if err != nil {
		return err
	}
	if e == nil {
		return a.errPull(normalizeRef(p.Pos[0]))
	}
	return nil
}

// cmdBuild builds an image with podman; progress goes to stderr and tags
// are stored where `run` will find them.
func cmdBuild(a *app, p *parsed) error {
	ctx := "."
	if len(p.Pos) > 0 {
		ctx = p.Pos[0]
	}
	if err := a.up(); err != nil {
		return err
	}
	file := p.Val("file", "")
	if file == "" {
		for _, n := range []string{"Dockerfile", "Containerfile"} {
			if _, err := os.Stat(filepath.Join(ctx, n)); err == nil {
				file = filepath.Join(ctx, n)
				break
			}
		}
		if file == "" {
			// reconstructed
			return a.fail("notFound", "could not find Dockerfile or Containerfile in "+ctx)
		}
	}
	args := []string{"build", "-f", file}
	if p.Has("pull") {
		args = append(args, "--pull=always")
	} else {
		args = append(args, "--pull=never")
	}
	for _, t := range p.Vals("tag") {
		args = append(args, "-t", podmanTag(normalizeRef(t)))
	}
	for _, b := range p.Vals("build-arg") {
		args = append(args, "--build-arg", b)
	}
	for _, l := range p.Vals("label") {
		args = append(args, "--label", l)
	}
	if t := p.Val("target", ""); t != "" {
		args = append(args, "--target", t)
	}
	if p.Has("no-cache") {
		args = append(args, "--no-cache")
	}
	if p.Has("quiet") {
		args = append(args, "-q")
	}
	cmd := a.eng.command(append(args, ctx)...)
	var tail tailBuffer
	progress := &dropErrorLines{w: a.stderr}
	cmd.Stdout = &tail
	if !p.Has("quiet") {
		cmd.Stdout = multi{progress, &tail}
	}
	cmd.Stderr = multi{progress, &tail}
	rc := exitStatus(cmd.Run())
	progress.flush()
	if rc != 0 {
		return failPlain(buildFailure(tail.String()))
	}
	return nil
}

var stepRE = regexp.MustCompile(`STEP "RUN (.*)": while running runtime: exit status (\d+)`)

// buildFailure turns podman's build error into BuildKit's wording.
// reconstructed: Apple's 1.x text for a failing RUN is not captured.
func buildFailure(out string) string {
	if m := stepRE.FindStringSubmatch(out); m != nil {
		return `failed to solve: process "/bin/sh -c ` + m[1] + `" did not complete successfully: exit code: ` + m[2]
	}
	r := result{stderr: []byte(out), code: 1}
	return "failed to solve: " + r.message()
}

// dropErrorLines passes build progress through line by line, leaving out
// podman's own "Error: " lines (the CLI prints its error at the end).
type dropErrorLines struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

func (d *dropErrorLines) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.buf = append(d.buf, p...)
	for {
		i := bytes.IndexByte(d.buf, '\n')
		if i < 0 {
			break
		}
		line := d.buf[:i+1]
		if !bytes.HasPrefix(line, []byte("Error: ")) {
			_, _ = d.w.Write(line)
		}
		d.buf = d.buf[i+1:]
	}
	return len(p), nil
}

// flush writes a last unterminated line.
func (d *dropErrorLines) flush() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.buf) > 0 && !bytes.HasPrefix(d.buf, []byte("Error: ")) {
		_, _ = d.w.Write(d.buf)
	}
	d.buf = nil
}
