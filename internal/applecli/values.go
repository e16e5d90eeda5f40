package applecli

import (
	"math"
	"net"
	"regexp"
	"strconv"
	"strings"
)

// Value types the argument parser converts while it parses.

// swiftInt is FixedWidthInteger(_:radix:) as ExpressibleByArgument uses
// it: an optional sign, then decimal digits only, in range.
func swiftInt(bits int, signed bool) func(string) (bool, string) {
	return func(s string) (bool, string) {
		if s == "" {
			return false, ""
		}
		if signed {
			_, err := strconv.ParseInt(strings.TrimPrefix(s, "+"), 10, bits)
			return err == nil && !strings.HasPrefix(s, "+-") && !strings.HasPrefix(s, "++"), ""
		}
		t := strings.TrimPrefix(s, "+")
		if t == "-0" {
			return true, ""
		}
		_, err := strconv.ParseUint(t, 10, bits)
		return err == nil, ""
	}
}

var (
	int64Type  = &Type{Name: "Int64", Parse: swiftInt(64, true)}
	int32Type  = &Type{Name: "Int32", Parse: swiftInt(32, true)}
	intType    = &Type{Name: "Int", Parse: swiftInt(64, true)}
	uint32Type = &Type{Name: "UInt32", Parse: swiftInt(32, false)}
)

// enumType is a CaseIterable String enum: its raw values, in order.
func enumType(name string, cases ...string) *Type {
	return &Type{Name: name, Cases: cases, Parse: func(s string) (bool, string) {
		for _, c := range cases {
			if s == c {
				return true, ""
			}
		}
		return false, ""
	}}
}

// ListFormat (Application.swift ≤0.11, ListFormat.swift 0.12+).
var (
	listFormat08  = enumType("ListFormat", "json", "table")
	listFormat012 = enumType("ListFormat", "json", "table", "yaml")
	listFormat10  = enumType("ListFormat", "json", "table", "yaml", "toml")
	// ListOutputFormat (System/Property/PropertyList.swift, 1.0.0+).
	listOutputFormat = enumType("ListOutputFormat", "json", "toml")
	// Flags.Progress.ProgressType: none|ansi before 0.12.0, then five.
	progress08  = enumType("ProgressType", "none", "ansi")
	progress012 = enumType("ProgressType", "auto", "none", "ansi", "plain", "color")
	// BuildCommand.ProgressType.
	buildProgress = enumType("ProgressType", "auto", "plain", "tty")
	// MachineCommand.ListFormat is not covered (machine commands are not in the tables).
)

// timeoutType is `system start --timeout`'s transform (SystemStart.swift,
// 0.10.0+): a Double, else ValidationError("Invalid timeout value: x").
var timeoutType = &Type{Name: "Duration", Parse: func(s string) (bool, string) {
	if _, ok := swiftDouble(s); ok {
		return true, ""
	}
	return false, "Invalid timeout value: " + s
}}

// swiftDouble is Double(String): a decimal or hexadecimal float, "inf",
// "nan", with an optional sign; no spaces.
func swiftDouble(s string) (float64, bool) {
	if s == "" || strings.TrimSpace(s) != s || strings.ContainsAny(s, "_") {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return f, true
		}
		return 0, false
	}
	return f, true
}

// Format rules the commands apply to values when they run.

// formatOf makes a Format from a check that does not depend on the release.
func formatOf(name, src string, check func(s string) *Failure) *Format {
	return &Format{Name: name, Src: src, Check: func(_ Version, s string) *Failure { return check(s) }}
}

// labelFormat is Parser.labels for `run`/`create -l`.
var labelFormat = formatOf("label", "Services/ContainerAPIService/Client/Parser.swift#labels", runLabel)

// memoryFormat is Parser.resources' -m: Measurement.parse in whole MiB;
// its errors are not ContainerizationErrors and print as they are.
var memoryFormat = formatOf("memory", "Services/ContainerAPIService/Client/Parser.swift#memoryStringAsMiB", func(s string) *Failure {
	if _, err := MemoryMiB(s); err != nil {
		return &Failure{Msg: err.Error()}
	}
	return nil
})

// sizeFormat is Measurement.parse in bytes (`--shm-size`, 1.0.0+).
var sizeFormat = formatOf("size", "Services/ContainerAPIService/Client/Utility.swift#shmSize", func(s string) *Failure {
	if _, err := SizeBytes(s); err != nil {
		return &Failure{Msg: err.Error()}
	}
	return nil
})

// containerNameRE is the container id rule of Utility.validEntityName
// (≤1.1.x) and ManagedContainer.nameValid (1.2.0+, which also caps it at
// 63 characters).
var containerNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

// ContainerName checks a `--name` the way release v's run and create do,
// before anything else they do.
func ContainerName(v Version, id string) *Failure {
	if v.Before("1.2.0") {
		if !containerNameRE.MatchString(id) {
			return &Failure{"invalidArgument", "invalid entity name " + id}
		}
		return nil
	}
	if len([]rune(id)) > 63 || !containerNameRE.MatchString(id) {
		return &Failure{"invalidArgument", "container ID " + id + " is not a valid container ID"}
	}
	return nil
}

var containerNameFormat = &Format{Name: "container name", Src: "ContainerCommands/Container/ContainerRun.swift#nameValid", Check: ContainerName}

// VolumeNamePattern is VolumeStorage.volumeNamePattern; names are also at
// most 255 characters (VolumeStorage.isValidVolumeName, 0.8.0–1.2.2).
const VolumeNamePattern = "^[A-Za-z0-9][A-Za-z0-9_.-]*$"

var volumeNameRE = regexp.MustCompile(VolumeNamePattern)

// ValidVolumeName reports whether name is a volume name.
func ValidVolumeName(name string) bool { return len(name) <= 255 && volumeNameRE.MatchString(name) }

// volumeCreateName is the volume service's check of `volume create`'s
// name: its VolumeError wraps the whole message in its own description.
var volumeCreateNameFormat = formatOf("volume name", "Services/ContainerAPIService/Server/Volumes/VolumesService.swift#_create", func(name string) *Failure {
	if !ValidVolumeName(name) {
		return &Failure{"invalidArgument", "invalid volume name 'invalid volume name '" + name + "': must match " + VolumeNamePattern + "'"}
	}
	return nil
})

// volumeSizeFormat is the volume service's size: Measurement.parse in
// bytes, at least 1 MiB; a parse error comes back as .unknown.
var volumeSizeFormat = formatOf("volume size", "Services/ContainerAPIService/Server/Volumes/VolumesService.swift#parseSize", func(s string) *Failure {
	n, err := SizeBytes(s)
	if err != nil {
		return &Failure{"unknown", err.Error()}
	}
	if n < 1<<20 {
		return &Failure{"invalidArgument", "storage error: volume size too small: minimum 1MiB"}
	}
	return nil
})

// SplitOmittingEmpty is Swift's split(separator:) with its default of
// dropping empty pieces.
func SplitOmittingEmpty(s, sep string) []string {
	var out []string
	for _, p := range strings.Split(s, sep) {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// VolumeSpec is one `-v` value as Parser.volume reads it (Parser.swift,
// 0.8.0–1.2.2).
type VolumeSpec struct {
	Anonymous bool     // "/ctr" alone
	Source    string   // a host path or a volume name
	Path      bool     // Source is a host path
	Target    string   // where it is mounted
	Options   []string // after the second ':', split on ','
}

// ParseVolume reads a `-v` value: leading ':' are trimmed and the rest
// split on ':' with empty pieces dropped. One piece is an anonymous
// volume mounted there; two or three are source, destination and
// options. The source is a host path when it holds a '/' or, from 0.11.0,
// is "." or ".."; anything else is a volume name, which must match the
// volume name pattern. Four pieces or more are refused. (That a host path
// exists is checked when the command runs, not here.)
func ParseVolume(v Version, s string) (VolumeSpec, *Failure) {
	parts := SplitOmittingEmpty(strings.TrimLeft(s, ":"), ":")
	switch len(parts) {
	case 1:
		return VolumeSpec{Anonymous: true, Target: parts[0]}, nil
	case 2, 3:
	default:
		return VolumeSpec{}, &Failure{"invalidArgument", "invalid volume format " + s}
	}
	spec := VolumeSpec{Source: parts[0], Target: parts[1]}
	if len(parts) == 3 {
		spec.Options = SplitOmittingEmpty(parts[2], ",")
	}
	spec.Path = strings.Contains(spec.Source, "/") || (v.AtLeast("0.11.0") && (spec.Source == "." || spec.Source == ".."))
	if !spec.Path && !ValidVolumeName(spec.Source) {
		return VolumeSpec{}, &Failure{"invalidArgument", "invalid volume name '" + spec.Source + "': must match " + VolumeNamePattern}
	}
	return spec, nil
}

var volumeFormat = &Format{Name: "volume", Src: "Services/ContainerAPIService/Client/Parser.swift#volume", Check: func(v Version, s string) *Failure {
	_, f := ParseVolume(v, s)
	return f
}}

// Network is one `--network` value as Parser.network reads it.
type Network struct {
	Name string
	MAC  string
	MTU  uint32
}

// ParseNetwork is Parser.network (Parser.swift, 0.8.0–1.2.2):
// "<name>[,mac=XX:..][,mtu=N]"; the pieces are split on ',' keeping empty
// ones, each property on '=' (at most two splits, keeping empty pieces,
// so "mac=a=b" is refused); mtu (0.11.0+) must be 1280..65535.
func ParseNetwork(v Version, spec string) (Network, *Failure) {
	if spec == "" {
		return Network{}, &Failure{"invalidArgument", "network specification cannot be empty"}
	}
	parts := strings.Split(spec, ",")
	n := Network{Name: parts[0]}
	if n.Name == "" {
		return Network{}, &Failure{"invalidArgument", "network name cannot be empty"}
	}
	props := "mac, mtu"
	if v.Before("0.11.0") {
		props = "mac"
	}
	for _, part := range parts[1:] {
		kv := strings.SplitN(part, "=", 3)
		if len(kv) != 2 {
			return Network{}, &Failure{"invalidArgument", "invalid property format '" + part + "' in network specification '" + spec + "'"}
		}
		switch key, val := kv[0], kv[1]; {
		case key == "mac":
			if val == "" {
				return Network{}, &Failure{"invalidArgument", "mac address value cannot be empty"}
			}
			n.MAC = val
		case key == "mtu" && v.AtLeast("0.11.0"):
			m, err := strconv.ParseUint(strings.TrimPrefix(val, "+"), 10, 32)
			if err != nil || m < 1280 || m > 65535 {
				return Network{}, &Failure{"invalidArgument", "invalid mtu value '" + val + "': must be between 1280 and 65535"}
			}
			n.MTU = uint32(m)
		default:
			return Network{}, &Failure{"invalidArgument", "unknown network property '" + key + "'. Available properties: " + props}
		}
	}
	return n, nil
}

var networkFormat = &Format{Name: "network", Src: "Services/ContainerAPIService/Client/Parser.swift#network", Check: func(v Version, s string) *Failure {
	_, f := ParseNetwork(v, s)
	return f
}}

// mountFormat is the syntax part of Parser.mount (Parser.swift,
// 0.8.0–1.2.2): comma-separated directives, each a known key with a
// value (readonly/ro without); the type bind|virtiofs|tmpfs|volume; size
// and mode only for tmpfs (size is Measurement.parse); a volume source
// must be a volume name; a tmpfs has no source. That a bind source exists
// and is a directory is checked when the command runs.
var mountFormat = formatOf("mount", "Services/ContainerAPIService/Client/Parser.swift#mount", func(m string) *Failure {
	parts := SplitOmittingEmpty(m, ",")
	if len(parts) == 0 {
		return &Failure{"invalidArgument", "invalid mount format: " + m}
	}
	dirs := map[string]string{}
	for _, part := range parts {
		kv := swiftSplitOn(part, '=', 2)
		key := kv[0]
		switch key {
		case "type", "size", "mode":
		case "source", "src":
			key = "source"
		case "destination", "dst", "target":
			key = "destination"
		case "readonly", "ro":
			dirs["ro"] = ""
			continue
		default:
			return &Failure{"invalidArgument", "unknown directive " + key + " when parsing mount " + m}
		}
		if len(kv) != 2 {
			return &Failure{"invalidArgument", "invalid directive format missing value " + part + " in " + m}
		}
		dirs[key] = kv[1]
	}
	typ := dirs["type"]
	switch typ {
	case "bind", "virtiofs", "tmpfs", "volume", "":
	default:
		return &Failure{"invalidArgument", "unsupported mount type " + typ}
	}
	for _, k := range []string{"size", "mode"} {
		if _, ok := dirs[k]; ok && typ != "tmpfs" {
			return &Failure{"invalidArgument", "unsupported option " + k + " for " + typ + " mount"}
		}
	}
	if s, ok := dirs["size"]; ok {
		mib, err := MemoryMiB(s)
		if err != nil {
			return &Failure{Msg: err.Error()}
		}
		if mib > math.MaxInt64>>20 {
			return &Failure{"invalidArgument", "overflow encountered when parsing memory string: " + s}
		}
	}
	if src, ok := dirs["source"]; ok {
		switch typ {
		case "volume":
			if !ValidVolumeName(src) {
				return &Failure{"invalidArgument", "invalid volume name '" + src + "': must match " + VolumeNamePattern}
			}
		case "tmpfs":
			return &Failure{"invalidArgument", "cannot specify source for tmpfs mount"}
		case "bind", "virtiofs":
		default:
			return &Failure{"invalidArgument", "unknown mount type " + typ}
		}
	}
	return nil
})

// swiftSplitOn is String.split(separator:maxSplits:) dropping empty pieces.
func swiftSplitOn(s string, sep byte, maxSplits int) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] != sep {
			continue
		}
		if i > start {
			out = append(out, s[start:i])
		}
		start = i + 1
		if len(out) == maxSplits {
			break
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	if out == nil {
		out = []string{""}
	}
	return out
}

// publishRE is Parser.publishPort's pattern (Parser.swift, 0.8.0–1.2.2):
// [host-ip:]host-port:container-port[/protocol], an IPv6 host in [].
var publishRE = regexp.MustCompile(`^(?:(?:\[(?P<ipv6>[^\]]*)\]|(?P<ipv4>[^:].*)):)?(?P<hostPort>[^:].*):(?P<containerPort>[^:/]*)(?:/(?P<proto>.*))?$`)

// Publish is one `-p` value.
type Publish struct {
	HostIP        string
	HostPort      uint16
	ContainerPort uint16
	Count         uint16
	Proto         string
}

// ParsePublish is Parser.publishPort: the protocol tcp or udp (any case),
// an IPv4 or bracketed IPv6 host address, ports or equal-length ranges
// of ports above 1.
func ParsePublish(text string) (Publish, *Failure) {
	m := publishRE.FindStringSubmatch(text)
	if m == nil {
		return Publish{}, &Failure{"invalidArgument", "invalid publish value: " + text}
	}
	group := func(n string) string { return m[publishRE.SubexpIndex(n)] }
	p := Publish{HostIP: "0.0.0.0", Proto: strings.ToLower(group("proto"))}
	if p.Proto == "" {
		p.Proto = "tcp"
	}
	if p.Proto != "tcp" && p.Proto != "udp" {
		return Publish{}, &Failure{"invalidArgument", "invalid publish protocol: " + p.Proto}
	}
	if v6 := group("ipv6"); v6 != "" {
		ip := net.ParseIP(v6)
		if ip == nil || ip.To4() != nil || strings.Contains(v6, ".") {
			return Publish{}, &Failure{"invalidArgument", "invalid publish IPv6 address: " + text}
		}
		p.HostIP = v6
	} else if v4 := group("ipv4"); v4 != "" {
		ip := net.ParseIP(v4)
		if ip == nil || ip.To4() == nil || strings.Contains(v4, ":") {
			return Publish{}, &Failure{"invalidArgument", "invalid publish IPv4 address: " + text}
		}
		p.HostIP = v4
	}
	portRange := func(s, what string) (uint16, uint16, *Failure) {
		bad := &Failure{"invalidArgument", "invalid publish " + what + " port: " + s}
		parts := SplitOmittingEmpty(s, "-")
		if len(parts) < 1 || len(parts) > 2 {
			return 0, 0, bad
		}
		var n [2]uint16
		for i, part := range parts {
			ok, _ := swiftInt(16, false)(part)
			if !ok {
				return 0, 0, bad
			}
			x, _ := strconv.ParseUint(strings.TrimPrefix(part, "+"), 10, 16)
			n[i] = uint16(x)
		}
		if len(parts) == 1 {
			n[1] = n[0]
		}
		if n[0] <= 1 || n[0] > n[1] {
			return 0, 0, &Failure{"invalidArgument", "invalid publish " + what + " port range: " + s}
		}
		return n[0], n[1], nil
	}
	hs, he, f := portRange(group("hostPort"), "host")
	if f != nil {
		return Publish{}, f
	}
	cs, ce, f := portRange(group("containerPort"), "container")
	if f != nil {
		return Publish{}, f
	}
	if he-hs != ce-cs {
		return Publish{}, &Failure{"invalidArgument", "publish host and container port counts are not equal: " + group("hostPort") + ":" + group("containerPort")}
	}
	p.HostPort, p.ContainerPort, p.Count = hs, cs, he-hs+1
	return p, nil
}

var publishFormat = formatOf("publish", "Services/ContainerAPIService/Client/Parser.swift#publishPort", func(s string) *Failure {
	_, f := ParsePublish(s)
	return f
})

// Image references (containerization's Reference.parse, which `build -t`
// checks every tag with): at most 255 characters; not a bare 64-hex
// identifier; an optional domain (the part before the first '/', when it
// starts with "localhost" or holds '.' or ':'; a lone word starting with
// "localhost" is all domain); a path of lowercase alphanumeric runs
// joined by single '.', '_', "__", '-' or '/'; an optional tag (a word
// character, then up to 127 word characters, '.' or '-') and digest; the
// name (domain/path) at most 127 characters.
var (
	refDomainRE  = regexp.MustCompile(`^(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?$`)
	refPathTagRE = regexp.MustCompile(`^(?P<path>(?:[a-z0-9]+(?:[._]|__|-|/)?)*[a-z0-9]+)(?::(?P<tag>[\pL\pN\pM_][\pL\pN\pM_.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-fA-F]{64}))?$`)
	refHexRE     = regexp.MustCompile(`^[a-f0-9]{64}$`)
)

// ValidReference reports whether Reference.parse takes s.
func ValidReference(s string) bool {
	if len([]rune(s)) > 255 || refHexRE.MatchString(s) {
		return false
	}
	domain, rest := "", s
	if first, after, ok := strings.Cut(s, "/"); ok && first != "" && after != "" {
		if strings.HasPrefix(first, "localhost") || strings.ContainsAny(first, ".:") {
			domain, rest = first, after
		}
	} else if !ok && strings.HasPrefix(s, "localhost") {
		domain, rest = s, ""
	}
	if domain != "" && !refDomainRE.MatchString(domain) {
		return false
	}
	m := refPathTagRE.FindStringSubmatch(rest)
	if m == nil {
		return false
	}
	name := m[refPathTagRE.SubexpIndex("path")]
	if domain != "" {
		name = domain + "/" + name
	}
	return len([]rune(name)) <= 127
}
