package applecli

// Sample is a command line a release past the source was captured
// taking (apple-container-samples.md, the project's reference).
type Sample struct {
	Version Version
	Argv    []string
	Source  string
}

// Samples are what captures of 1.3.1, 1.4.1 and 1.5.0 show the CLI
// taking. Those releases are not in the source snapshot (newest tag
// 1.2.2); their tables are 1.2.2's, and these lines are checked against
// them. Nothing captured so far shows an argument that 1.2.2 lacks.
var Samples = []Sample{
	{Version{1, 3, 1}, []string{"inspect", "nosuch"}, "samples §6: bushel fixtures/1.3.1/stderr/not_found_inspect.txt"},
	{Version{1, 3, 1}, []string{"stop", "nosuch"}, "samples §6: bushel fixtures/1.3.1/stderr/not_found_stop.txt"},
	{Version{1, 3, 1}, []string{"system", "status", "--format", "json"}, "samples §4.2: bushel fixtures/1.3.1/system_status_down.json"},
	{Version{1, 4, 1}, []string{"--version"}, "samples §4.3: flotilla CAPTURED.md"},
	{Version{1, 4, 1}, []string{"ls", "--all", "--format", "json"}, "samples §1.6: flotilla Fixtures (1.4.1)"},
	{Version{1, 4, 1}, []string{"inspect", "busy"}, "samples §1.7: flotilla Fixtures (1.4.1)"},
	{Version{1, 4, 1}, []string{"image", "list", "--format", "json"}, "samples §2.2: flotilla Fixtures/images.json"},
	{Version{1, 4, 1}, []string{"image", "inspect", "docker.io/library/alpine:3.22"}, "samples §2.3: flotilla Fixtures (1.4.1)"},
	{Version{1, 4, 1}, []string{"stats", "--format", "json", "--no-stream"}, "samples §3.3: flotilla Fixtures/stats.json"},
	{Version{1, 4, 1}, []string{"system", "status", "--format", "json"}, "samples §4.1: flotilla Fixtures/system-status.json"},
	{Version{1, 4, 1}, []string{"system", "version", "--format", "json"}, "samples §4.4: flotilla Fixtures/version.json"},
	{Version{1, 4, 1}, []string{"volume", "create", "-s", "64M", "probe-shortform"}, "samples §5.1: flotilla Fixtures/volumes.json (a -s 64M volume)"},
	{Version{1, 4, 1}, []string{"volume", "list", "--format", "json"}, "samples §5.1: flotilla Fixtures/volumes.json"},
	{Version{1, 4, 1}, []string{"network", "list", "--format", "json"}, "samples §5.3: flotilla Fixtures/networks.json"},
	{Version{1, 4, 1}, []string{"network", "inspect", "default"}, "samples §5.4: flotilla Fixtures/inspect-network.json"},
	{Version{1, 5, 0}, []string{"--version"}, "samples §4.3: flotilla container-1.5.0/CAPTURED.md"},
	{Version{1, 5, 0}, []string{"ls", "--format", "json"}, "samples §1.8: flotilla container-1.5.0"},
	{Version{1, 5, 0}, []string{"system", "status", "--format", "json"}, "samples §4.1: flotilla container-1.5.0/system-status.json"},
	{Version{1, 5, 0}, []string{"system", "version", "--format", "json"}, "samples §4.4: flotilla container-1.5.0/version.json"},
	{Version{1, 5, 0}, []string{"system", "df", "--format", "json"}, "samples §5.5: flotilla container-1.5.0/system-df.json"},
}
