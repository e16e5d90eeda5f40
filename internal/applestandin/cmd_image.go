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
			if removedWhileRead(r) {
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
		if !removedWhileRead(r) {
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

// removedWhileRead reports whether podman failed a read of its images
// because one was removed meanwhile: the image is not known any more, or
// its storage lost an item of it (a manifest, while podman checked
// whether the image is dangling) before its record went.
func removedWhileRead(r result) bool {
	return r.contains("image not known") || r.contains("no such image") || r.contains("locating item named")
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

// ociConfig rebuilds the image's OCI config from podman's inspect output
// as ContainerizationOCI.Image encodes it (ImageConfig.swift, containerization
// 0.21–0.40, the same in each): created, author, architecture, os,
// variant, config, rootfs and history, nil ones left out; of the config
// only User, Env, Entrypoint, Cmd, WorkingDir, Labels and StopSignal
// (ImageConfig's keys), of each history entry only created, created_by,
// author, comment and empty_layer.
func ociConfig(im *podImage) *Obj {
	o := NewObj().Set("architecture", im.Architecture)
	cfg := NewObj()
	if v, err := decodeOrdered(im.Config); err == nil {
		cfg = pick(v, "User", "Env", "Entrypoint", "Cmd", "WorkingDir", "Labels", "StopSignal")
	}
	o.Set("config", cfg)
	o.Set("created", im.Created.UTC().Format(time.RFC3339Nano))
	o.SetIf(im.Author != "", "author", im.Author)
	if h, err := decodeOrdered(im.History); err == nil {
		if arr, ok := h.([]any); ok {
			hist := make([]any, 0, len(arr))
			for _, e := range arr {
				hist = append(hist, pick(e, "created", "created_by", "author", "comment", "empty_layer"))
			}
			o.Set("history", hist)
		}
	}
	return o.Set("os", orDefault(im.Os, "linux")).
		Set("rootfs", NewObj().Set("diff_ids", orEmpty(im.RootFS.Layers)).Set("type", orDefault(im.RootFS.Type, "layers"))).
		SetIf(im.Variant != "", "variant", im.Variant)
}

// pick keeps the given keys of a decoded object, in that order, leaving
// out absent and null ones (Swift decodes null as nil and omits it).
func pick(v any, keys ...string) *Obj {
	out := NewObj()
	o, ok := v.(*Obj)
	if !ok {
		return out
	}
	for _, k := range keys {
		if val, ok := o.Get(k); ok && val != nil {
			out.Set(k, val)
		}
	}
	return out
}

// descriptorJSON is the image index descriptor ({size, mediaType, digest} in 0.x order).
func descriptorJSON(im *podImage) *Obj {
	return NewObj().Set("size", descriptorSize).Set("mediaType", indexMediaType).Set("digest", im.Digest)
}

// imageJSON renders one image for list/inspect in the version's shape.
func (a *app) imageJSON(e imageEntry, inspect bool) *Obj {
	im := e.img
	platform := NewObj().Set("os", orDefault(im.Os, "linux")).Set("architecture", im.Architecture).
		SetIf(im.Variant != "", "variant", im.Variant)
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
	// ImageList.swift: 0.8.0 prints ImageDescription {reference,
	// descriptor}; from 0.9.0 PrintableImage adds fullSize, the
	// ByteCountFormatter text of the image's size.
	return NewObj().SetIf(a.v.AtLeast("0.9.0"), "fullSize", decimalSize(im.Size)).Set("reference", e.ref).Set("descriptor", descriptorJSON(im))
}

// decimalSize formats like ByteCountFormatter (.file): decimal units.
// reconstructed: the precision per unit follows Foundation's usual output
// ("4.2 MB", "3.4 MB" and a comma-decimal "4,2 MB" are captured, samples
// §2.4; the stand-in writes a decimal point).
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
	case n == 1:
		return "1 byte"
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
	case p.Has("verbose"):
		fmt.Fprintln(a.stdout, renderTable(a.verboseImageRows(entries)))
	default:
		fmt.Fprintln(a.stdout, renderTable(a.imageRows(entries)))
	}
	return nil
}

// imageRows is the `image list` table (ImageList.swift before 1.0.0,
// ImageResource+ListDisplayable.swift from 1.0.0): NAME and TAG of the
// display reference ("<none>" without a tag) and the trimmed index digest.
func (a *app) imageRows(entries []imageEntry) [][]string {
	rows := [][]string{{"NAME", "TAG", "DIGEST"}}
	for _, e := range entries {
		name, tag := refNameTag(displayRef(e.ref))
		rows = append(rows, []string{name, tag, a.trimDigest(e.img.Digest)})
	}
	return rows
}

// verboseImageRows is `image list -v`: one row per platform of each
// image (ImageList.swift: SIZE before 0.9.0, FULL SIZE from it; the
// ByteCountFormatter size, the config's created text, digests trimmed as
// the table's). The stand-in's images have one platform each, whose
// manifest digest is podman's image id.
func (a *app) verboseImageRows(entries []imageEntry) [][]string {
	size := "FULL SIZE"
	if a.v.Before("0.9.0") {
		size = "SIZE"
	}
	rows := [][]string{{"NAME", "TAG", "INDEX DIGEST", "OS", "ARCH", "VARIANT", size, "CREATED", "MANIFEST DIGEST"}}
	for _, e := range entries {
		name, tag := refNameTag(displayRef(e.ref))
		rows = append(rows, []string{name, tag, a.trimDigest(e.img.Digest), orDefault(e.img.Os, "linux"), e.img.Architecture, e.img.Variant,
			decimalSize(e.img.Size), e.img.Created.UTC().Format(time.RFC3339Nano), a.trimDigest("sha256:" + e.img.ID)})
	}
	return rows
}

// trimDigest is Utility.trimDigest: the hex after "sha256:", cut to 24
// characters and "..." before 1.0.0, to 12 from 1.0.0.
func (a *app) trimDigest(d string) string {
	d = hexDigest(d)
	if oneX(a.v) {
		return d[:min(12, len(d))]
	}
	if len(d) > 24 {
		return d[:24] + "..."
	}
	return d
}

// cmdImageInspect prints images as JSON (Image/ImageInspect.swift).
// 1.x: any name not found fails the command with notFound "image not
// found: <names>", the names sorted, once each, joined by ", " (the 1.2.0
// capture names `nosuch` as "nosuch:latest", samples §2.6: the display
// form is printed). 0.x prints the images found (compact) and then fails
// for the missing ones: 0.8.0 with notFound "images: <names>" joined by
// newlines; from 0.9.0 each is logged (0.9–0.11 "<name>: <error>",
// 0.12 "image inspect failed" with name and error as metadata) and the
// InspectError struct is printed as Swift describes it, with the full
// references of the images found.
func cmdImageInspect(a *app, p *parsed) error {
	if err := a.up(); err != nil {
		return err
	}
	names := p.Pos
	if oneX(a.v) {
		names = uniq(names)
	}
	arr := []any{}
	var missing, found []string
	for _, ref := range names {
		e, _, err := a.findImage(ref)
		if err != nil {
			return err
		}
		if e == nil {
			missing = append(missing, ref)
			continue
		}
		found = append(found, e.ref)
		arr = append(arr, a.imageJSON(*e, true))
	}
	if len(missing) > 0 && oneX(a.v) {
		shown := make([]string, len(missing))
		for i, m := range missing {
			shown[i] = displayRef(normalizeRef(m))
		}
		sort.Strings(shown)
		return a.fail("notFound", "image not found: "+strings.Join(shown, ", "))
	}
	if len(arr) > 0 {
		a.printJSON(arr, true)
	}
	if len(missing) == 0 {
		return nil
	}
	if a.v.Before("0.9.0") {
		return a.fail("notFound", "images: "+strings.Join(missing, "\n"))
	}
	var failed []string
	for _, m := range missing {
		switch {
		case a.v.Before("0.10.0"):
			// reconstructed: the localizedDescription Foundation gives an
			// error that is not a LocalizedError (containerization < 0.26).
			fmt.Fprintf(a.stderr, "%s: The operation couldn’t be completed. (ContainerizationError.ContainerizationError error 1.)\n", m)
		case a.v.Before("0.12.0"):
			fmt.Fprintf(a.stderr, "%s: Image not found\n", m)
		default:
			fmt.Fprintf(a.stderr, "image inspect failed: [\"name\": %s, \"error\": Image not found]\n", m)
		}
		failed = append(failed, "("+swiftQuote(m)+`, notFound: "Image not found")`)
	}
	return failPlain("InspectError(succeeded: " + swiftArray(found) + ", failed: [" + strings.Join(failed, ", ") + "])")
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
// ignores them; the found ones are deleted one by one and their full
// references printed, a failure logged; the missing names and then the
// failed references end in internalError "failed to delete one or more
// images: [...]", the same text for a missing image and for one that
// failed to go. If any went, "Reclaimed <size> in disk space" follows (on
// stdout before 1.0.0, logged from 1.0.0). reconstructed: the size is
// that of the podman images removed (Apple counts the blobs it frees).
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
	type target struct {
		e      *imageEntry
		podRef string
	}
	var found []target
	var notFound []string
	for _, ref := range refs {
		e, podRef, err := a.findImage(ref)
		if err != nil {
			return err
		}
		if e == nil {
			notFound = append(notFound, ref)
			continue
		}
		found = append(found, target{e, podRef})
	}
	failures := notFound
	if p.Has("force") {
		failures = nil
	}
	deleted := false
	var freed int64
	for _, t := range found {
		if r := a.eng.run("rmi", t.podRef); r.ok() {
			freed += t.e.img.Size
		} else if r2 := a.eng.run("untag", t.podRef, t.podRef); !r2.ok() {
			// Apple's containers keep their own root filesystems: when podman
			// keeps the image for a container, the tag goes alone.
			// reconstructed: the error's description after the XPC round trip.
			fmt.Fprintf(a.stderr, "failed to delete %s: %s\n", t.e.ref, coded("internalError", r.message()))
			failures = append(failures, t.e.ref)
			continue
		}
		fmt.Fprintln(a.stdout, t.e.ref)
		deleted = true
	}
	if deleted {
		a.reclaimed(freed)
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

// cmdImageTag adds a reference to an image and prints the target as
// given (Image/ImageTag.swift, 0.8.0–1.2.2); a missing source is
// ClientImage.get's notFound "image with reference <source>".
func cmdImageTag(a *app, p *parsed) error {
	if err := a.up(); err != nil {
		return err
	}
	e, podRef, err := a.findImage(p.Pos[0])
	if err != nil {
		return err
	}
	if e == nil {
		return a.fail("notFound", "image with reference "+p.Pos[0])
	}
	target := normalizeRef(p.Pos[1])
	if r := a.eng.run("tag", podRef, podmanTag(target)); !r.ok() {
		return failPlain(r.message())
	}
	fmt.Fprintln(a.stdout, p.Pos[1])
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
// are stored where `run` will find them (BuildCommand.swift). validate()
// refuses a missing context directory and, from 0.11.0, a missing -f
// file or a context without Dockerfile or Containerfile (ValidationErrors:
// exit 64 with the usage); before 0.11.0 the last is found out in run()
// and printed plainly. Without -t the image is named by a lowercased UUID.
// Once built, the tags (normalised) are printed on stdout: "Successfully
// built <a, b>" before 1.0.0, one per line from 1.0.0.
func cmdBuild(a *app, p *parsed) error {
	ctx := "."
	if len(p.Pos) > 0 {
		ctx = p.Pos[0]
	}
	if _, err := os.Stat(ctx); err != nil {
		return validationError(p, "context dir does not exist "+ctx)
	}
	file := p.Val("file", "")
	if file != "" && a.v.AtLeast("0.11.0") {
		if _, err := os.Stat(file); err != nil {
			return validationError(p, "dockerfile does not exist "+file)
		}
	}
	if file == "" {
		// BuildFile.resolvePath: Dockerfile, else Containerfile.
		for _, n := range []string{"Dockerfile", "Containerfile"} {
			if _, err := os.Stat(filepath.Join(ctx, n)); err == nil {
				file = filepath.Join(ctx, n)
				break
			}
		}
		if file == "" && a.v.AtLeast("0.11.0") {
			return validationError(p, "dockerfile not found in context dir")
		}
	}
	if err := a.up(); err != nil {
		return err
	}
	if file == "" {
		return failPlain("failed to find Dockerfile or Containerfile in the context directory " + ctx)
	}
	if _, err := os.Stat(file); err != nil {
		// reconstructed: Foundation's description of the read error (before 0.11.0).
		return failPlain(`Error Domain=NSCocoaErrorDomain Code=260 "The file “` + filepath.Base(file) + `” couldn’t be opened because there is no such file."`)
	}
	tags := p.Vals("tag")
	if len(tags) == 0 {
		tags = []string{newUUID()}
	}
	names := make([]string, len(tags))
	for i, t := range tags {
		names[i] = normalizeRef(t)
	}
	// Sources/ContainerCommands/BuildCommand.swift (0.8.0 to 1.2.2): the
	// builder's `type=oci` export, its final image only, is loaded into
	// the image store (ClientImage.load) and tagged; the build's cache
	// stays in the builder (--cache-in/--cache-out). So no image of a
	// step reaches the store, as podman's layer cache would leave them.
	args := []string{"build", "--layers=false", "-f", file}
	if p.Has("pull") {
		args = append(args, "--pull=always")
	} else {
		args = append(args, "--pull=never")
	}
	for _, n := range names {
		args = append(args, "-t", podmanTag(n))
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
	if oneX(a.v) {
		fmt.Fprintln(a.stdout, strings.Join(names, "\n"))
	} else {
		fmt.Fprintln(a.stdout, "Successfully built "+strings.Join(names, ", "))
	}
	return nil
}

// validationError is a ValidationError thrown by a command's validate():
// swift-argument-parser prints it with the command's usage, exit 64.
func validationError(p *parsed, msg string) error {
	return &exitError{exitUsage, "Error: " + msg + "\nUsage: " + p.Table.Usage() +
		"\n  See 'container " + p.Table.Command.Path + " --help' for more information."}
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

// cmdImageSave writes images to an archive, -o or stdout
// (Image/ImageSave.swift, 0.8.0–1.2.2). A reference not found is
// reported as ClientImage.get's error ("failed to get image for reference
// <ref>: <error>": printed on stdout before 1.0.0, logged from 1.0.0) and
// the save ends in invalidArgument "failed to save image(s)". Once written,
// the references are printed: on stdout, even after an archive written to
// stdout until 1.2.1, logged instead then from 1.2.2 (apple/container#1801).
// reconstructed: podman writes an OCI archive of one image, several into a
// docker-archive; --platform, --os and --arch are not applied.
func cmdImageSave(a *app, p *parsed) error {
	if err := a.up(); err != nil {
		return err
	}
	var podRefs []string
	missing := false
	for _, ref := range p.Pos {
		e, podRef, err := a.findImage(ref)
		if err != nil {
			return err
		}
		if e == nil {
			line := "failed to get image for reference " + ref + ": " + coded("notFound", "image with reference "+ref)
			if oneX(a.v) {
				fmt.Fprintln(a.stderr, line)
			} else {
				fmt.Fprintln(a.stdout, line)
			}
			missing = true
			continue
		}
		podRefs = append(podRefs, podRef)
	}
	if missing {
		return a.fail("invalidArgument", "failed to save image(s)")
	}
	out := p.Val("output", "")
	target := out
	if out == "" {
		dir, err := os.MkdirTemp("", "container-save-")
		if err != nil {
			return failPlain(err.Error())
		}
		defer os.RemoveAll(dir)
		target = filepath.Join(dir, "out.tar")
	}
	args := []string{"save", "--format", "oci-archive", "-o", target}
	if len(podRefs) > 1 {
		args = []string{"save", "--format", "docker-archive", "-m", "-o", target}
	}
	if r := a.eng.run(append(args, podRefs...)...); !r.ok() {
		return a.fail("internalError", r.message()) // reconstructed
	}
	if out == "" {
		f, err := os.Open(target)
		if err != nil {
			return failPlain(err.Error())
		}
		_, err = io.Copy(a.stdout, f)
		f.Close()
		if err != nil {
			return failPlain(err.Error())
		}
	}
	for _, ref := range p.Pos {
		if out == "" && a.v.AtLeast("1.2.2") {
			fmt.Fprintln(a.stderr, ref)
		} else {
			fmt.Fprintln(a.stdout, ref)
		}
	}
	return nil
}

// loadedRE is podman load's line for each image it loaded.
var loadedRE = regexp.MustCompile(`(?m)^Loaded image(?:\(s\))?: (.+)$`)

// cmdImageLoad loads images from an archive, -i or stdin, and prints
// their references (Image/ImageLoad.swift, 0.8.0–1.2.2): under "Loaded
// images:" before 1.0.0, alone from 1.0.0. A missing -i file ends the
// command with exit 1 after "File does not exist <path>" on stdout before
// 1.0.0, after the log line "file does not exist" with the path as
// metadata from 1.0.0.
func cmdImageLoad(a *app, p *parsed) error {
	in := p.Val("input", "")
	if in != "" {
		if _, err := os.Stat(in); err != nil {
			if oneX(a.v) {
				fmt.Fprintf(a.stderr, "file does not exist: [\"path\": %s]\n", in)
			} else {
				fmt.Fprintln(a.stdout, "File does not exist "+in)
			}
			return exitCode(exitFailure)
		}
	}
	if err := a.up(); err != nil {
		return err
	}
	if in == "" {
		dir, err := os.MkdirTemp("", "container-load-")
		if err != nil {
			return failPlain(err.Error())
		}
		defer os.RemoveAll(dir)
		in = filepath.Join(dir, "in.tar")
		f, err := os.Create(in)
		if err != nil {
			return failPlain(err.Error())
		}
		var src io.Reader = a.stdin
		if a.stdin == nil {
			src = strings.NewReader("")
		}
		_, err = io.Copy(f, src)
		f.Close()
		if err != nil {
			return failPlain(err.Error())
		}
	}
	r := a.eng.run("load", "-i", in)
	if !r.ok() {
		return a.fail("internalError", r.message()) // reconstructed
	}
	if !oneX(a.v) {
		fmt.Fprintln(a.stdout, "Loaded images:")
	}
	for _, m := range loadedRE.FindAllStringSubmatch(string(r.stdout)+string(r.stderr), -1) {
		for _, ref := range strings.Split(m[1], ",") {
			if ref = strings.TrimSpace(ref); ref != "" {
				fmt.Fprintln(a.stdout, appleFromPodman(ref))
			}
		}
	}
	return nil
}
