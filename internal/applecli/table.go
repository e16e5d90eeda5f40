// Package applecli holds the argument grammar of Apple's `container` CLI,
// release by release, as tables read from the CLI's source
// (apple/container, tags 0.8.0 … 1.2.2; newer releases from captured
// samples), and a parser that reads a command line against them the way
// the CLI's swift-argument-parser does.
//
// Each row of a command's table is one argument the command declares (an
// @Option, @Flag or @Argument, its option groups expanded in place), in
// declaration order, with the releases that have it (From ≤ v < Until)
// and its source reference. A new release is a diff to the rows: rows
// gain an Until, new rows a From. The per-release tables are rendered by
// Dump (and kept as testdata/tables/<release>.txt, so that the diff
// between two releases is a diff between two files).
//
// Parse reads an argv as the CLI would and returns what it would run or
// refuse; Check also applies the format rules the command applies to its
// values when it runs (labels, sizes, names, volumes, networks, mounts,
// ports), so that it refuses what the real CLI would refuse, with the
// real text and exit code.
//
// Not modelled (such values pass Check, though the CLI may refuse them
// when the command runs): --platform/--os/--arch values, --scheme,
// capability names, --ulimit, --tmpfs and path options, --publish-socket,
// --masked-path/--read-only-path, network create's CIDR transforms, and
// anything that depends on the machine (a host path that must exist, a
// container or image that must be there). The `machine` commands (1.0.0+)
// and plugins are not in the tables.
package applecli

import "strings"

// Kind is what an argument is.
type Kind int

const (
	// Flag is an @Flag: a name without a value.
	Flag Kind = iota
	// Option is an @Option: a name and a value.
	Option
	// Positional is an @Argument.
	Positional
)

func (k Kind) String() string {
	switch k {
	case Flag:
		return "flag"
	case Option:
		return "option"
	}
	return "positional"
}

// Arg is one row of a command's table.
type Arg struct {
	Kind Kind
	// Names are the names as declared (a flag or option): their order
	// decides the preferred name, the first long one.
	Names []string
	// Value is an option's value name (<cpus>) or a positional's name.
	Value string
	// Multi: an array, whose repeated values accumulate (a single value
	// given twice keeps the last).
	Multi bool
	// Required: a positional without a default, or an option without one.
	Required bool
	// Rest: a positional that captures the rest of the line
	// (.captureForPassthrough): options end at the first positional.
	Rest bool
	// Hidden: left out of the usage line and of suggestions.
	Hidden bool
	// Type is the conversion the argument parser applies to the value
	// (refused with exit 64); nil takes any string.
	Type *Type
	// Format is the rule the command applies to each value when it runs
	// (refused with exit 1); nil is none.
	Format *Format
	// Help is the argument's abstract, shown in the parser's "Help:" line.
	Help string
	// From and Until bound the releases that have the row: From ≤ v <
	// Until ("" is open).
	From, Until string
	// Src is the source reference: a path under Sources/ and, after '#',
	// the Swift property that declares the argument.
	Src string
}

// Key is the name a parsed value is found under: the preferred name
// without its dashes ("cpus", "workdir", "rm"), or a positional's name.
func (a *Arg) Key() string {
	if a.Kind == Positional {
		return a.Value
	}
	return strings.TrimLeft(a.preferred(), "-")
}

// preferred is the first long name, else the first name.
func (a *Arg) preferred() string {
	for _, n := range a.Names {
		if strings.HasPrefix(n, "--") {
			return n
		}
	}
	if len(a.Names) > 0 {
		return a.Names[0]
	}
	return ""
}

// valueName is the name in "<…>": the declared one, else the preferred
// name without dashes.
func (a *Arg) valueName() string {
	if a.Value != "" {
		return a.Value
	}
	return strings.TrimLeft(a.preferred(), "-")
}

// has reports whether the row declares name ("-c", "--cpus").
func (a *Arg) has(name string) bool {
	for _, n := range a.Names {
		if n == name {
			return true
		}
	}
	return false
}

// In reports whether release v has the row.
func (a *Arg) In(v Version) bool { return inRange(v, a.From, a.Until) }

// synopsis is the argument in a usage line: "[--signal <signal>]",
// "<image>", "[<arguments> ...]".
func (a *Arg) synopsis() string {
	var s string
	switch a.Kind {
	case Flag:
		s = a.preferred()
	case Option:
		s = a.preferred() + " <" + a.valueName() + ">"
	default:
		s = "<" + a.Value + ">"
	}
	if a.Multi {
		s += " ..."
	}
	if !a.Required {
		s = "[" + s + "]"
	}
	return s
}

// Describe names the row for a report: "-l/--label <label> (Services/…#labels, 0.8.0+)".
func (a *Arg) Describe() string {
	name := "<" + a.Value + ">"
	if a.Kind != Positional {
		name = strings.Join(a.Names, "/")
		if a.Kind == Option {
			name += " <" + a.valueName() + ">"
		}
	}
	return name + " (" + a.Src + ", " + rangeText(a.From, a.Until) + ")"
}

// Type is a conversion the argument parser applies to a value while it
// parses (an ExpressibleByArgument type or a transform). A value it
// refuses ends the parse: "The value 'x' is invalid for '-c <cpus>'",
// with the enumeration's cases or the transform's error after it.
type Type struct {
	Name string
	// Cases are an enumeration's values, offered in the error text.
	Cases []string
	// Parse returns ok, or (for a transform) the error text it throws.
	Parse func(s string) (ok bool, msg string)
}

// Format is a rule a command applies to a value when it runs, with the
// error it throws.
type Format struct {
	Name  string
	Check func(v Version, s string) *Failure
	Src   string
}

// Failure is an error a command throws when it runs: a
// ContainerizationError (Code is its code) or, with Code "", an error
// printed as is in every release.
type Failure struct {
	Code string
	Msg  string
}

// Text is the failure as the release prints it on stderr: before 0.10.0
// a ContainerizationError reads `code: "message"`, from 0.10.0 its
// message only.
func (f *Failure) Text(v Version) string {
	if f.Code != "" && v.CodeErrors() {
		return "Error: " + f.Code + `: "` + f.Msg + `"`
	}
	return "Error: " + f.Msg
}

// Rule is a check a command makes on the parsed line as a whole: its
// validate() (or an option group's), or one it makes when it runs.
type Rule struct {
	Name string
	// Usage: a ValidationError, printed with the usage, exit 64 (else the
	// failure is printed alone, exit 1).
	Usage bool
	// Decode: thrown while the option groups are decoded (before missing
	// positionals are reported); else by the command's validate().
	Decode bool
	Check  func(v Version, p *Parsed) *Failure
	From   string
	Until  string
	Src    string
}

// In reports whether release v has the rule.
func (r *Rule) In(v Version) bool { return inRange(v, r.From, r.Until) }

// Command is one command of the CLI: a group (with subcommands) or a leaf.
type Command struct {
	// Path is the command's words without "container": "run",
	// "image delete"; "" is the root.
	Path string
	// Aliases are other spellings of the last word ("rm" for "delete").
	Aliases []string
	Args    []Arg
	Rules   []Rule
	// Group: a command with subcommands (run alone, it prints its help).
	Group       bool
	From, Until string
	Src         string
}

// In reports whether release v has the command.
func (c *Command) In(v Version) bool { return inRange(v, c.From, c.Until) }

// name is the command's last word.
func (c *Command) name() string {
	if i := strings.LastIndexByte(c.Path, ' '); i >= 0 {
		return c.Path[i+1:]
	}
	return c.Path
}

// parent is the path of the command's group ("" for the root's children).
func (c *Command) parent() string {
	if i := strings.LastIndexByte(c.Path, ' '); i >= 0 {
		return c.Path[:i]
	}
	return ""
}

// Table is one release's view of a command: its rows and rules.
type Table struct {
	Version Version
	Command *Command
	Args    []*Arg
	Rules   []*Rule
}

// Passthrough reports whether the command captures the rest of the line
// after its first positional (run, create, exec).
func (t *Table) Passthrough() bool {
	for _, a := range t.Args {
		if a.Kind == Positional && a.Rest {
			return true
		}
	}
	return false
}

// Usage is the command's usage line as swift-argument-parser renders it
// (UsageGenerator.synopsis): its visible arguments in declaration order,
// or, past 12 of them, "[<options>]" and the positionals; a group ends
// with "<subcommand>".
func (t *Table) Usage() string {
	tool := "container"
	if t.Command.Path != "" {
		tool += " " + t.Command.Path
	}
	var visible []*Arg
	for _, a := range t.Args {
		if !a.Hidden {
			visible = append(visible, a)
		}
	}
	var s string
	switch n := len(visible); {
	case n == 0:
		s = tool
	case n > 12:
		var keep []string
		for _, a := range visible {
			if a.Kind == Positional || a.Required {
				keep = append(keep, a.synopsis())
			}
		}
		if len(keep) > 0 && len(keep) <= 12 {
			s = tool + " [<options>] " + strings.Join(keep, " ")
		} else {
			s = tool + " <options>"
		}
	default:
		parts := []string{tool}
		for _, a := range visible {
			parts = append(parts, a.synopsis())
		}
		s = strings.Join(parts, " ")
	}
	if t.Command.Group {
		s += " <subcommand>"
	}
	return s
}

// Arg returns the row whose key is key, or nil.
func (t *Table) Arg(key string) *Arg {
	for _, a := range t.Args {
		if a.Key() == key {
			return a
		}
	}
	return nil
}

// lookup returns the named row declaring name, or nil.
func (t *Table) lookup(name string) *Arg {
	for _, a := range t.Args {
		if a.Kind != Positional && a.has(name) {
			return a
		}
	}
	return nil
}

// TableOf returns release v's table of the command at path ("image
// delete", "" for the root), or nil when the release has no such command.
func TableOf(v Version, path string) *Table {
	for i := range commands {
		c := &commands[i]
		if c.Path == path && c.In(v) {
			return tableOf(v, c)
		}
	}
	return nil
}

func tableOf(v Version, c *Command) *Table {
	t := &Table{Version: v, Command: c}
	for i := range c.Args {
		if c.Args[i].In(v) {
			t.Args = append(t.Args, &c.Args[i])
		}
	}
	for i := range c.Rules {
		if c.Rules[i].In(v) {
			t.Rules = append(t.Rules, &c.Rules[i])
		}
	}
	return t
}

// Commands returns the commands release v has, in table order.
func Commands(v Version) []*Command {
	var out []*Command
	for i := range commands {
		if commands[i].In(v) {
			out = append(out, &commands[i])
		}
	}
	return out
}

// child finds the subcommand of group path named (or aliased) word.
func child(v Version, path, word string) *Command {
	for i := range commands {
		c := &commands[i]
		if !c.In(v) || c.Path == "" || c.parent() != path {
			continue
		}
		if c.name() == word {
			return c
		}
		for _, al := range c.Aliases {
			if al == word {
				return c
			}
		}
	}
	return nil
}

func inRange(v Version, from, until string) bool {
	if from != "" && v.Before(from) {
		return false
	}
	if until != "" && !v.Before(until) {
		return false
	}
	return true
}

// rangeText renders a row's releases: "0.9.0+" (open) or "0.8.0..<1.0.0".
func rangeText(from, until string) string {
	if from == "" {
		from = Oldest.String()
	}
	if until == "" {
		return from + "+"
	}
	return from + "..<" + until
}
