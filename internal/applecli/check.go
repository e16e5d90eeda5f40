package applecli

import "strings"

// formatOrder is the order in which run and create apply their format
// rules (ContainerRun.swift / ContainerCreate.swift: the id first; then
// Utility.containerConfigFromFlags: resources, volumes, mounts, shm
// size, networks, labels, ports); other commands apply theirs in row
// order.
var formatOrder = map[string][]string{
	"run":    {"name", "memory", "volume", "mount", "shm-size", "network", "label", "publish"},
	"create": {"name", "memory", "volume", "mount", "shm-size", "network", "label", "publish"},
}

// Check reports whether release v's CLI takes argv (without the program
// name): nil, or a *Refusal naming the row or rule it breaks, with what
// the CLI prints and its exit status. Beyond the parser it applies the
// format rules the command applies to its values (labels, sizes, names,
// volumes, networks, mounts, ports); what depends on the machine (a
// host path that must exist, a container that must be running) is not
// checked. A word that names no command is refused: it would be looked
// up as a plugin.
func Check(v Version, argv []string) error {
	p, err := Parse(v, argv)
	if err != nil {
		return err
	}
	switch p.Outcome {
	case ShowHelp, ShowVersion:
		return nil
	case RunPlugin:
		msg := PluginNotFound(p.Pos[0], PluginHints("/usr/local", p.Pos[0]))
		return &Refusal{Version: v, Argv: argv, Code: ExitUsage,
			Text: "Error: " + msg + "\nUsage: " + p.Table.Usage() + "\n  See 'container --help' for more information."}
	}
	for _, a := range formatRows(p.Table) {
		for _, s := range p.Vals(a.Key()) {
			if f := a.Format.Check(v, s); f != nil {
				return &Refusal{Version: v, Argv: argv, Command: p.Table.Command.Path, Row: a, Code: ExitFailure, Text: f.Text(v)}
			}
		}
	}
	return nil
}

// formatRows are the table's rows with a format rule, in the order the
// command applies them.
func formatRows(t *Table) []*Arg {
	var out []*Arg
	seen := map[*Arg]bool{}
	for _, key := range formatOrder[t.Command.Path] {
		if a := t.Arg(key); a != nil && a.Format != nil {
			out = append(out, a)
			seen[a] = true
		}
	}
	for _, a := range t.Args {
		if a.Format != nil && !seen[a] {
			out = append(out, a)
		}
	}
	return out
}

// PluginHints are the places DefaultCommand says a plugin is looked for,
// under the CLI's install root (the directory above its executable's):
// PluginLoader.userPluginsDir and libexec/container/plugins.
func PluginHints(installRoot, name string) []string {
	root := strings.TrimSuffix(installRoot, "/")
	return []string{root + "/libexec/container-plugins/" + name, root + "/libexec/container/plugins/" + name}
}

// PluginNotFound is DefaultCommand's ValidationError for a word that
// names neither a command nor an installed plugin (0.8.0–1.2.2).
func PluginNotFound(name string, hints []string) string {
	return "Plugin 'container-" + name + "' not found.\n\n" +
		"- If system services are not running, start them with: container system start\n" +
		"- If the plugin isn't installed, ensure it exists under:\n\n" +
		"Check to see that the plugin exists under:\n  - " + strings.Join(hints, "\n  - ") + "\n"
}

// PluginsUnavailable is DefaultCommand's ValidationError when the plugin
// loader cannot be made (the system services are not running).
func PluginsUnavailable(hints []string) string {
	return "Plugins are unavailable. Start the container system services and retry:\n\n" +
		"    container system start\n\n" +
		"Check to see that the plugin exists under:\n  - " + strings.Join(hints, "\n  - ") + "\n"
}
