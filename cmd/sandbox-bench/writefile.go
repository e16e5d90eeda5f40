package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"
)

// benchWriteFile: a 24 MB write_file over an existing file, which lands
// whole (written beside it, checked, renamed), against the in-place write
// it replaced: the same bytes appended to an emptied file, the path an
// append still takes. Five of each, alternating, medians compared.
func (b *bench) benchWriteFile() error {
	data := make([]byte, 24_000_000)
	_, _ = rand.Read(data)
	content := base64.StdEncoding.EncodeToString(data)
	const path = "/workspace/bench-write"
	if _, _, err := b.call("write_file", map[string]any{"path": path, "content": content, "encoding": "base64"}); err != nil {
		return err
	}
	var atomic, inPlace []time.Duration
	for range 5 {
		_, took, err := b.call("write_file", map[string]any{"path": path, "content": content, "encoding": "base64"})
		if err != nil {
			return err
		}
		atomic = append(atomic, took)
		if _, _, err := b.call("exec", map[string]any{"command": ": >" + path + ".append"}); err != nil {
			return err
		}
		_, took, err = b.call("write_file", map[string]any{"path": path + ".append", "content": content, "encoding": "base64", "append": true})
		if err != nil {
			return err
		}
		inPlace = append(inPlace, took)
	}
	a, p := median(atomic), median(inPlace)
	report("24 MB write_file over a file (whole or not)", ms(a), ms(p)+" (in place)", ratio(a, p), "<= 1.2x", ratio(a, p) <= 1.2)
	_, _, err := b.call("exec", map[string]any{"command": fmt.Sprintf("rm -f %s %s.append", path, path)})
	return err
}
