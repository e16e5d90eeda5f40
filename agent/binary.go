package agent

// GoArch maps `uname -m` to a Go architecture; "" for one without a
// sandbox-ctl build. Package ctlbin finds the binary for it.
func GoArch(machine string) string {
	switch machine {
	case "x86_64", "amd64":
		return "amd64"
	case "aarch64", "arm64":
		return "arm64"
	}
	return ""
}
