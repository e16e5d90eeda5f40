package terminal

// sanitizer stands between a program's output and the emulator. The
// output comes from inside a sandbox and is untrusted; the emulator
// (vt10x) trusts the numbers in control sequences: a negative count
// slices out of range (a panic), a huge tab count loops for as long while
// holding the screen's lock, and colour-setting OSC sequences grow a map
// without bound. So every sequence is read whole (bounded) before it
// passes:
//
//   - CSI: a sequence with a '-' or a byte over 0x7f is dropped, numbers
//     over maxParam become maxParam, and one longer than maxCSI is dropped;
//   - OSC: only 0, 1 and 2 (the title) pass, up to maxOSC bytes;
//   - DCS, APC, PM and SOS strings are dropped (at most maxString bytes
//     are skipped, so one left open does not swallow the rest);
//   - CAN and SUB abort a sequence, as a terminal does.
//
// Text and other escape sequences pass unchanged. State carries over
// between writes.
type sanitizer struct {
	state int
	seq   []byte // the sequence being read, ESC included
	n     int    // bytes skipped in a dropped string
}

const (
	maxParam  = 999
	maxCSI    = 64
	maxOSC    = 512
	maxString = 4096
)

const (
	zText = iota
	zEsc
	zEscInter // ESC and intermediates, waiting for the final byte
	zCSI
	zCSISkip // a CSI too long: skipped to its final byte
	zOSC
	zOSCEsc
	zDrop    // a string being dropped
	zDropEsc // ESC inside it
)

const (
	esc = 0x1b
	can = 0x18
	sub = 0x1a
	bel = 0x07
)

// filter appends to out what of p the emulator may see.
func (z *sanitizer) filter(out, p []byte) []byte {
	for _, b := range p {
		out = z.byte(out, b)
	}
	return out
}

func (z *sanitizer) start(b byte) {
	z.seq = append(z.seq[:0], b)
}

func (z *sanitizer) byte(out []byte, b byte) []byte {
	switch z.state {
	case zText:
		if b == esc {
			z.start(b)
			z.state = zEsc
			return out
		}
		return append(out, b)
	case zEsc:
		if o, ok := z.interrupt(out, b); ok {
			return o
		}
		switch {
		case b == '[':
			z.seq = append(z.seq, b)
			z.state = zCSI
		case b == ']':
			z.seq = append(z.seq, b)
			z.state = zOSC
		case b == 'P' || b == '_' || b == '^' || b == 'X':
			z.n, z.state = 0, zDrop
		case b >= 0x20 && b <= 0x2f:
			z.seq = append(z.seq, b)
			z.state = zEscInter
		default:
			out = append(append(out, z.seq...), b)
			z.state = zText
		}
		return out
	case zEscInter:
		if o, ok := z.interrupt(out, b); ok {
			return o
		}
		switch {
		case b >= 0x20 && b <= 0x2f && len(z.seq) < 8:
			z.seq = append(z.seq, b)
		default:
			out = append(append(out, z.seq...), b)
			z.state = zText
		}
		return out
	case zCSI:
		if o, ok := z.interrupt(out, b); ok {
			return o
		}
		switch {
		case b >= 0x40 && b <= 0x7e:
			out = appendCSI(out, z.seq, b)
			z.state = zText
		case b >= 0x80 || len(z.seq) >= maxCSI:
			// The emulator decodes UTF-8 and keeps a CSI rune's low
			// byte: U+0139 would count as '9' and U+012D as '-', past
			// the checks above. No CSI has a byte over 0x7f.
			z.state = zCSISkip
		default:
			z.seq = append(z.seq, b)
		}
		return out
	case zCSISkip:
		if b >= 0x40 && b <= 0x7e || b == can || b == sub {
			z.state = zText
		} else if b == esc {
			z.start(b)
			z.state = zEsc
		}
		return out
	case zOSC:
		switch {
		case b == can || b == sub:
			z.state = zText
		case b == bel:
			out = appendOSC(out, z.seq, []byte{bel})
			z.state = zText
		case b == esc:
			z.state = zOSCEsc
		case len(z.seq) >= maxOSC:
			z.n, z.state = 0, zDrop
		default:
			z.seq = append(z.seq, b)
		}
		return out
	case zOSCEsc:
		if b == '\\' {
			out = appendOSC(out, z.seq, []byte{esc, '\\'})
			z.state = zText
			return out
		}
		// Not a string terminator: the OSC is abandoned, and the ESC
		// starts a sequence of its own.
		z.start(esc)
		z.state = zEsc
		return z.byte(out, b)
	case zDrop:
		z.n++
		switch {
		case b == bel || b == can || b == sub || z.n > maxString:
			z.state = zText
		case b == esc:
			z.state = zDropEsc
		}
		return out
	case zDropEsc:
		if b == '\\' {
			z.state = zText
			return out
		}
		z.state = zDrop
		return z.byte(out, b)
	}
	return out
}

// interrupt handles, inside an escape or CSI sequence, the bytes that act
// on their own: CAN and SUB abort the sequence, ESC starts another, and
// other controls act at once (the sequence goes on). It reports whether b
// was one of them.
func (z *sanitizer) interrupt(out []byte, b byte) ([]byte, bool) {
	switch {
	case b == can || b == sub:
		z.state = zText
	case b == esc:
		z.start(b)
		z.state = zEsc
	case b < 0x20:
		out = append(out, b)
	default:
		return out, false
	}
	return out, true
}

// appendCSI appends the CSI sequence seq (ESC [ params) ending in final,
// its numbers capped, or nothing when a parameter is negative.
func appendCSI(out, seq []byte, final byte) []byte {
	params := seq[2:]
	for _, c := range params {
		if c == '-' {
			return out
		}
	}
	out = append(out, seq[:2]...)
	for i := 0; i < len(params); {
		c := params[i]
		if c < '0' || c > '9' {
			out = append(out, c)
			i++
			continue
		}
		j, v := i, 0
		for j < len(params) && params[j] >= '0' && params[j] <= '9' {
			if v <= maxParam {
				v = v*10 + int(params[j]-'0')
			}
			j++
		}
		if v > maxParam {
			out = append(out, "999"...)
		} else {
			out = append(out, params[i:j]...)
		}
		i = j
	}
	return append(out, final)
}

// appendOSC appends the OSC sequence seq (ESC ] text) with its
// terminator when it sets the title (0, 1 or 2), else nothing.
func appendOSC(out, seq, term []byte) []byte {
	text := seq[2:]
	switch {
	case len(text) >= 2 && (text[0] == '0' || text[0] == '1' || text[0] == '2') && text[1] == ';':
		return append(append(out, seq...), term...)
	}
	return out
}
