package applecli

import (
	"fmt"
	"strings"
)

// Dump renders release v's tables as text: per command its usage line,
// then one line per row (argument, kind, value type and format rule, the
// releases that have it, and its source at the tag that describes v),
// then its rules. testdata/tables/<release>.txt hold these for Releases,
// so that what a release changed is the diff between two files.
func Dump(v Version) string {
	tag := SourceTag(v)
	var b strings.Builder
	fmt.Fprintf(&b, "# container %s: argument tables (source: apple/container@%s)\n", v, tag)
	if v.Cmp(NewestSource) > 0 {
		fmt.Fprintf(&b, "# %s is newer than the source: these are %s's rows; Samples lists what captures of it show.\n", v, NewestSource)
	}
	for _, c := range Commands(v) {
		t := tableOf(v, c)
		name := c.Path
		if name == "" {
			name = "(root)"
		}
		if len(c.Aliases) > 0 {
			name += " (" + strings.Join(c.Aliases, ", ") + ")"
		}
		fmt.Fprintf(&b, "\n## %s\nusage: %s\nsource: %s\n", name, t.Usage(), srcText(c.Src))
		for _, a := range t.Args {
			var col []string
			col = append(col, a.Kind.String())
			if a.Multi && !a.Rest {
				col = append(col, "repeatable")
			}
			if a.Kind == Positional {
				switch {
				case a.Rest:
					col = append(col, "rest of the line")
				case a.Required:
					col = append(col, "required")
				default:
					col = append(col, "optional")
				}
			}
			if a.Hidden {
				col = append(col, "hidden")
			}
			if a.Type != nil {
				typ := "type " + a.Type.Name
				if len(a.Type.Cases) > 0 {
					typ += " (" + strings.Join(a.Type.Cases, "|") + ")"
				}
				col = append(col, typ)
			}
			if a.Format != nil {
				col = append(col, "format "+a.Format.Name)
			}
			label := "<" + a.Value + ">"
			if a.Kind != Positional {
				label = strings.Join(a.Names, ", ")
				if a.Kind == Option {
					label += " <" + a.valueName() + ">"
				}
			}
			fmt.Fprintf(&b, "  %-40s %-44s %-16s %s\n", label, strings.Join(col, ", "), rangeText(a.From, a.Until), srcText(a.Src))
		}
		for _, r := range t.Rules {
			code := "exit 1"
			if r.Usage {
				code = "exit 64"
			}
			fmt.Fprintf(&b, "  rule: %-34s %-44s %-16s %s\n", r.Name, code, rangeText(r.From, r.Until), srcText(r.Src))
		}
	}
	return b.String()
}

// srcText is a source reference as printed: a path under the CLI's
// Sources/, or under swift-argument-parser's Sources/ArgumentParser/.
func srcText(src string) string {
	if rest, ok := strings.CutPrefix(src, argParserSrc); ok {
		return "swift-argument-parser Sources/ArgumentParser/" + rest
	}
	return "Sources/" + src
}
