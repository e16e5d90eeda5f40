package applecli

// The tables. Each command lists its arguments in declaration order
// (option groups expanded where the command declares them), each row
// with the releases that have it and the Swift property that declares it
// (paths under Sources/ of apple/container). Help texts are the
// arguments' abstracts as the parser prints them in its "Help:" lines.
// Machine (1.0.0+) and plugin commands are not in the tables.

const (
	// argParserSrc marks a row read from swift-argument-parser's source
	// (Sources/ArgumentParser/…) rather than the CLI's.
	argParserSrc = "swift-argument-parser:"
	flagsSwift   = "Services/ContainerAPIService/Client/Flags.swift"
	appSwift     = "ContainerCommands/Application.swift"
)

// Row constructors and modifiers.

func flagRow(names ...string) Arg { return Arg{Kind: Flag, Names: names} }
func optRow(names ...string) Arg  { return Arg{Kind: Option, Names: names} }
func posRow(name string) Arg      { return Arg{Kind: Positional, Value: name, Required: true} }

func (a Arg) val(n string) Arg          { a.Value = n; return a }
func (a Arg) multi() Arg                { a.Multi = true; return a }
func (a Arg) optional() Arg             { a.Required = false; return a }
func (a Arg) rest() Arg                 { a.Rest, a.Multi = true, true; return a }
func (a Arg) hidden() Arg               { a.Hidden = true; return a }
func (a Arg) typ(t *Type) Arg           { a.Type = t; return a }
func (a Arg) format(f *Format) Arg      { a.Format = f; return a }
func (a Arg) help(h string) Arg         { a.Help = h; return a }
func (a Arg) from(v string) Arg         { a.From = v; return a }
func (a Arg) until(v string) Arg        { a.Until = v; return a }
func (a Arg) src(file, prop string) Arg { a.Src = file + "#" + prop; return a }

// debugRow is Flags.Logging's --debug, which every command declares
// (where it declares `logOptions`).
func debugRow() Arg { return flagRow("--debug").src(flagsSwift, "debug") }

// listFormatRows are `--format` typed ListFormat: json|table, then yaml
// (0.12.0, #ListFormat.swift) and toml (1.0.0).
func listFormatRows(file string) []Arg {
	r := optRow("--format").help("Format of the output").src(file, "format")
	return []Arg{
		r.typ(listFormat08).until("0.12.0"),
		r.typ(listFormat012).from("0.12.0").until("1.0.0"),
		r.typ(listFormat10).from("1.0.0"),
	}
}

func concat(groups ...[]Arg) []Arg {
	var out []Arg
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

func one(a ...Arg) []Arg { return a }

// Option groups of Flags.swift.

func processArgs() []Arg {
	f := flagsSwift
	return []Arg{
		optRow("--env", "-e").multi().help("Set environment variables (key=value, or just key to inherit from host)").src(f, "env"),
		optRow("--env-file").multi().help("Read in a file of environment variables (key=value format, ignores # comments and blank lines)").src(f, "envFile"),
		optRow("--gid").typ(uint32Type).help("Set the group ID for the process").src(f, "gid"),
		flagRow("--interactive", "-i").src(f, "interactive"),
		flagRow("--tty", "-t").src(f, "tty"),
		optRow("--user", "-u").help("Set the user for the process (format: name|uid[:gid])").src(f, "user"),
		optRow("--uid").typ(uint32Type).help("Set the user ID for the process").src(f, "uid"),
		optRow("-w", "--workdir", "--cwd").val("dir").help("Set the initial working directory inside the container").src(f, "cwd"),
		optRow("--ulimit").val("limit").multi().help("Set resource limits (format: <type>=<soft>[:<hard>])").from("0.9.0").src(f, "ulimits"),
	}
}

func resourceArgs() []Arg {
	f := flagsSwift
	return []Arg{
		optRow("--cpus", "-c").typ(int64Type).help("Number of CPUs to allocate to the container").src(f, "cpus"),
		optRow("--memory", "-m").format(memoryFormat).help("Amount of memory (1MiByte granularity), with optional K, M, G, T, or P suffix").src(f, "memory"),
	}
}

// dnsArgs are the DNS options: Flags.Management's own until 0.9.0, then
// the Flags.DNS group.
func dnsArgs() []Arg {
	f := flagsSwift
	return []Arg{
		optRow("--dns").val("ip").multi().help("DNS nameserver IP address").until("0.9.0").src(f, "dnsNameservers"),
		optRow("--dns-domain").val("domain").help("Default DNS domain").until("0.9.0").src(f, "dnsDomain"),
		optRow("--dns-option").val("option").multi().help("DNS options").until("0.9.0").src(f, "dnsOptions"),
		optRow("--dns-search").val("domain").multi().help("DNS search domains").until("0.9.0").src(f, "dnsSearchDomains"),
		optRow("--dns").val("ip").multi().help("DNS nameserver IP address").from("0.9.0").src(f, "nameservers"),
		optRow("--dns-domain").val("domain").help("Default DNS domain").from("0.9.0").src(f, "domain"),
		optRow("--dns-option").val("option").multi().help("DNS options").from("0.9.0").src(f, "options"),
		optRow("--dns-search").val("domain").multi().help("DNS search domains").from("0.9.0").src(f, "searchDomains"),
	}
}

const platformHelp = "Platform for the image if it's multi-platform. This takes precedence over --os and --arch"

func managementArgs() []Arg {
	f := flagsSwift
	return concat(one(
		optRow("--arch", "-a").help("Set arch if image can target multiple architectures").src(f, "arch"),
		optRow("--cap-add").val("cap").multi().help("Add a Linux capability (e.g. CAP_NET_RAW, or ALL)").from("0.12.0").src(f, "capAdd"),
		optRow("--cap-drop").val("cap").multi().help("Drop a Linux capability (e.g. CAP_NET_RAW, or ALL)").from("0.12.0").src(f, "capDrop"),
		optRow("--cidfile").help("Write the container ID to the path provided").src(f, "cidfile"),
		flagRow("--detach", "-d").src(f, "detach"),
	), dnsArgs(), one(
		optRow("--entrypoint").val("cmd").help("Override the entrypoint of the image").src(f, "entrypoint"),
		flagRow("--init").from("0.10.0").src(f, "useInit"),
		optRow("--init-image").val("image").help("Use a custom init image instead of the default").from("0.10.0").src(f, "initImage"),
		optRow("--kernel", "-k").val("path").help("Set a custom kernel path").src(f, "kernel"),
		optRow("--kernel-arg").val("arg").multi().help("Append a raw boot argument to the kernel command line (repeatable).").from("1.2.0").src(f, "kernelArgs"),
		optRow("-l", "--label").multi().format(labelFormat).help("Add a key=value label to the container").src(f, "labels"),
		optRow("--masked-path").val("path").multi().help("[EXPERIMENTAL] Hide a path inside the container, in addition to the runtime defaults (or NONE to clear prior values and the defaults)").from("1.2.1").src(f, "maskedPaths"),
		optRow("--mount").multi().format(mountFormat).help("Add a mount to the container (format: type=<>,source=<>,target=<>,readonly)").src(f, "mounts"),
		optRow("--name").format(containerNameFormat).help("Use the specified name as the container ID").src(f, "name"),
		optRow("--network").multi().format(networkFormat).help("Attach the container to a network (format: <name>[,mac=XX:XX:XX:XX:XX:XX])").until("0.11.0").src(f, "networks"),
		optRow("--network").multi().format(networkFormat).help("Attach the container to a network (format: <name>[,mac=XX:XX:XX:XX:XX:XX][,mtu=VALUE])").from("0.11.0").src(f, "networks"),
		flagRow("--no-dns").src(f, "dnsDisabled"),
		optRow("--os").help("Set OS if image can target multiple operating systems").src(f, "os"),
		optRow("-p", "--publish").val("spec").multi().format(publishFormat).help("Publish a port from container to host (format: [host-ip:]host-port:container-port[/protocol])").src(f, "publishPorts"),
		optRow("--platform").help(platformHelp).until("0.11.0").src(f, "platform"),
		optRow("--platform").help(platformHelp+" [environment: CONTAINER_DEFAULT_PLATFORM]").from("0.11.0").src(f, "platform"),
		optRow("--publish-socket").val("spec").multi().help("Publish a socket from container to host (format: host_path:container_path)").src(f, "publishSockets"),
		flagRow("--read-only").src(f, "readOnly"),
		optRow("--read-only-path").val("path").multi().help("[EXPERIMENTAL] Mark a path inside the container read-only, in addition to the runtime defaults (or NONE to clear prior values and the defaults)").from("1.2.1").src(f, "readonlyPaths"),
		flagRow("--rm", "--remove").src(f, "remove"),
		flagRow("--rosetta").src(f, "rosetta"),
		optRow("--runtime").help("Set the runtime handler for the container (default: container-runtime-linux)").from("0.10.0").src(f, "runtime"),
		flagRow("--ssh").src(f, "ssh"),
		optRow("--shm-size").format(sizeFormat).help("Size of /dev/shm (e.g. 64M, 1G)").from("1.0.0").src(f, "shmSize"),
		optRow("--tmpfs").multi().help("Add a tmpfs mount to the container at the given path").src(f, "tmpFs"),
		flagRow("--virtualization").src(f, "virtualization"),
		optRow("--volume", "-v").multi().format(volumeFormat).help("Bind mount a volume into the container").src(f, "volumes"),
	))
}

func registryArgs() []Arg {
	return one(optRow("--scheme").help("Scheme to use when connecting to the container registry. One of (http, https, auto)").src(flagsSwift, "scheme"))
}

func progressArgs() []Arg {
	f := flagsSwift
	return []Arg{
		optRow("--progress").val("type").typ(progress08).help("Progress type (format: none|ansi)").until("0.12.0").src(f, "progress"),
		optRow("--progress").val("type").typ(progress012).help("Progress type (format: auto|none|ansi|plain|color)").from("0.12.0").src(f, "progress"),
	}
}

func imageFetchArgs() []Arg {
	f := flagsSwift
	return []Arg{
		optRow("--max-concurrent-downloads").typ(intType).help("Maximum number of concurrent downloads (default: 3)").until("1.1.0").src(f, "maxConcurrentDownloads"),
		optRow("--max-concurrent-downloads").typ(intType).help("Maximum number of concurrent downloads").from("1.1.0").src(f, "maxConcurrentDownloads"),
	}
}

// noDNSRule is Flags.Management.validate (1.0.0+), run while the group
// is decoded.
var noDNSRule = Rule{
	Name: "--no-dns with DNS options", Usage: true, Decode: true, From: "1.0.0", Src: flagsSwift + "#validate",
	Check: func(_ Version, p *Parsed) *Failure {
		if p.Has("no-dns") && (p.IsSet("dns") || p.IsSet("dns-domain") || p.IsSet("dns-option") || p.IsSet("dns-search")) {
			return &Failure{Msg: "`--no-dns` cannot be used with DNS configuration flags (`--dns`, `--dns-domain`, `--dns-option`, `--dns-search`)"}
		}
		return nil
	},
}

// idsRules are stop's, kill's and delete's validate(): ids or --all, not both.
func idsRules(file, key, noneMsg, bothMsg, from string) []Rule {
	return []Rule{
		{Name: "no ids and no --all", From: from, Src: file + "#validate", Check: func(_ Version, p *Parsed) *Failure {
			if len(p.Vals(key)) == 0 && !p.Has("all") {
				return &Failure{"invalidArgument", noneMsg}
			}
			return nil
		}},
		{Name: "ids and --all", From: from, Src: file + "#validate", Check: func(_ Version, p *Parsed) *Failure {
			if len(p.Vals(key)) > 0 && p.Has("all") {
				return &Failure{"invalidArgument", bothMsg}
			}
			return nil
		}},
	}
}

// buildTagRule is BuildCommand.validate's reference check of each -t.
var buildTagRule = Rule{
	Name: "-t is a reference", Usage: true, Src: "ContainerCommands/BuildCommand.swift#validate",
	Check: func(_ Version, p *Parsed) *Failure {
		for _, name := range p.Vals("tag") {
			if !ValidReference(name) {
				return &Failure{Msg: "invalid reference " + name}
			}
		}
		return nil
	},
}

// imageListRules are ListImageImplementation.validate.
var imageListRules = []Rule{
	{Name: "--quiet with --verbose", Src: "ContainerCommands/Image/ImageList.swift#validate", Check: func(_ Version, p *Parsed) *Failure {
		if p.Has("quiet") && p.Has("verbose") {
			return &Failure{"invalidArgument", "cannot use flag --quiet and --verbose together"}
		}
		return nil
	}},
	{Name: "--quiet or --verbose with --format json", Until: "1.0.0", Src: "ContainerCommands/Image/ImageList.swift#validate", Check: func(_ Version, p *Parsed) *Failure {
		if (p.Has("quiet") || p.Has("verbose")) && p.Val("format", "table") == "json" {
			return &Failure{"invalidArgument", "cannot use flag --quiet or --verbose along with --format json"}
		}
		return nil
	}},
}

func runArgs(file string, progress bool) []Arg {
	groups := [][]Arg{processArgs(), resourceArgs(), managementArgs(), registryArgs()}
	if progress {
		groups = append(groups, progressArgs())
	}
	groups = append(groups, imageFetchArgs(), one(
		debugRow(),
		posRow("image").help("Image name").src(file, "image"),
		posRow("arguments").optional().rest().help("Container init process arguments").src(file, "arguments"),
	))
	return concat(groups...)
}

func c(file string) string { return "ContainerCommands/" + file }

var commands = []Command{
	// The root: `container [--debug] <subcommand>`; --version and
	// -h/--help are the parser's own. A first word that names no command
	// goes to DefaultCommand (plugins).
	{Path: "", Group: true, Src: appSwift, Args: one(debugRow())},
	// `help [<subcommand> ...]` prints a command's help: the parser's own
	// help command until the CLI declared one (0.12.0).
	{Path: "help", Until: "0.12.0", Src: argParserSrc + "Usage/HelpCommand.swift", Args: one(
		posRow("subcommands").optional().multi().src(argParserSrc+"Usage/HelpCommand.swift", "subcommands"),
	)},
	{Path: "help", From: "0.12.0", Src: c("HelpCommand.swift"), Args: one(
		debugRow().hidden(),
		posRow("subcommand-path").optional().rest().from("1.0.0").src(c("HelpCommand.swift"), "subcommandPath"),
	)},

	// Container commands.
	{Path: "run", Src: c("Container/ContainerRun.swift"), Args: runArgs(c("Container/ContainerRun.swift"), true), Rules: []Rule{noDNSRule}},
	// create declares no progress options.
	{Path: "create", Src: c("Container/ContainerCreate.swift"), Args: runArgs(c("Container/ContainerCreate.swift"), false), Rules: []Rule{noDNSRule}},
	{Path: "start", Src: c("Container/ContainerStart.swift"), Args: one(
		flagRow("--attach", "-a").src(c("Container/ContainerStart.swift"), "attach"),
		flagRow("--interactive", "-i").src(c("Container/ContainerStart.swift"), "interactive"),
		debugRow(),
		posRow("container-id").help("Container ID").src(c("Container/ContainerStart.swift"), "containerId"),
	)},
	{Path: "stop", Src: c("Container/ContainerStop.swift"), Args: one(
		flagRow("--all", "-a").src(c("Container/ContainerStop.swift"), "all"),
		optRow("--signal", "-s").help("Signal to send to the containers").src(c("Container/ContainerStop.swift"), "signal"),
		optRow("--time", "-t").typ(int32Type).help("Seconds to wait before killing the containers").src(c("Container/ContainerStop.swift"), "time"),
		debugRow(),
		posRow("container-ids").optional().multi().help("Container IDs").src(c("Container/ContainerStop.swift"), "containerIds"),
	), Rules: idsRules(c("Container/ContainerStop.swift"), "container-ids", "no containers specified and --all not supplied", "explicitly supplied container IDs conflict with the --all flag", "")},
	{Path: "kill", Src: c("Container/ContainerKill.swift"), Args: one(
		flagRow("--all", "-a").src(c("Container/ContainerKill.swift"), "all"),
		optRow("--signal", "-s").help("Signal to send to the container(s)").src(c("Container/ContainerKill.swift"), "signal"),
		debugRow(),
		posRow("container-ids").optional().multi().help("Container IDs").src(c("Container/ContainerKill.swift"), "containerIds"),
	), Rules: idsRules(c("Container/ContainerKill.swift"), "container-ids", "no containers specified and --all not supplied", "explicitly supplied container IDs conflict with the --all flag", "")},
	{Path: "delete", Aliases: []string{"rm"}, Src: c("Container/ContainerDelete.swift"), Args: one(
		flagRow("--all", "-a").src(c("Container/ContainerDelete.swift"), "all"),
		flagRow("--force", "-f").src(c("Container/ContainerDelete.swift"), "force"),
		debugRow(),
		posRow("container-ids").optional().multi().help("Container IDs").src(c("Container/ContainerDelete.swift"), "containerIds"),
	), Rules: idsRules(c("Container/ContainerDelete.swift"), "container-ids", "no containers specified and --all not supplied", "explicitly supplied container ID(s) conflict with the --all flag", "")},
	{Path: "list", Aliases: []string{"ls"}, Src: c("Container/ContainerList.swift"), Args: concat(
		one(flagRow("--all", "-a").src(c("Container/ContainerList.swift"), "all")),
		listFormatRows(c("Container/ContainerList.swift")),
		one(flagRow("--quiet", "-q").src(c("Container/ContainerList.swift"), "quiet"), debugRow()),
	)},
	{Path: "inspect", Src: c("Container/ContainerInspect.swift"), Args: one(
		debugRow(),
		posRow("container-ids").multi().help("Container IDs to inspect").src(c("Container/ContainerInspect.swift"), "containerIds"),
	)},
	{Path: "logs", Src: c("Container/ContainerLogs.swift"), Args: one(
		flagRow("--boot").src(c("Container/ContainerLogs.swift"), "boot"),
		flagRow("--follow", "-f").src(c("Container/ContainerLogs.swift"), "follow"),
		optRow("-n").typ(intType).help("Number of lines to show from the end of the logs. If not provided this will print all of the logs").src(c("Container/ContainerLogs.swift"), "numLines"),
		debugRow(),
		posRow("container-id").help("Container ID").src(c("Container/ContainerLogs.swift"), "containerId"),
	)},
	{Path: "exec", Src: c("Container/ContainerExec.swift"), Args: concat(processArgs(), one(
		debugRow(),
		flagRow("--detach", "-d").src(c("Container/ContainerExec.swift"), "detach"),
		posRow("container-id").help("Container ID").src(c("Container/ContainerExec.swift"), "containerId"),
		posRow("arguments").rest().help("New process arguments").src(c("Container/ContainerExec.swift"), "arguments"),
	))},
	{Path: "stats", Src: c("Container/ContainerStats.swift"), Args: concat(
		one(posRow("containers").optional().multi().help("Container ID or name (optional, shows all running containers if not specified)").src(c("Container/ContainerStats.swift"), "containers")),
		listFormatRows(c("Container/ContainerStats.swift")),
		one(flagRow("--no-stream").src(c("Container/ContainerStats.swift"), "noStream"), debugRow()),
	)},
	{Path: "prune", From: "0.9.0", Src: c("Container/ContainerPrune.swift"), Args: one(debugRow())},
	{Path: "export", From: "0.10.0", Src: c("Container/ContainerExport.swift"), Args: one(
		debugRow(),
		optRow("--image").help("image name").until("0.11.0").src(c("Container/ContainerExport.swift"), "image"),
		optRow("--output", "-o").help("Pathname for the saved container filesystem (defaults to stdout)").from("0.11.0").src(c("Container/ContainerExport.swift"), "output"),
		posRow("id").help("container ID").src(c("Container/ContainerExport.swift"), "id"),
	)},
	{Path: "copy", Aliases: []string{"cp"}, From: "1.0.0", Src: c("Container/ContainerCopy.swift"), Args: one(
		debugRow(),
		posRow("source").help("Source path (container:path or local path)").src(c("Container/ContainerCopy.swift"), "source"),
		posRow("destination").help("Destination path (container:path or local path)").src(c("Container/ContainerCopy.swift"), "destination"),
	)},

	// build and the builder.
	{Path: "build", Src: c("BuildCommand.swift"), Args: buildArgs(), Rules: []Rule{buildTagRule}},
	{Path: "builder", Group: true, Src: c("Builder/Builder.swift"), Args: one(debugRow())},
	{Path: "builder start", Src: c("Builder/BuilderStart.swift"), Args: concat(one(
		optRow("--cpus", "-c").typ(int64Type).help("Number of CPUs to allocate to the builder container").src(c("Builder/BuilderStart.swift"), "cpus"),
		optRow("--memory", "-m").help("Amount of builder container memory (1MiByte granularity), with optional K, M, G, T, or P suffix").src(c("Builder/BuilderStart.swift"), "memory"),
	), builderDNSArgs(), one(debugRow()))},
	{Path: "builder status", Src: c("Builder/BuilderStatus.swift"), Args: concat(
		listFormatRows(c("Builder/BuilderStatus.swift")),
		one(flagRow("--quiet", "-q").src(c("Builder/BuilderStatus.swift"), "quiet"), debugRow()),
	)},
	{Path: "builder stop", Src: c("Builder/BuilderStop.swift"), Args: one(debugRow())},
	{Path: "builder delete", Aliases: []string{"rm"}, Src: c("Builder/BuilderDelete.swift"), Args: one(
		flagRow("--force", "-f").src(c("Builder/BuilderDelete.swift"), "force"),
		debugRow(),
	)},

	// Images.
	{Path: "image", Aliases: []string{"i"}, Group: true, Src: c("Image/ImageCommand.swift"), Args: one(debugRow())},
	{Path: "image delete", Aliases: []string{"rm"}, Src: c("Image/ImageDelete.swift"), Args: one(
		flagRow("--all", "-a").src(c("Image/ImageDelete.swift"), "all"),
		flagRow("--force", "-f").from("0.9.0").src(c("Image/ImageDelete.swift"), "force"),
		posRow("images").optional().multi().src(c("Image/ImageDelete.swift"), "images"),
		debugRow(),
	), Rules: []Rule{
		{Name: "no images and no --all", Src: c("Image/ImageDelete.swift") + "#validate", Check: func(_ Version, p *Parsed) *Failure {
			if len(p.Vals("images")) == 0 && !p.Has("all") {
				return &Failure{"invalidArgument", "no images specified and --all not supplied"}
			}
			return nil
		}},
		{Name: "images and --all", Src: c("Image/ImageDelete.swift") + "#validate", Check: func(_ Version, p *Parsed) *Failure {
			if len(p.Vals("images")) > 0 && p.Has("all") {
				return &Failure{"invalidArgument", "explicitly supplied images conflict with the --all flag"}
			}
			return nil
		}},
	}},
	{Path: "image inspect", Src: c("Image/ImageInspect.swift"), Args: one(
		debugRow(),
		posRow("images").multi().help("Images to inspect").src(c("Image/ImageInspect.swift"), "images"),
	)},
	{Path: "image list", Aliases: []string{"ls"}, Src: c("Image/ImageList.swift"), Args: concat(
		listFormatRows(c("Image/ImageList.swift")),
		one(
			flagRow("--quiet", "-q").src(c("Image/ImageList.swift"), "quiet"),
			flagRow("--verbose", "-v").src(c("Image/ImageList.swift"), "verbose"),
			debugRow(),
		),
	), Rules: imageListRules},
	{Path: "image load", Src: c("Image/ImageLoad.swift"), Args: one(
		optRow("--input", "-i").help("Path to the image tar archive").src(c("Image/ImageLoad.swift"), "input"),
		flagRow("--force", "-f").src(c("Image/ImageLoad.swift"), "force"),
		debugRow(),
	)},
	{Path: "image prune", Src: c("Image/ImagePrune.swift"), Args: one(
		debugRow(),
		flagRow("--all", "-a").src(c("Image/ImagePrune.swift"), "all"),
	)},
	{Path: "image pull", Src: c("Image/ImagePull.swift"), Args: concat(registryArgs(), progressArgs(), imageFetchArgs(), one(
		optRow("--arch", "-a").help("Limit the pull to the specified architecture").src(c("Image/ImagePull.swift"), "arch"),
		optRow("--os").help("Limit the pull to the specified OS").src(c("Image/ImagePull.swift"), "os"),
		optRow("--platform").help("Limit the pull to the specified platform (format: os/arch[/variant], takes precedence over --os and --arch)").until("0.11.0").src(c("Image/ImagePull.swift"), "platform"),
		optRow("--platform").help("Limit the pull to the specified platform (format: os/arch[/variant], takes precedence over --os and --arch) [environment: CONTAINER_DEFAULT_PLATFORM]").from("0.11.0").src(c("Image/ImagePull.swift"), "platform"),
		debugRow(),
		posRow("reference").src(c("Image/ImagePull.swift"), "reference"),
	))},
	{Path: "image push", Src: c("Image/ImagePush.swift"), Args: concat(registryArgs(), progressArgs(), one(
		optRow("--arch", "-a").help("Limit the push to the specified architecture").src(c("Image/ImagePush.swift"), "arch"),
		optRow("--os").help("Limit the push to the specified OS").src(c("Image/ImagePush.swift"), "os"),
		optRow("--platform").help("Limit the push to the specified platform (format: os/arch[/variant], takes precedence over --os and --arch)").until("0.11.0").src(c("Image/ImagePush.swift"), "platform"),
		optRow("--platform").help("Limit the push to the specified platform (format: os/arch[/variant], takes precedence over --os and --arch) [environment: CONTAINER_DEFAULT_PLATFORM]").from("0.11.0").src(c("Image/ImagePush.swift"), "platform"),
		debugRow(),
		posRow("reference").src(c("Image/ImagePush.swift"), "reference"),
	))},
	{Path: "image save", Src: c("Image/ImageSave.swift"), Args: one(
		optRow("--arch", "-a").help("Architecture for the saved image").src(c("Image/ImageSave.swift"), "arch"),
		optRow("--os").help("OS for the saved image").src(c("Image/ImageSave.swift"), "os"),
		optRow("--output", "-o").help("Pathname for the saved image").src(c("Image/ImageSave.swift"), "output"),
		optRow("--platform").help("Platform for the saved image (format: os/arch[/variant], takes precedence over --os and --arch)").until("0.11.0").src(c("Image/ImageSave.swift"), "platform"),
		optRow("--platform").help("Platform for the saved image (format: os/arch[/variant], takes precedence over --os and --arch) [environment: CONTAINER_DEFAULT_PLATFORM]").from("0.11.0").src(c("Image/ImageSave.swift"), "platform"),
		debugRow(),
		posRow("references").multi().src(c("Image/ImageSave.swift"), "references"),
	)},
	{Path: "image tag", Src: c("Image/ImageTag.swift"), Args: one(
		posRow("source").help("The existing image reference (format: image-name[:tag])").src(c("Image/ImageTag.swift"), "source"),
		posRow("target").help("The new image reference").src(c("Image/ImageTag.swift"), "target"),
		debugRow(),
	)},

	// Registries.
	{Path: "registry", Aliases: []string{"r"}, Group: true, Src: c("Registry/RegistryCommand.swift"), Args: one(debugRow())},
	{Path: "registry login", Until: "0.10.0", Src: c("Registry/Login.swift"), Args: registryLoginArgs(c("Registry/Login.swift"))},
	{Path: "registry login", From: "0.10.0", Src: c("Registry/RegistryLogin.swift"), Args: registryLoginArgs(c("Registry/RegistryLogin.swift"))},
	{Path: "registry logout", Until: "0.10.0", Src: c("Registry/Logout.swift"), Args: one(debugRow(), posRow("registry").help("Registry server name").src(c("Registry/Logout.swift"), "registry"))},
	{Path: "registry logout", From: "0.10.0", Src: c("Registry/RegistryLogout.swift"), Args: one(debugRow(), posRow("registry").help("Registry server name").src(c("Registry/RegistryLogout.swift"), "registry"))},
	{Path: "registry list", Aliases: []string{"ls"}, From: "0.10.0", Src: c("Registry/RegistryList.swift"), Args: concat(
		one(debugRow()),
		listFormatRows(c("Registry/RegistryList.swift")),
		one(flagRow("--quiet", "-q").src(c("Registry/RegistryList.swift"), "quiet")),
	)},

	// Volumes.
	{Path: "volume", Aliases: []string{"v"}, Group: true, Src: c("Volume/VolumeCommand.swift"), Args: one(debugRow())},
	{Path: "volume create", Src: c("Volume/VolumeCreate.swift"), Args: one(
		optRow("--label").multi().help("Set metadata for a volume").src(c("Volume/VolumeCreate.swift"), "labels"),
		optRow("--opt").multi().help("Set driver specific options").src(c("Volume/VolumeCreate.swift"), "driverOpts"),
		optRow("-s").format(volumeSizeFormat).help("Size of the volume in bytes, with optional K, M, G, T, or P suffix").src(c("Volume/VolumeCreate.swift"), "size"),
		debugRow(),
		posRow("name").format(volumeCreateNameFormat).help("Volume name").src(c("Volume/VolumeCreate.swift"), "name"),
	)},
	{Path: "volume delete", Aliases: []string{"rm"}, Src: c("Volume/VolumeDelete.swift"), Args: one(
		flagRow("--all", "-a").src(c("Volume/VolumeDelete.swift"), "all"),
		debugRow(),
		posRow("names").optional().multi().help("Volume names").src(c("Volume/VolumeDelete.swift"), "names"),
	), Rules: idsRules(c("Volume/VolumeDelete.swift"), "names", "no volumes specified and --all not supplied", "explicitly supplied volume name(s) conflict with the --all flag", "1.0.0")},
	{Path: "volume list", Aliases: []string{"ls"}, Src: c("Volume/VolumeList.swift"), Args: concat(
		listFormatRows(c("Volume/VolumeList.swift")),
		one(flagRow("--quiet", "-q").src(c("Volume/VolumeList.swift"), "quiet"), debugRow()),
	)},
	{Path: "volume inspect", Src: c("Volume/VolumeInspect.swift"), Args: one(
		debugRow(),
		posRow("names").multi().help("Volumes to inspect").src(c("Volume/VolumeInspect.swift"), "names"),
	)},
	{Path: "volume prune", Src: c("Volume/VolumePrune.swift"), Args: one(debugRow())},

	// Networks (registered on macOS 26, which the stand-in is).
	{Path: "network", Aliases: []string{"n"}, Group: true, Src: c("Network/NetworkCommand.swift"), Args: one(debugRow())},
	{Path: "network create", Src: c("Network/NetworkCreate.swift"), Args: networkCreateArgs()},
	{Path: "network delete", Aliases: []string{"rm"}, Src: c("Network/NetworkDelete.swift"), Args: one(
		flagRow("--all", "-a").src(c("Network/NetworkDelete.swift"), "all"),
		debugRow(),
		posRow("network-names").optional().multi().help("Network names").src(c("Network/NetworkDelete.swift"), "networkNames"),
	), Rules: idsRules(c("Network/NetworkDelete.swift"), "network-names", "no networks specified and --all not supplied", "explicitly supplied network name(s) conflict with the --all flag", "")},
	{Path: "network list", Aliases: []string{"ls"}, Src: c("Network/NetworkList.swift"), Args: concat(
		listFormatRows(c("Network/NetworkList.swift")),
		one(flagRow("--quiet", "-q").src(c("Network/NetworkList.swift"), "quiet"), debugRow()),
	)},
	{Path: "network inspect", Src: c("Network/NetworkInspect.swift"), Args: one(
		posRow("networks").multi().help("Networks to inspect").src(c("Network/NetworkInspect.swift"), "networks"),
		debugRow(),
	)},
	{Path: "network prune", Src: c("Network/NetworkPrune.swift"), Args: one(debugRow())},

	// System.
	{Path: "system", Aliases: []string{"s"}, Group: true, Src: c("System/SystemCommand.swift"), Args: one(debugRow())},
	{Path: "system df", Src: c("System/SystemDF.swift"), Args: concat(listFormatRows(c("System/SystemDF.swift")), one(debugRow()))},
	{Path: "system dns", Group: true, Src: c("System/SystemDNS.swift"), Args: one(debugRow())},
	{Path: "system dns create", Src: c("System/DNS/DNSCreate.swift"), Args: one(
		debugRow(),
		optRow("--localhost").help("Set the ip address to be redirected to localhost").from("0.9.0").src(c("System/DNS/DNSCreate.swift"), "localhost"),
		posRow("domain-name").help("The local domain name").src(c("System/DNS/DNSCreate.swift"), "domainName"),
	)},
	{Path: "system dns delete", Aliases: []string{"rm"}, Src: c("System/DNS/DNSDelete.swift"), Args: one(
		debugRow(),
		posRow("domain-name").help("The local domain name").src(c("System/DNS/DNSDelete.swift"), "domainName"),
	)},
	{Path: "system dns list", Aliases: []string{"ls"}, Src: c("System/DNS/DNSList.swift"), Args: concat(
		listFormatRows(c("System/DNS/DNSList.swift")),
		one(flagRow("--quiet", "-q").src(c("System/DNS/DNSList.swift"), "quiet"), debugRow()),
	)},
	{Path: "system kernel", Group: true, Src: c("System/SystemKernel.swift"), Args: one(debugRow())},
	{Path: "system kernel set", Src: c("System/Kernel/KernelSet.swift"), Args: one(
		optRow("--arch").help("The architecture of the kernel binary (values: amd64, arm64)").src(c("System/Kernel/KernelSet.swift"), "arch"),
		optRow("--binary").help("Path to the kernel file (or archive member, if used with --tar)").src(c("System/Kernel/KernelSet.swift"), "binaryPath"),
		flagRow("--force").src(c("System/Kernel/KernelSet.swift"), "force"),
		flagRow("--recommended").src(c("System/Kernel/KernelSet.swift"), "recommended"),
		optRow("--tar").help("Filesystem path or remote URL to a tar archive containing a kernel file").src(c("System/Kernel/KernelSet.swift"), "tarPath"),
		optRow("--digest").help("Expected digest for the tar archive, for example sha256:<hex>. Required when --tar is a remote URL.").from("1.2.0").src(c("System/Kernel/KernelSet.swift"), "digest"),
		debugRow(),
	)},
	{Path: "system logs", Src: c("System/SystemLogs.swift"), Args: one(
		flagRow("--follow", "-f").src(c("System/SystemLogs.swift"), "follow"),
		optRow("--last").help("Fetch logs starting from the specified time period (minus the current time); supported formats: m, h, d").until("1.0.0").src(c("System/SystemLogs.swift"), "last"),
		optRow("--last").help("Fetch logs starting from the specified time period (minus the current time); supported formats: <number>[m|h|d] (defaults to seconds)").from("1.0.0").src(c("System/SystemLogs.swift"), "last"),
		debugRow(),
	)},
	{Path: "system property", Group: true, Src: c("System/SystemProperty.swift"), Args: one(debugRow())},
	{Path: "system property clear", Until: "1.0.0", Src: c("System/Property/PropertyClear.swift"), Args: one(debugRow(), posRow("id").help("The property ID").src(c("System/Property/PropertyClear.swift"), "id"))},
	{Path: "system property get", Until: "1.0.0", Src: c("System/Property/PropertyGet.swift"), Args: one(debugRow(), posRow("id").help("The property ID").src(c("System/Property/PropertyGet.swift"), "id"))},
	{Path: "system property list", Aliases: []string{"ls"}, Src: c("System/Property/PropertyList.swift"), Args: concat(
		listFormatRows(c("System/Property/PropertyList.swift"))[:2],
		one(
			flagRow("--quiet", "-q").until("1.0.0").src(c("System/Property/PropertyList.swift"), "quiet"),
			optRow("--format").typ(listOutputFormat).help("Format of the output").from("1.0.0").src(c("System/Property/PropertyList.swift"), "format"),
			debugRow(),
		),
	)},
	{Path: "system property set", Until: "1.0.0", Src: c("System/Property/PropertySet.swift"), Args: one(
		debugRow(),
		posRow("id").help("The property ID").src(c("System/Property/PropertySet.swift"), "id"),
		posRow("value").help("The property value").src(c("System/Property/PropertySet.swift"), "value"),
	)},
	{Path: "system start", Src: c("System/SystemStart.swift"), Args: one(
		optRow("--app-root", "-a").help("Path to the root directory for application data").src(c("System/SystemStart.swift"), "appRoot"),
		optRow("--install-root").help("Path to the root directory for application executables and plugins").src(c("System/SystemStart.swift"), "installRoot"),
		optRow("--log-root").help("Path to the root directory for log data, using macOS log facility if not set").from("0.10.0").src(c("System/SystemStart.swift"), "logRoot"),
		flagRow("--enable-kernel-install", "--disable-kernel-install").src(c("System/SystemStart.swift"), "kernelInstall"),
		optRow("--timeout").typ(timeoutType).help("Number of seconds to wait for API service to become responsive").from("0.10.0").src(c("System/SystemStart.swift"), "timeout"),
		debugRow(),
	)},
	{Path: "system status", Src: c("System/SystemStatus.swift"), Args: concat(
		one(optRow("--prefix", "-p").help("Launchd prefix for services").src(c("System/SystemStatus.swift"), "prefix")),
		fromRows("0.10.0", listFormatRows(c("System/SystemStatus.swift"))),
		one(debugRow()),
	)},
	{Path: "system stop", Src: c("System/SystemStop.swift"), Args: one(
		optRow("--prefix", "-p").help("Launchd prefix for services").src(c("System/SystemStop.swift"), "prefix"),
		debugRow(),
	)},
	{Path: "system version", Until: "0.10.0", Src: c("System/Version.swift"), Args: concat(listFormatRows(c("System/Version.swift")), one(debugRow()))},
	{Path: "system version", From: "0.10.0", Src: c("System/SystemVersion.swift"), Args: concat(listFormatRows(c("System/SystemVersion.swift")), one(debugRow()))},
}

// fromRows narrows rows to releases from v on.
func fromRows(v string, rows []Arg) []Arg {
	var out []Arg
	for _, r := range rows {
		if r.Until != "" && !MustVersion(v).Before(r.Until) {
			continue
		}
		if r.From == "" || MustVersion(r.From).Before(v) {
			r.From = v
		}
		out = append(out, r)
	}
	return out
}

func buildArgs() []Arg {
	f := c("BuildCommand.swift")
	return concat(one(
		optRow("--arch", "-a").val("value").multi().help("Add the architecture type to the build").src(f, "arch"),
		optRow("--build-arg").val("key=val").multi().help("Set build-time variables").src(f, "buildArg"),
		optRow("--cache-in").val("value").multi().hidden().help("Cache imports for the build").src(f, "cacheIn"),
		optRow("--cache-out").val("value").multi().hidden().help("Cache exports for the build").src(f, "cacheOut"),
		optRow("--cpus", "-c").typ(int64Type).help("Number of CPUs to allocate to the builder container").src(f, "cpus"),
		optRow("--file", "-f").val("path").help("Path to Dockerfile").src(f, "file"),
		optRow("--label", "-l").val("key=val").multi().help("Set a label").src(f, "label"),
		optRow("--memory", "-m").help("Amount of builder container memory (1MiByte granularity), with optional K, M, G, T, or P suffix").src(f, "memory"),
		flagRow("--no-cache").src(f, "noCache"),
		optRow("--output", "-o").val("value").multi().help("Output configuration for the build (format: type=<oci|tar|local>[,dest=])").src(f, "output"),
		optRow("--os").val("value").multi().help("Add the OS type to the build").src(f, "os"),
		optRow("--platform").multi().help("Add the platform to the build (format: os/arch[/variant], takes precedence over --os and --arch)").until("0.11.0").src(f, "platform"),
		optRow("--platform").multi().help("Add the platform to the build (format: os/arch[/variant], takes precedence over --os and --arch) [environment: CONTAINER_DEFAULT_PLATFORM]").from("0.11.0").src(f, "platform"),
		optRow("--progress").val("type").typ(buildProgress).help("Progress type (format: auto|plain|tty)").src(f, "progress"),
		flagRow("--quiet", "-q").src(f, "quiet"),
		optRow("--secret").val("id=key,...").multi().help("Set build-time secrets (format: id=<key>[,env=<ENV_VAR>|,src=<local/path>])").from("0.11.0").src(f, "secret"),
		optRow("--ssh").val("default").help("Forward SSH agent authentication to the build (format: default)").from("1.2.1").src(f, "ssh"),
		optRow("-t", "--tag").val("name").multi().help("Name for the built image").src(f, "targetImageNames"),
		optRow("--target").val("stage").help("Set the target build stage").src(f, "target"),
		optRow("--vsock-port").val("port").typ(uint32Type).help("Builder shim vsock port").src(f, "vsockPort"),
		debugRow(),
	), fromRows("0.9.0", dnsArgs()), one(
		posRow("context-dir").optional().help("Build directory").src(f, "contextDir"),
		flagRow("--pull").from("0.10.0").src(f, "pull"),
	))
}

// builderDNSArgs are `builder start`'s Flags.DNS group (0.9.0+).
func builderDNSArgs() []Arg { return fromRows("0.9.0", dnsArgs()) }

func registryLoginArgs(f string) []Arg {
	return concat(registryArgs(), one(
		flagRow("--password-stdin").src(f, "passwordStdin"),
		optRow("--username", "-u").help("Registry user name").src(f, "username"),
		debugRow(),
		posRow("server").help("Registry server name").src(f, "server"),
	))
}

func networkCreateArgs() []Arg {
	f := c("Network/NetworkCreate.swift")
	label := optRow("--label").multi().help("Set metadata for a network").src(f, "labels")
	internal := flagRow("--internal").src(f, "hostOnly")
	subnet := optRow("--subnet").help("Set subnet for a network").src(f, "ipv4Subnet")
	subnet6 := optRow("--subnet-v6").help("Set the IPv6 prefix for a network").src(f, "ipv6Subnet")
	plugin := optRow("--plugin").help("Set the plugin to use to create this network.").src(f, "plugin")
	return one(
		// ≤0.12.x: label, internal (0.9.0), subnet, subnet-v6, plugin and plugin-variant (0.10.0).
		label.until("1.0.0"),
		internal.from("0.9.0").until("1.0.0"),
		subnet.until("1.0.0"),
		subnet6.until("1.0.0"),
		plugin.from("0.10.0").until("1.0.0"),
		optRow("--plugin-variant").help("Set the variant of the network plugin to use.").from("0.10.0").until("1.0.0").src(f, "pluginVariant"),
		// 1.0.0+: internal, label, option, plugin, subnet, subnet-v6.
		internal.from("1.0.0"),
		label.from("1.0.0"),
		optRow("--option").multi().help("Set a plugin-specific option (key=value)").from("1.0.0").src(f, "options"),
		plugin.from("1.0.0"),
		subnet.from("1.0.0"),
		subnet6.from("1.0.0"),
		debugRow(),
		posRow("name").help("Network name").src(f, "name"),
	)
}
