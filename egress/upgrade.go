package egress

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// A request may ask to switch its connection to another protocol (a
// WebSocket's handshake: Connection: Upgrade, Upgrade: websocket). The
// proxy passes the ask on, and when the upstream agrees (101), carries
// the switched connection's bytes both ways until they end. On a request
// that had a secret swapped in, only a WebSocket is let through, with the
// upstream's frames read and scrubbed (wsframes.go): another protocol's
// bytes the proxy cannot read, and they could carry the value back into
// the sandbox.

// upgradeOf is the protocol that a request with header h asks to switch
// to: its Upgrade header when Connection names upgrade, else "".
func upgradeOf(h http.Header) string {
	for _, v := range h.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return strings.TrimSpace(strings.Join(h.Values("Upgrade"), ", "))
			}
		}
	}
	return ""
}

// printableValue reports whether v holds only printable ASCII, as a
// header value that is written back as read may.
func printableValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < ' ' || v[i] > '~' {
			return false
		}
	}
	return true
}

// keepUpgrade puts back, on a request whose hop headers were stripped,
// the ask to switch to upgrade ("" for none).
func keepUpgrade(h http.Header, upgrade string) {
	if upgrade != "" {
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", upgrade)
	}
}

// upgradeWithSecret is the answer to a request to switch protocols, to
// another than a WebSocket, that carries a secret.
func upgradeWithSecret(host string, port int, upgrade string) string {
	return fmt.Sprintf("the sandbox's proxy does not switch a connection to %s (%s) on a request that carries a secret: "+
		"what %s sends after the switch could bring the secret's value into the sandbox (a WebSocket it does carry, reading its frames)", hostPort(host, port), shorten(upgrade, 40), host)
}

// checkUpgradeSecret decides on a request to switch to upgrade that had
// secrets (used) swapped in: "" lets it go (a WebSocket, asked for with
// no extension), else the refusal to answer with.
func checkUpgradeSecret(h http.Header, host string, port int, upgrade string, used []Secret) string {
	if upgrade == "" || len(used) == 0 {
		return ""
	}
	if !isWebSocket(upgrade) {
		return upgradeWithSecret(host, port, upgrade)
	}
	wsHandshakeWithSecret(h)
	return ""
}

// switchProtocols answers the client with resp, the upstream's 101 to a
// request that asked to switch to upgrade, then pipes the client (cw,
// read through cr) and the upstream (uw, read through ur) together until
// both directions end. An upstream that switched unasked, or without saying to what, gets
// the client a 502 instead. Where the request had secrets (used) swapped
// in, the answer's headers and the upstream's WebSocket frames are
// scrubbed of their values.
func switchProtocols(cw net.Conn, cr io.Reader, uw net.Conn, ur io.Reader, resp *http.Response, upgrade, where string, used []Secret) {
	proto := strings.TrimSpace(resp.Header.Get("Upgrade"))
	switch {
	case upgrade == "":
		writeStatus(cw, http.StatusBadGateway, where+" switched protocols on a request that did not ask it to", nil)
		return
	case proto == "" || !printableValue(proto):
		writeStatus(cw, http.StatusBadGateway, where+" switched protocols without saying to which", nil)
		return
	}
	if len(used) > 0 {
		why := wsSwitchRefusal(resp, where)
		if why == "" && !isWebSocket(proto) {
			why = where + " switched to another protocol than the WebSocket asked for"
		}
		if why != "" {
			writeStatus(cw, http.StatusBadGateway, why, nil)
			return
		}
		proto = scrubValue(proto, used)
	}
	hdr := scrubHeader(resp.Header.Clone(), used)
	stripHop(hdr)
	hdr.Del("Content-Length")
	var head strings.Builder
	head.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	_ = hdr.Write(&head)
	fmt.Fprintf(&head, "Connection: Upgrade\r\nUpgrade: %s\r\n\r\n", proto)
	if _, err := io.WriteString(cw, head.String()); err != nil {
		return
	}
	var scrub func(io.Writer, io.Reader) error
	if len(used) > 0 {
		// The upstream's WebSocket frames, scrubbed of the values.
		scrub = func(w io.Writer, r io.Reader) error { return wsScrub(w, r, used) }
	}
	pipe(cw, cr, uw, ur, scrub)
}
