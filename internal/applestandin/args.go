package main

import (
	"strings"
)

// opt describes one option the way swift-argument-parser declares it.
type opt struct {
	names []string // e.g. "-c", "--cpus"; the first long name is the key
	value string   // value placeholder ("cpus"); empty for a flag
	since string   // first version that has the option ("" = always)
}

func (o *opt) key() string {
	for _, n := range o.names {
		if strings.HasPrefix(n, "--") {
			return n[2:]
		}
	}
	return strings.TrimLeft(o.names[0], "-")
}

// flag declares a boolean option.
func flag(names ...string) opt { return opt{names: names} }

// option declares an option that takes a value.
func option(value string, names ...string) opt { return opt{names: names, value: value} }

// from restricts an option to versions >= v.
func (o opt) from(v string) opt { o.since = v; return o }

// cmdSpec is one (sub)command's argument grammar.
type cmdSpec struct {
	path  string // "container run"
	usage string // "container run [<options>] <image> [<arguments> ...]"
	opts  []opt
	// args names the required positionals, in order ("<image>").
	args []string
	// passthrough: everything from the first positional on is positional
	// (run/create/exec capture the command line after the image or id).
	passthrough bool
}

// parsed is the result of parsing one command line.
type parsed struct {
	flags map[string]int      // flag key -> count
	vals  map[string][]string // option key -> values in order
	pos   []string
}

func (p *parsed) has(key string) bool { return p.flags[key] > 0 }

// val returns the last value given for key, or def.
func (p *parsed) val(key, def string) string {
	if v := p.vals[key]; len(v) > 0 {
		return v[len(v)-1]
	}
	return def
}

func (p *parsed) isSet(key string) bool { return len(p.vals[key]) > 0 }

// errHelp asks the caller to print the usage and exit 0.
type errHelp struct{ spec *cmdSpec }

func (e *errHelp) Error() string { return "help requested" }

// lookup finds an option by the name as typed, honouring version gates.
func (s *cmdSpec) lookup(v Version, name string) *opt {
	for i := range s.opts {
		o := &s.opts[i]
		if o.since != "" && v.Before(o.since) {
			continue
		}
		for _, n := range o.names {
			if n == name {
				return o
			}
		}
	}
	return nil
}

// parseArgs parses args against spec for version v. Unknown options and
// missing values or positionals are usage errors (exit 64).
func parseArgs(v Version, spec *cmdSpec, args []string) (*parsed, error) {
	p := &parsed{flags: map[string]int{}, vals: map[string][]string{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if spec.passthrough && len(p.pos) > 0 {
			p.pos = append(p.pos, a)
			continue
		}
		switch {
		case a == "--":
			p.pos = append(p.pos, args[i+1:]...)
			i = len(args)
		case a == "-h" || a == "--help":
			return nil, &errHelp{spec}
		case a == "--debug" && spec.lookup(v, a) == nil:
			// Flags.Global: every command accepts --debug.
			p.flags["debug"]++
		case strings.HasPrefix(a, "--"):
			name, value, hasValue := strings.Cut(a, "=")
			o := spec.lookup(v, name)
			if o == nil {
				return nil, usageError(spec, "Unknown option '%s'", name)
			}
			if o.value == "" {
				if hasValue {
					return nil, usageError(spec, "Unknown option '%s'", a)
				}
				p.flags[o.key()]++
				continue
			}
			if !hasValue {
				if i+1 >= len(args) {
					return nil, usageError(spec, "Missing value for '%s <%s>'", name, o.value)
				}
				i++
				value = args[i]
			}
			p.vals[o.key()] = append(p.vals[o.key()], value)
		case strings.HasPrefix(a, "-") && len(a) > 1:
			// A cluster of short flags ("-it"); the last may take a value.
			for j := 1; j < len(a); j++ {
				name := "-" + a[j:j+1]
				o := spec.lookup(v, name)
				if o == nil {
					return nil, usageError(spec, "Unknown option '%s'", name)
				}
				if o.value == "" {
					p.flags[o.key()]++
					continue
				}
				if j != len(a)-1 {
					return nil, usageError(spec, "Unknown option '%s'", a)
				}
				if i+1 >= len(args) {
					return nil, usageError(spec, "Missing value for '%s <%s>'", name, o.value)
				}
				i++
				p.vals[o.key()] = append(p.vals[o.key()], args[i])
			}
		default:
			p.pos = append(p.pos, a)
		}
	}
	if len(p.pos) < len(spec.args) {
		return nil, usageError(spec, "Missing expected argument '%s'", spec.args[len(p.pos)])
	}
	return p, nil
}

// helpText is a short usage screen for --help (exit 0).
func helpText(spec *cmdSpec) string {
	var b strings.Builder
	b.WriteString("USAGE: " + spec.usage + "\n")
	if len(spec.opts) > 0 {
		b.WriteString("\nOPTIONS:\n")
		for _, o := range spec.opts {
			line := "  " + strings.Join(o.names, ", ")
			if o.value != "" {
				line += " <" + o.value + ">"
			}
			b.WriteString(line + "\n")
		}
	}
	b.WriteString("  -h, --help              Show help information.\n")
	return b.String()
}
