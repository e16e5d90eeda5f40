package terminal

// stripper removes terminal control sequences from a byte stream, so
// that what a program printed reads as text: CSI (ESC [ … final), OSC
// (ESC ] … BEL or ST), other ESC sequences, carriage returns and the
// C0 controls other than newline and tab. Backspace removes the byte
// before it when that byte is still in the same write. Its state carries
// over between writes: a sequence split across reads is still removed.
type stripper struct {
	state int
	n     int // bytes of the current string sequence
}

// maxStripString bounds a string sequence (OSC, DCS, …) the stripper
// skips: one left open does not swallow the rest of the output.
const maxStripString = 4096

const (
	stText = iota
	stEsc
	stCSI
	stOSC
	stOSCEsc
	stEscInter // ESC followed by an intermediate byte (charset designations)
)

// strip appends to out the text of p and returns it.
func (s *stripper) strip(out, p []byte) []byte {
	for _, c := range p {
		switch s.state {
		case stText:
			switch {
			case c == 0x1b:
				s.state = stEsc
			case c == '\n' || c == '\t':
				out = append(out, c)
			case c == 0x08:
				if n := len(out); n > 0 && out[n-1] != '\n' {
					out = out[:n-1]
				}
			case c < 0x20 || c == 0x7f:
				// carriage return, bell and the other controls
			default:
				out = append(out, c)
			}
		case stEsc:
			switch {
			case c == '[':
				s.state = stCSI
			case c == ']' || c == 'P' || c == '_' || c == '^' || c == 'X':
				s.state, s.n = stOSC, 0 // OSC, DCS, APC, PM, SOS: all end with ST
			case c >= 0x20 && c <= 0x2f:
				s.state = stEscInter
			default:
				s.state = stText
			}
		case stEscInter:
			if c < 0x20 || c > 0x2f {
				s.state = stText
			}
		case stCSI:
			if c >= 0x40 && c <= 0x7e || c == 0x18 || c == 0x1a {
				s.state = stText
			}
		case stOSC:
			s.n++
			switch {
			case c == 0x07 || c == 0x18 || c == 0x1a || s.n > maxStripString:
				s.state = stText
			case c == 0x1b:
				s.state = stOSCEsc
			}
		case stOSCEsc:
			if c == '\\' {
				s.state = stText
			} else {
				s.state = stOSC
			}
		}
	}
	return out
}
