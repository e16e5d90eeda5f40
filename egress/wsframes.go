package egress

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// A WebSocket whose handshake had a secret swapped in goes through with
// its frames from the host read: the data in them is scrubbed as a body
// is (a value cut between frames of one message is caught), control
// frames' payloads too. The handshake asks for no extension, so that no
// frame is compressed, and a host that switches one on anyway is
// refused. Frames from the sandbox go on as they are: placeholders in
// them are not swapped.
//
// Scrubbing changes lengths, so each frame the host sends is sent on as
// one or more frames of the same message (RFC 6455 lets an intermediary
// refragment a message when no extension is in use).
//
// A message is scrubbed as one stream, whatever its frames; messages are
// not: a value the host cuts across two messages (or a message and a
// control frame) reaches the client in two parts, as a value the host
// encodes would. Only a host that writes the handshake's headers into
// its messages, cutting them where the client asks, could do that.

// isWebSocket reports whether upgrade asks for a WebSocket.
func isWebSocket(upgrade string) bool {
	for _, p := range strings.Split(upgrade, ",") {
		if strings.EqualFold(strings.TrimSpace(p), "websocket") {
			return true
		}
	}
	return false
}

// WebSocket opcodes.
const (
	wsContinuation = 0x0
	wsClose        = 0x8
)

// maxControlPayload is the largest payload a control frame may carry.
const maxControlPayload = 125

// wsScrub copies the frames the host sends (src) to the sandbox's client
// (dst), with the values of secrets replaced by their placeholders,
// until src ends or a frame breaks the protocol (an error: the caller
// ends both connections).
func wsScrub(dst io.Writer, src io.Reader, secrets []Secret) error {
	var (
		hdr      [14]byte
		msgOp    byte   // the data message under way: its opcode
		inMsg    bool   // a data message is under way
		started  bool   // its first frame was sent on
		held     []byte // scrubbed, held back: may begin a value
		chunk    = make([]byte, 32<<10)
		frameOut = make([]byte, 0, 32<<10+14)
	)
	send := func(fin bool, op byte, payload []byte) error {
		frameOut = appendFrame(frameOut[:0], fin, op, payload)
		_, err := dst.Write(frameOut)
		return err
	}
	for {
		if _, err := io.ReadFull(src, hdr[:2]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		fin, rsv, op := hdr[0]&0x80 != 0, hdr[0]&0x70, hdr[0]&0x0f
		masked, n := hdr[1]&0x80 != 0, uint64(hdr[1]&0x7f)
		switch {
		case rsv != 0:
			return errors.New("a frame with extension bits, which no extension asked for")
		case masked:
			return errors.New("a masked frame from the host")
		}
		switch n {
		case 126:
			if _, err := io.ReadFull(src, hdr[2:4]); err != nil {
				return err
			}
			n = uint64(binary.BigEndian.Uint16(hdr[2:4]))
		case 127:
			if _, err := io.ReadFull(src, hdr[2:10]); err != nil {
				return err
			}
			n = binary.BigEndian.Uint64(hdr[2:10])
			if n>>63 != 0 {
				return errors.New("a frame length with its top bit set")
			}
		}
		if op >= 0x8 { // control: whole, short, scrubbed in one piece
			if !fin || n > maxControlPayload {
				return fmt.Errorf("a control frame (opcode %d) fragmented or of %d bytes", op, n)
			}
			p := make([]byte, n)
			if _, err := io.ReadFull(src, p); err != nil {
				return err
			}
			if scrubbed, _ := scanSecrets(p, secrets, true); len(scrubbed) > maxControlPayload {
				// Longer with placeholders than a control frame holds:
				// a close keeps its status code (where no value began in
				// it) and loses its reason, a ping or pong goes empty.
				if op == wsClose && len(p) >= 2 && bytes.HasPrefix(scrubbed, p[:2]) {
					p = p[:2]
				} else {
					p = nil
				}
			} else {
				p = scrubbed
			}
			if err := send(true, op, p); err != nil {
				return err
			}
			continue
		}
		switch {
		case op == wsContinuation && !inMsg:
			return errors.New("a continuation frame outside a message")
		case op != wsContinuation && inMsg:
			return errors.New("a new message before the last one ended")
		case op != wsContinuation:
			msgOp, inMsg, started, held = op, true, false, held[:0]
		}
		// The payload, as it comes (up to a chunk a read), scrubbed with
		// what was held back; sent on as frames of the message, the
		// last of a final frame with its end.
		for done := false; !done; {
			var got []byte
			if n > 0 {
				m, err := src.Read(chunk[:min(uint64(len(chunk)), n)])
				if m == 0 && err != nil {
					if errors.Is(err, io.EOF) {
						err = io.ErrUnexpectedEOF
					}
					return err
				}
				got, n = chunk[:m], n-uint64(m)
			}
			end := n == 0 && fin
			out, rest := scanSecrets(append(held, got...), secrets, end)
			held = append(held[:0:0], rest...)
			done = n == 0
			if len(out) == 0 && !end {
				continue
			}
			o := byte(wsContinuation)
			if !started {
				o, started = msgOp, true
			}
			if err := send(end, o, out); err != nil {
				return err
			}
		}
		if fin {
			inMsg, held = false, held[:0]
		}
	}
}

// appendFrame appends to b an unmasked frame (as a server sends) with
// payload p.
func appendFrame(b []byte, fin bool, op byte, p []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	switch n := len(p); {
	case n <= 125:
		b = append(b, b0, byte(n))
	case n <= 0xffff:
		b = append(b, b0, 126, byte(n>>8), byte(n))
	default:
		b = append(b, b0, 127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return append(b, p...)
}

// wsHandshakeWithSecret prepares a WebSocket handshake that carries a
// secret: no extension is asked for, so that every frame can be read.
func wsHandshakeWithSecret(h http.Header) {
	h.Del("Sec-WebSocket-Extensions")
}

// wsSwitchRefusal says why the host's answer to such a handshake cannot
// be passed on ("" when it can).
func wsSwitchRefusal(resp *http.Response, where string) string {
	// The extension's name is not quoted: the host may have echoed the
	// value in it.
	for _, v := range resp.Header.Values("Sec-WebSocket-Extensions") {
		if strings.TrimSpace(v) != "" {
			return where + " switched on a WebSocket extension no one asked for: its frames could not be read for the secret's value"
		}
	}
	return ""
}
