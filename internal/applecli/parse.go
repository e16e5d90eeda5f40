package applecli

import (
	"fmt"
	"strings"
)

// Parsing follows swift-argument-parser (1.6.1 in container 0.8.0–0.11.0,
// 1.7.0 in 0.12.0–1.1.0, 1.8.2 in 1.2.x; the parts read here are the same
// in all three): SplitArguments.swift splits the line, each command level
// is parsed leniently (LenientParser in ArgumentSet.swift), its
// positionals filled, its option groups decoded and its validate() run,
// then the next word names a subcommand (CommandParser.swift); what is
// left at the end is an unknown option or an unexpected argument. Errors
// print as MessageInfo.swift and UsageGenerator.swift render them.

// Outcome is what an accepted command line does.
type Outcome int

const (
	// RunCommand runs the command (Parsed.Table).
	RunCommand Outcome = iota
	// ShowHelp prints the command's help screen and exits 0.
	ShowHelp
	// ShowVersion prints the version line and exits 0.
	ShowVersion
	// RunPlugin: the first word names no command; the CLI looks for a
	// plugin of that name (DefaultCommand.swift).
	RunPlugin
)

// Parsed is a command line the release's parser accepts.
type Parsed struct {
	Version Version
	Outcome Outcome
	// Table is the command's table (for ShowHelp, the command whose help
	// is shown; for RunPlugin, the root's).
	Table *Table
	// Pos are the positional values in order (for RunPlugin, the plugin
	// name and its arguments).
	Pos   []string
	flags map[string]int
	vals  map[string][]string
	shape []string // the options as typed, in order
}

// Shape is the line with its values left out: the command, the options
// it used as typed (once each, "..." when repeated, "<value>" after one
// that takes a value), then its positionals by name
// ("run -d --name <name> -l <label> ... <image> <arguments> ...").
func (p *Parsed) Shape() string {
	parts := []string{}
	if p.Table != nil && p.Table.Command.Path != "" {
		parts = append(parts, p.Table.Command.Path)
	}
	count := map[string]int{}
	for _, s := range p.shape {
		count[s]++
	}
	for _, s := range p.shape {
		switch count[s] {
		case 0:
			continue
		case 1:
			parts = append(parts, s)
		default:
			parts = append(parts, s+" ...")
		}
		count[s] = 0
	}
	if p.Table != nil {
		for _, a := range p.Table.Args {
			if a.Kind == Positional && len(p.vals[a.Key()]) > 0 {
				s := "<" + a.Value + ">"
				if a.Multi || a.Rest {
					s += " ..."
				}
				parts = append(parts, s)
			}
		}
	}
	return strings.Join(parts, " ")
}

// Has reports whether flag key was given.
func (p *Parsed) Has(key string) bool { return p.flags[key] > 0 }

// Count is how often flag key was given.
func (p *Parsed) Count(key string) int { return p.flags[key] }

// IsSet reports whether option key was given a value.
func (p *Parsed) IsSet(key string) bool { return len(p.vals[key]) > 0 }

// Val returns the last value given for key, or def.
func (p *Parsed) Val(key, def string) string {
	if v := p.vals[key]; len(v) > 0 {
		return v[len(v)-1]
	}
	return def
}

// Vals returns every value given for key, in order (for an array
// positional, its values).
func (p *Parsed) Vals(key string) []string { return p.vals[key] }

// Verify applies the format rule of row key to its values, the first
// that fails first; the command calls it where the CLI applies the rule.
func (p *Parsed) Verify(key string) *Failure {
	a := p.Table.Arg(key)
	if a == nil || a.Format == nil {
		return nil
	}
	for _, s := range p.vals[key] {
		if f := a.Format.Check(p.Version, s); f != nil {
			return f
		}
	}
	return nil
}

// Refusal is a command line the release refuses: what it prints and its
// exit status, and the row or rule that refuses it.
type Refusal struct {
	Version Version
	Argv    []string
	// Command is the path of the command that refused it ("run").
	Command string
	// Row is the row broken (nil for an unknown option, an unexpected
	// argument or a rule).
	Row  *Arg
	Rule *Rule
	// Code is the exit status: 64 for the argument parser's errors, 1
	// for a failure thrown by the command.
	Code int
	// Text is what the CLI prints on stderr, without the last newline.
	Text string
}

func (r *Refusal) Error() string {
	first, _, _ := strings.Cut(r.Text, "\n")
	s := fmt.Sprintf("container %s refuses %q: %s (exit %d)", r.Version, r.Argv, first, r.Code)
	switch {
	case r.Row != nil:
		s += "; row: " + strings.TrimSpace(r.Command+" "+r.Row.Describe())
	case r.Rule != nil:
		s += "; rule: " + strings.TrimSpace(r.Command+" "+r.Rule.Name) + " (" + r.Rule.Src + ", " + rangeText(r.Rule.From, r.Rule.Until) + ")"
	}
	return s
}

// Exit codes of swift-argument-parser (ExitCode.failure, .validationFailure).
const (
	ExitFailure = 1
	ExitUsage   = 64
)

// element is one piece of the split command line (SplitArguments.Element).
type element struct {
	in   int // index in argv
	sub  int // -1 for the whole argument, else the short option's offset in a pack
	kind elemKind
	name string  // an option's name as typed: "--cpus", "-c", "-it"
	val  *string // a value attached with '=' ("--name=x")
	pack bool    // "-it": a long name with a single dash, whose subs follow it
	raw  string  // the argument as given
	used bool
}

type elemKind int

const (
	valueElem elemKind = iota
	optionElem
	terminatorElem
)

// split is SplitArguments.init: up to the first "--" each argument is a
// value, an option ("--name", "--name=value", "-n", "-n=value", or a pack
// "-abc" followed by its short options) or the terminator; after it,
// everything is a value. Three dashes or more are refused.
func split(argv []string) ([]*element, string) {
	var out []*element
	for i := 0; i < len(argv); i++ {
		arg := argv[i]
		dashes := len(arg) - len(strings.TrimLeft(arg, "-"))
		rest := arg[dashes:]
		switch {
		case dashes == len(arg) && dashes == 2:
			out = append(out, &element{in: i, sub: -1, kind: terminatorElem, raw: arg})
			for j := i + 1; j < len(argv); j++ {
				out = append(out, &element{in: j, sub: -1, kind: valueElem, raw: argv[j]})
			}
			return out, ""
		case dashes == len(arg) && dashes > 2, dashes > 2:
			return nil, "Invalid option: " + arg
		case dashes == 0, dashes == len(arg): // a value, "" or "-"
			out = append(out, &element{in: i, sub: -1, kind: valueElem, raw: arg})
		case dashes == 2:
			// ParsedArgument(_:): an empty value after '=' counts as none.
			name, val, has := strings.Cut(rest, "=")
			e := &element{in: i, sub: -1, kind: optionElem, name: "--" + name, raw: arg}
			if has && val != "" {
				e.val = &val
			}
			out = append(out, e)
		default: // one dash
			name, val, has := strings.Cut(rest, "=")
			if has {
				if name == "" {
					return nil, "Invalid option: -" + rest
				}
				e := &element{in: i, sub: -1, kind: optionElem, name: "-" + name, raw: arg}
				e.val = &val
				out = append(out, e)
				continue
			}
			runes := []rune(rest)
			if len(runes) == 1 {
				out = append(out, &element{in: i, sub: -1, kind: optionElem, name: arg, raw: arg})
				continue
			}
			out = append(out, &element{in: i, sub: -1, kind: optionElem, name: arg, pack: true, raw: arg})
			for k, r := range runes {
				out = append(out, &element{in: i, sub: k, kind: optionElem, name: "-" + string(r), raw: arg})
			}
		}
	}
	return out, ""
}

// parser is one parse of a command line.
type parser struct {
	v     Version
	argv  []string
	elems []*element
	p     *Parsed
}

// markUsed removes e: a short option of a pack takes the pack with it,
// and a whole argument its short options (SplitArguments.remove(at:)).
func (ps *parser) markUsed(e *element) {
	for _, o := range ps.elems {
		if o.in != e.in {
			continue
		}
		if o == e || (e.sub < 0) || (o.sub < 0 && o.pack) {
			o.used = true
		}
	}
}

// unused returns the elements not yet used, in order.
func (ps *parser) unused() []*element {
	var out []*element
	for _, e := range ps.elems {
		if !e.used {
			out = append(out, e)
		}
	}
	return out
}

// nextAfter is popNextElementIfValue's candidate: the first unused whole
// argument after e's ("-fn f-value n-value": each short option of a pack
// takes the next argument in turn).
func (ps *parser) nextAfter(e *element) *element {
	for _, o := range ps.elems {
		if !o.used && o.sub < 0 && o.in > e.in {
			return o
		}
	}
	return nil
}

// Parse reads argv (without the program name) as release v's CLI does.
// A line it accepts comes back as a Parsed; one it refuses as a *Refusal.
func Parse(v Version, argv []string) (*Parsed, error) {
	if argv == nil {
		argv = []string{}
	}
	ps := &parser{v: v, argv: argv, p: &Parsed{Version: v, flags: map[string]int{}, vals: map[string][]string{}}}
	root := TableOf(v, "")
	elems, bad := split(argv)
	if bad != "" {
		return nil, ps.usageError(root, nil, nil, bad, "")
	}
	ps.elems = elems
	t := root
	for {
		passthrough := t.Passthrough() || t.Command.Path == "" // the root's default command captures
		if err := ps.lenient(t, passthrough); err != nil {
			return nil, err
		}
		if !t.Command.Group {
			break
		}
		// consumeNextCommand: the next argument, if a value, may name a subcommand.
		var next *element
		if u := ps.unused(); len(u) > 0 {
			next = u[0]
		}
		if next != nil && next.kind == valueElem {
			if c := child(v, t.Command.Path, next.raw); c != nil {
				ps.markUsed(next)
				t = tableOf(v, c)
				continue
			}
		}
		if u := ps.unused(); len(u) > 0 && allFromOneArg(u) && ps.helpIn(u) {
			ps.p.Outcome, ps.p.Table = ShowHelp, t
			return ps.p, nil
		}
		if t.Command.Path == "" {
			return ps.plugin(root)
		}
		break
	}
	ps.p.Table = t
	if t.Command.Path == "help" {
		ps.p.Outcome = ShowHelp
		return ps.p, nil
	}
	if err := ps.positionals(t); err != nil {
		return nil, err
	}
	if err := ps.rules(t); err != nil {
		if b, ok := err.(builtin); ok {
			ps.p.Outcome = Outcome(b)
			return ps.p, nil
		}
		return nil, err
	}
	return ps.finish(t)
}

// allFromOneArg: the remaining elements all come from one argument
// (checkForBuiltInFlags with requireSoloArgument).
func allFromOneArg(u []*element) bool {
	for _, e := range u {
		if e.in != u[0].in {
			return false
		}
	}
	return true
}

// helpIn reports whether an element asks for help (-h, --help).
func (ps *parser) helpIn(u []*element) bool {
	for _, e := range u {
		if e.kind == optionElem && e.val == nil && (e.name == "-h" || e.name == "--help") {
			return true
		}
	}
	return false
}

// builtin is a help or version request that wins over a decoding error
// (checkForBuiltInFlags).
type builtin Outcome

func (b builtin) Error() string { return "help or version requested" }

// requested returns the help or version request among the elements left.
func (ps *parser) requested() error {
	u := ps.unused()
	switch {
	case ps.helpIn(u):
		return builtin(ShowHelp)
	case ps.versionIn(u):
		return builtin(ShowVersion)
	}
	return nil
}

// versionIn reports whether an element asks for the version.
func (ps *parser) versionIn(u []*element) bool {
	for _, e := range u {
		if e.kind == optionElem && e.val == nil && e.name == "--version" {
			return true
		}
	}
	return false
}

// lenient is LenientParser.parse for one command level: options it
// knows take their values; others are left for later (or, where the
// command captures the rest of the line, end its options, as does its
// first positional).
func (ps *parser) lenient(t *Table, passthrough bool) error {
	for _, e := range ps.elems {
		if e.used {
			continue
		}
		switch e.kind {
		case terminatorElem:
			continue
		case valueElem:
			if t.Command.Group {
				if c := child(ps.v, t.Command.Path, e.raw); c != nil {
					if ct := tableOf(ps.v, c); ct.Passthrough() {
						return nil
					} else if passthrough {
						continue
					}
				}
			}
			if passthrough {
				return nil
			}
			continue
		}
		a := t.lookup(e.name)
		if a == nil || e.pack {
			if passthrough && !e.pack {
				return nil
			}
			continue
		}
		if a.Kind == Flag {
			if e.val != nil {
				return ps.usageError(t, a, nil, fmt.Sprintf("The option '%s' does not take any value, but '%s' was specified.", e.name, *e.val), "")
			}
			ps.markUsed(e)
			ps.p.flags[a.Key()]++
			ps.p.shape = append(ps.p.shape, e.name)
			continue
		}
		var val string
		switch {
		case e.val != nil:
			val = *e.val
			ps.markUsed(e)
		default:
			next := ps.nextAfter(e)
			if next == nil || next.kind != valueElem {
				return ps.missingValue(t, a, e)
			}
			val = next.raw
			ps.markUsed(e)
			ps.markUsed(next)
		}
		if a.Type != nil {
			if ok, msg := a.Type.Parse(val); !ok {
				return ps.invalidValue(t, a, e.name, val, msg)
			}
		}
		ps.p.shape = append(ps.p.shape, e.name+" <"+a.valueName()+">")
		if a.Multi {
			ps.p.vals[a.Key()] = append(ps.p.vals[a.Key()], val)
		} else {
			ps.p.vals[a.Key()] = []string{val}
		}
	}
	return nil
}

// missingValue is errorForMissingValue: plain, or, for a short option in
// a pack, the pack named as unknown too.
func (ps *parser) missingValue(t *Table, a *Arg, e *element) error {
	missing := fmt.Sprintf("Missing value for '%s <%s>'", e.name, a.valueName())
	if e.sub >= 0 {
		pack := ps.argv[e.in]
		msg := ps.unknownOption(t, pack, true) + "\n   or: " + missing + " in '" + pack + "'"
		return ps.usageError(t, a, nil, msg, "")
	}
	help := ""
	if a.Help != "" {
		help = e.name + " <" + a.valueName() + ">  " + a.Help
	}
	return ps.usageError(t, a, nil, missing, help)
}

// invalidValue is unableToParseValue: the value, the option as typed,
// and the type's cases or the transform's error.
func (ps *parser) invalidValue(t *Table, a *Arg, name, val, msg string) error {
	suffix := ""
	switch {
	case msg != "":
		suffix = ": " + msg
	case len(a.Type.Cases) > 0:
		suffix = valueList(a.Type.Cases)
	}
	text := fmt.Sprintf("The value '%s' is invalid for '%s <%s>'%s", val, name, a.valueName(), suffix)
	help := ""
	if a.Help != "" {
		help = name + " <" + a.valueName() + ">  " + a.Help
	}
	return ps.usageError(t, a, nil, text, help)
}

// valueList is formattedValueList: ". Please provide one of 'a' and 'b'."
func valueList(cases []string) string {
	q := make([]string, len(cases))
	for i, c := range cases {
		q[i] = "'" + c + "'"
	}
	switch {
	case len(q) >= 6:
		return ". Please provide one of the following:\n  - " + strings.Join(cases, "\n  - ")
	case len(q) <= 2:
		return ". Please provide one of " + strings.Join(q, " and ") + "."
	}
	return ". Please provide one of " + strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1] + "."
}

// positionals is parsePositionalValues: each positional takes the next
// values in turn (an array all it can), skipping options, except one
// that captures the rest, which takes everything, "--" included.
func (ps *parser) positionals(t *Table) error {
	var stack []*element
	for _, e := range ps.elems {
		if !e.used && e.sub < 0 {
			stack = append(stack, e)
		}
	}
	pop := func(any bool) *element {
		for len(stack) > 0 {
			e := stack[0]
			stack = stack[1:]
			if any || e.kind == valueElem {
				return e
			}
		}
		return nil
	}
outer:
	for _, a := range t.Args {
		if a.Kind != Positional {
			continue
		}
		for {
			e := pop(a.Rest)
			if e == nil {
				break outer
			}
			ps.markUsed(e)
			ps.p.vals[a.Key()] = append(ps.p.vals[a.Key()], e.raw)
			ps.p.Pos = append(ps.p.Pos, e.raw)
			if !a.Multi && !a.Rest {
				break
			}
		}
	}
	return nil
}

// rules decodes the command: option groups' validate() (Decode rules) and
// required positionals in declaration order, then the command's own
// validate(). A failure gives way to a help request.
func (ps *parser) rules(t *Table) error {
	fail := func(r *Rule, f *Failure) error {
		if b := ps.requested(); b != nil {
			return b
		}
		if r.Usage {
			err := ps.usageError(t, nil, r, f.Msg, "")
			return err
		}
		return &Refusal{Version: ps.v, Argv: ps.argv, Command: t.Command.Path, Rule: r, Code: ExitFailure, Text: f.Text(ps.v)}
	}
	for _, r := range t.Rules {
		if r.Decode {
			if f := r.Check(ps.v, ps.p); f != nil {
				return fail(r, f)
			}
		}
	}
	for _, a := range t.Args {
		if a.Kind == Positional && a.Required && len(ps.p.vals[a.Key()]) == 0 {
			if b := ps.requested(); b != nil {
				return b
			}
			syn := "<" + a.Value + ">"
			if a.Multi || a.Rest {
				syn += " ..."
			}
			help := ""
			if a.Help != "" {
				help = "<" + a.Value + ">  " + a.Help
			}
			return ps.usageError(t, a, nil, "Missing expected argument '"+syn+"'", help)
		}
	}
	for _, r := range t.Rules {
		if !r.Decode {
			if f := r.Check(ps.v, ps.p); f != nil {
				return fail(r, f)
			}
		}
	}
	return nil
}

// finish is extractLastParsedValue: a help or version request wins; what
// is left is an unknown option or an unexpected argument.
func (ps *parser) finish(t *Table) (*Parsed, error) {
	u := ps.unused()
	switch {
	case ps.helpIn(u):
		ps.p.Outcome = ShowHelp
		return ps.p, nil
	case ps.versionIn(u):
		ps.p.Outcome = ShowVersion
		return ps.p, nil
	}
	for _, e := range u {
		if e.kind == optionElem {
			return nil, ps.usageError(t, nil, nil, ps.unknownOption(t, e.name, e.pack), "")
		}
	}
	var extra []string
	packs := map[int]bool{}
	for _, e := range u {
		if e.sub < 0 {
			packs[e.in] = true
		}
	}
	for _, e := range u {
		if e.kind != terminatorElem && (e.sub < 0 || !packs[e.in]) {
			extra = append(extra, e.raw)
		}
	}
	switch len(extra) {
	case 0:
		if t.Command.Group {
			// A group run alone prints its help (its default run()).
			ps.p.Outcome = ShowHelp
		}
		return ps.p, nil
	case 1:
		return nil, ps.usageError(t, nil, nil, "Unexpected argument '"+extra[0]+"'", "")
	}
	return nil, ps.usageError(t, nil, nil, fmt.Sprintf("%d unexpected arguments: '%s'", len(extra), strings.Join(extra, "', '")), "")
}

// unknownOption is unknownOptionMessage: a long name gets the closest
// long name of the command's arguments as a suggestion, when it is fewer
// than 4 edits away.
func (ps *parser) unknownOption(t *Table, name string, long bool) string {
	msg := "Unknown option '" + name + "'"
	if !long && !strings.HasPrefix(name, "--") {
		return msg
	}
	best, dist := "", 4
	for _, a := range t.Args {
		if a.Hidden || a.Kind == Positional {
			continue
		}
		for _, n := range a.Names {
			if !strings.HasPrefix(n, "--") {
				continue
			}
			if d := editDistance(n, name); d < dist {
				best, dist = n, d
			}
		}
	}
	if best != "" {
		msg += ". Did you mean '" + best + "'?"
	}
	return msg
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	prev := make([]int, len(y)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(x); i++ {
		cur := make([]int, len(y)+1)
		cur[0] = i
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(y)]
}

// usageError is a parser error as MessageInfo renders it: "Error: " and
// the message, a "Help:" line for some, then the usage and where to find
// the help; exit 64.
func (ps *parser) usageError(t *Table, a *Arg, r *Rule, msg, help string) *Refusal {
	text := "Error: " + msg + "\n"
	if help != "" {
		text += "Help:  " + help + "\n"
	}
	path := "container"
	if t.Command.Path != "" {
		path += " " + t.Command.Path
	}
	text += "Usage: " + t.Usage() + "\n  See '" + path + " --help' for more information."
	return &Refusal{Version: ps.v, Argv: ps.argv, Command: t.Command.Path, Row: a, Rule: r, Code: ExitUsage, Text: text}
}

// plugin is the root's default command (DefaultCommand.swift): alone it
// prints the help; an option or an empty word is refused; any other word
// is looked up as a plugin.
func (ps *parser) plugin(root *Table) (*Parsed, error) {
	var rest []string
	for _, e := range ps.elems {
		if !e.used && e.sub < 0 {
			rest = append(rest, e.raw)
		}
	}
	ps.p.Table = root
	switch {
	case len(rest) == 0:
		ps.p.Outcome = ShowHelp
		return ps.p, nil
	case ps.versionIn(ps.unused()):
		ps.p.Outcome = ShowVersion
		return ps.p, nil
	case rest[0] == "":
		return nil, ps.usageError(root, nil, nil, "unknown argument ''", "")
	case strings.HasPrefix(rest[0], "-"):
		if ps.helpIn(ps.unused()) {
			ps.p.Outcome = ShowHelp
			return ps.p, nil
		}
		return nil, ps.usageError(root, nil, nil, "unknown option '"+rest[0]+"'", "")
	}
	ps.p.Outcome, ps.p.Pos = RunPlugin, rest
	return ps.p, nil
}
