package msglimit

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// readLines passes msgs through a Limiter with Blobs and returns the lines
// the transport reads.
func readLines(t *testing.T, b *Blobs, msgs ...string) []string {
	t.Helper()
	lim := New(strings.NewReader(strings.Join(msgs, "")), io.Discard, Options{Blobs: b})
	r := bufio.NewReaderSize(lim.Reader(), 1<<10)
	var out []string
	for {
		line, err := r.ReadString('\n')
		if line != "" {
			out = append(out, line)
		}
		if err != nil {
			return out
		}
	}
}

func callLine(args map[string]any) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/call",
		"params": map[string]any{"name": "write_file", "arguments": args}})
	return string(b) + "\n"
}

// TestLiftLongStrings: the long strings of a long message (base64, text
// full of escapes, one nested in an array) reach the transport as tokens,
// the rest of the message is unchanged, and Resolve gives back exactly the
// strings sent, once.
func TestLiftLongStrings(t *testing.T) {
	raw := make([]byte, 1_500_000)
	rand.Read(raw)
	b64 := base64.StdEncoding.EncodeToString(raw)
	text := strings.Repeat("line \"quoted\" and \\ back\tslash é ✓\n", 5000)
	args := map[string]any{"path": "/tmp/x", "content": b64, "files": []any{map[string]any{"content": text, "path": "a"}}, "short": "kept"}
	blobs := NewBlobs()
	lines := readLines(t, blobs, callLine(args), `{"jsonrpc":"2.0","id":8,"method":"ping"}`+"\n")
	if len(lines) != 2 || lines[1] != `{"jsonrpc":"2.0","id":8,"method":"ping"}`+"\n" {
		t.Fatalf("lines: %d, last %q", len(lines), lines[len(lines)-1])
	}
	if len(lines[0]) > 2000 {
		t.Fatalf("the long strings were not lifted: a %d-byte line", len(lines[0]))
	}
	if blobs.Len() != 2 {
		t.Fatalf("%d blobs, want 2", blobs.Len())
	}
	var msg struct {
		ID     int `json:"id"`
		Params struct {
			Arguments map[string]any `json:"arguments"`
		} `json:"params"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &msg); err != nil || msg.ID != 7 {
		t.Fatalf("the lifted message: %v %q", err, lines[0])
	}
	got, ok := blobs.Resolve(msg.Params.Arguments)
	m := got.(map[string]any)
	if !ok || m["content"] != b64 || m["files"].([]any)[0].(map[string]any)["content"] != text || m["short"] != "kept" || m["path"] != "/tmp/x" {
		t.Fatal("Resolve did not give back the strings sent")
	}
	if blobs.Len() != 0 {
		t.Fatalf("%d blobs left after Resolve", blobs.Len())
	}
	if _, ok := blobs.Resolve(map[string]any{"content": m["content"]}); !ok {
		t.Fatal("a plain string did not resolve to itself")
	}
}

// TestLiftLeavesOthersAlone: short messages, messages under the lifting
// size read in several pieces, and long messages that are not valid JSON
// (or carry raw control characters) reach the transport byte for byte, and
// leave no blob behind.
func TestLiftLeavesOthersAlone(t *testing.T) {
	mid := callLine(map[string]any{"content": strings.Repeat("m", 300_000)})
	long := callLine(map[string]any{"content": strings.Repeat("x", 1_200_000)})
	broken := strings.Replace(long, `"content"`, `"content" :: `, 1)
	control := strings.Replace(long, "xxxx", "x\x01xx", 1)
	for name, msg := range map[string]string{"short": `{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n", "mid": mid, "broken": broken, "control": control} {
		blobs := NewBlobs()
		lines := readLines(t, blobs, msg)
		if len(lines) != 1 || lines[0] != msg {
			t.Errorf("%s: changed on the way (%d lines)", name, len(lines))
		}
		if blobs.Len() != 0 {
			t.Errorf("%s: %d blobs left", name, blobs.Len())
		}
	}
}

// TestForgedToken: a client string that looks like a token of another
// store (or of this one, made up) is not resolved to anything lifted.
func TestForgedToken(t *testing.T) {
	a, b := NewBlobs(), NewBlobs()
	tok := a.put("secret")
	if got, _ := b.Resolve(tok); got != tok {
		t.Fatalf("another store resolved a token: %q", got)
	}
	if got, ok := a.Resolve(a.prefix + "ffffffff"); got != "" || ok {
		t.Fatalf("a made-up token: %q %v", got, ok)
	}
	if got, _ := a.Resolve(tok); got != "secret" {
		t.Fatalf("the real token: %q", got)
	}
}

// TestLiftOverLimit: a held message over the limit is refused as before,
// with nothing lifted and the next message served.
func TestLiftOverLimit(t *testing.T) {
	blobs := NewBlobs()
	var out bytes.Buffer
	big := callLine(map[string]any{"content": strings.Repeat("y", 3<<20)})
	lim := New(strings.NewReader(big+`{"jsonrpc":"2.0","id":9,"method":"ping"}`+"\n"), &out, Options{Blobs: blobs, Max: 2 << 20})
	got, _ := io.ReadAll(lim.Reader())
	if string(got) != `{"jsonrpc":"2.0","id":9,"method":"ping"}`+"\n" {
		t.Fatalf("the transport read %d bytes: %.200q", len(got), got)
	}
	if !strings.Contains(out.String(), `"id":7`) || !strings.Contains(out.String(), "too large") || blobs.Len() != 0 {
		t.Fatalf("reply %q, %d blobs", out.String(), blobs.Len())
	}
}

// TestLiftLeavesKeysAlone: a long object key is not lifted (the handler
// would see a token for a name), while a long value after it is.
func TestLiftLeavesKeysAlone(t *testing.T) {
	key := strings.Repeat("k", 70_000)
	msg := callLine(map[string]any{key: strings.Repeat("v", 1_200_000)})
	blobs := NewBlobs()
	lines := readLines(t, blobs, msg)
	if len(lines) != 1 || !strings.Contains(lines[0], key) || len(lines[0]) > 80_000 || blobs.Len() != 1 {
		t.Fatalf("%d lines, %d bytes, %d blobs", len(lines), len(lines[0]), blobs.Len())
	}
}

// TestBlobsAreCapped: what waits for handlers is bounded, oldest first.
func TestBlobsAreCapped(t *testing.T) {
	b := NewBlobs()
	big := strings.Repeat("z", blobCap/3)
	first := b.put(big)
	for range 3 {
		b.put(big)
	}
	if b.Len() != 3 || b.held > blobCap {
		t.Fatalf("%d blobs, %d bytes held", b.Len(), b.held)
	}
	if _, ok := b.Resolve(first); ok {
		t.Fatal("the oldest was kept over the cap")
	}
}
