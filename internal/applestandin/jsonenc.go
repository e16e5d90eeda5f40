package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"unicode/utf8"
)

// Obj is a JSON object that remembers the order its keys were set in.
// 0.x output keeps that order (Swift's unordered encoding, copied from the
// samples); 1.x output sorts keys when encoding.
type Obj struct {
	fields []field
}

type field struct {
	key string
	val any
}

// NewObj returns an empty object.
func NewObj() *Obj { return &Obj{} }

// Set adds key (or replaces its value in place) and returns o for chaining.
func (o *Obj) Set(key string, val any) *Obj {
	for i := range o.fields {
		if o.fields[i].key == key {
			o.fields[i].val = val
			return o
		}
	}
	o.fields = append(o.fields, field{key, val})
	return o
}

// SetIf sets key only when ok is true (optional fields are omitted, not null).
func (o *Obj) SetIf(ok bool, key string, val any) *Obj {
	if ok {
		o.Set(key, val)
	}
	return o
}

// Get returns the value of key.
func (o *Obj) Get(key string) (any, bool) {
	for _, f := range o.fields {
		if f.key == key {
			return f.val, true
		}
	}
	return nil, false
}

// Keys returns the keys in insertion order.
func (o *Obj) Keys() []string {
	out := make([]string, len(o.fields))
	for i, f := range o.fields {
		out[i] = f.key
	}
	return out
}

// Len is the number of keys.
func (o *Obj) Len() int { return len(o.fields) }

// Encoding selects how values are written, the way Swift's JSONEncoder
// options do on the real CLI.
type Encoding struct {
	// Sorted writes object keys in byte order (.sortedKeys, 1.x).
	Sorted bool
	// EscapeSlash writes "/" as "\/" (Foundation's default before 1.4).
	EscapeSlash bool
}

// encodingFor returns the encoding the emulated version uses.
func encodingFor(v Version) Encoding {
	return Encoding{Sorted: oneX(v), EscapeSlash: escapeSlashes(v)}
}

// Compact encodes v on one line without spaces (JSONEncoder without .prettyPrinted).
func (e Encoding) Compact(v any) []byte {
	var b bytes.Buffer
	e.write(&b, v, -1)
	return b.Bytes()
}

// Pretty encodes v the way Foundation pretty-prints on macOS: two-space
// indent, `"key" : value`, and empty arrays/objects as the opening bracket,
// a blank line and the closing bracket at the parent's indent. No trailing
// newline (the CLI's print adds one).
func (e Encoding) Pretty(v any) []byte {
	var b bytes.Buffer
	e.write(&b, v, 0)
	return b.Bytes()
}

// write emits v; indent < 0 means compact.
func (e Encoding) write(b *bytes.Buffer, v any, indent int) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case string:
		e.writeString(b, x)
	case int:
		b.WriteString(strconv.Itoa(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case uint64:
		b.WriteString(strconv.FormatUint(x, 10))
	case float64:
		b.WriteString(formatDouble(x))
	case json.Number:
		b.WriteString(x.String())
	case []string:
		arr := make([]any, len(x))
		for i, s := range x {
			arr[i] = s
		}
		e.writeArray(b, arr, indent)
	case []any:
		e.writeArray(b, x, indent)
	case []*Obj:
		arr := make([]any, len(x))
		for i, o := range x {
			arr[i] = o
		}
		e.writeArray(b, arr, indent)
	case *Obj:
		e.writeObject(b, x, indent)
	case map[string]string:
		o := NewObj()
		for _, k := range sortedKeys(x) {
			o.Set(k, x[k])
		}
		e.writeObject(b, o, indent)
	default:
		panic(fmt.Sprintf("jsonenc: unsupported type %T", v))
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (e Encoding) writeArray(b *bytes.Buffer, arr []any, indent int) {
	b.WriteByte('[')
	if indent < 0 {
		for i, v := range arr {
			if i > 0 {
				b.WriteByte(',')
			}
			e.write(b, v, -1)
		}
		b.WriteByte(']')
		return
	}
	b.WriteByte('\n')
	if len(arr) == 0 {
		b.WriteByte('\n')
	}
	for i, v := range arr {
		pad(b, indent+2)
		e.write(b, v, indent+2)
		if i < len(arr)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	pad(b, indent)
	b.WriteByte(']')
}

func (e Encoding) writeObject(b *bytes.Buffer, o *Obj, indent int) {
	fields := o.fields
	if e.Sorted {
		fields = append([]field(nil), fields...)
		sort.SliceStable(fields, func(i, j int) bool { return fields[i].key < fields[j].key })
	}
	b.WriteByte('{')
	if indent < 0 {
		for i, f := range fields {
			if i > 0 {
				b.WriteByte(',')
			}
			e.writeString(b, f.key)
			b.WriteByte(':')
			e.write(b, f.val, -1)
		}
		b.WriteByte('}')
		return
	}
	b.WriteByte('\n')
	if len(fields) == 0 {
		b.WriteByte('\n')
	}
	for i, f := range fields {
		pad(b, indent+2)
		e.writeString(b, f.key)
		b.WriteString(" : ")
		e.write(b, f.val, indent+2)
		if i < len(fields)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	pad(b, indent)
	b.WriteByte('}')
}

func pad(b *bytes.Buffer, n int) {
	for i := 0; i < n; i++ {
		b.WriteByte(' ')
	}
}

// writeString escapes like Foundation: quote, backslash and the usual
// control escapes, other control characters as \u00xx, optionally "/" as
// "\/"; everything else (including non-ASCII) is written raw.
// reconstructed: the hex case of \u escapes is not shown in any capture.
func (e Encoding) writeString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch c {
			case '"':
				b.WriteString(`\"`)
			case '\\':
				b.WriteString(`\\`)
			case '/':
				if e.EscapeSlash {
					b.WriteString(`\/`)
				} else {
					b.WriteByte('/')
				}
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			default:
				if c < 0x20 {
					fmt.Fprintf(b, `\u%04x`, c)
				} else {
					b.WriteByte(c)
				}
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteString("\ufffd")
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
}

// formatDouble prints a Double the way Swift does in JSON: the shortest
// representation that round-trips, without an exponent for dates.
func formatDouble(f float64) string {
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// decodeOrdered parses JSON into the value model used here: objects become
// *Obj in document order, arrays []any, numbers json.Number.
func decodeOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := NewObj()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				o.Set(k, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return o, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return arr, nil
		}
		return nil, fmt.Errorf("unexpected delimiter %v", t)
	default:
		return t, nil // string, json.Number, bool or nil
	}
}
