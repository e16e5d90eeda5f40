package main

import (
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/internal/applecli"
)

// parsed is a command line the emulated release's parser took, read
// against its argument tables (internal/applecli).
type parsed = applecli.Parsed

// handlers carry out the commands, by table path. A command the tables
// have and the stand-in does not carry out is refused as unsupported.
var handlers = map[string]func(a *app, p *parsed) error{
	"run":                  cmdRun,
	"create":               cmdCreate,
	"start":                cmdStart,
	"stop":                 cmdStop,
	"kill":                 cmdKill,
	"delete":               cmdDelete,
	"list":                 cmdList,
	"inspect":              cmdInspect,
	"logs":                 cmdLogs,
	"exec":                 cmdExec,
	"stats":                cmdStats,
	"prune":                cmdPrune,
	"export":               cmdExport,
	"copy":                 cmdCopy,
	"build":                cmdBuild,
	"builder start":        cmdBuilderNoop,
	"builder stop":         cmdBuilderNoop,
	"builder delete":       cmdBuilderNoop,
	"image list":           cmdImageList,
	"image inspect":        cmdImageInspect,
	"image delete":         cmdImageDelete,
	"image tag":            cmdImageTag,
	"image pull":           cmdImagePull,
	"image load":           cmdImageLoad,
	"image save":           cmdImageSave,
	"volume create":        cmdVolumeCreate,
	"volume list":          cmdVolumeList,
	"volume inspect":       cmdVolumeInspect,
	"volume delete":        cmdVolumeDelete,
	"system start":         cmdSystemStart,
	"system stop":          cmdSystemStop,
	"system status":        cmdSystemStatus,
	"system version":       cmdSystemVersion,
	"system property get":  cmdPropertyGet,
	"system property list": cmdPropertyList,
}

// cmdBuilderNoop: podman needs no BuildKit builder; its lifecycle
// commands only need the system up. They look the builder container up
// (ContainerClient.get); from 1.0.0 builder start first loads the system
// configuration, whose health check fails with the bare connection error.
func cmdBuilderNoop(a *app, p *parsed) error {
	if oneX(a.v) && p.Table.Command.Path == "builder start" {
		return a.up()
	}
	return a.up(opListContainers)
}

// helpText is an abridged help screen for the command (exit 0).
// reconstructed: the CLI's help also has abstracts and option help.
func helpText(t *applecli.Table) string {
	var b strings.Builder
	b.WriteString("USAGE: " + t.Usage() + "\n")
	var opts []string
	for _, a := range t.Args {
		if a.Kind == applecli.Positional || a.Hidden {
			continue
		}
		line := "  " + strings.Join(a.Names, ", ")
		if a.Kind == applecli.Option {
			line += " <" + a.Key() + ">"
		}
		opts = append(opts, line)
	}
	b.WriteString("\nOPTIONS:\n")
	for _, o := range opts {
		b.WriteString(o + "\n")
	}
	b.WriteString("  -h, --help              Show help information.\n")
	return b.String()
}
