// Command sbom writes an SPDX 2.3 document (JSON) of the Go modules built
// into the given binaries: the server of each platform and the agents it
// carries. scripts/release.sh runs it; with -check, it checks that a
// document lists the given modules at their versions
// (scripts/test-release.sh).
//
//	go run ./scripts/sbom -version v1.2.3 -out sbom.spdx.json BINARY...
//	go run ./scripts/sbom -check sbom.spdx.json MODULE@VERSION...
package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

type doc struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      creationInfo   `json:"creationInfo"`
	Packages          []pkg          `json:"packages"`
	Relationships     []relationship `json:"relationships"`
}

type creationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type pkg struct {
	Name             string   `json:"name"`
	SPDXID           string   `json:"SPDXID"`
	VersionInfo      string   `json:"versionInfo"`
	DownloadLocation string   `json:"downloadLocation"`
	FilesAnalyzed    bool     `json:"filesAnalyzed"`
	LicenseConcluded string   `json:"licenseConcluded"`
	LicenseDeclared  string   `json:"licenseDeclared"`
	CopyrightText    string   `json:"copyrightText"`
	ExternalRefs     []extRef `json:"externalRefs,omitempty"`
}

type extRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type relationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

var versionRE = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

func main() {
	version := flag.String("version", "", "the release's version (v1.2.3)")
	out := flag.String("out", "", "file to write (stdout when empty)")
	check := flag.String("check", "", "check this document for the modules given as arguments")
	flag.Parse()
	if *check != "" {
		if err := checkDoc(*check, flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "sbom:", err)
			os.Exit(1)
		}
		return
	}
	b, err := build(*version, flag.Args(), created())
	if err == nil {
		if *out == "" {
			_, err = os.Stdout.Write(b)
		} else {
			err = writeFile(*out, b)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
}

// created is the document's time: SOURCE_DATE_EPOCH when set (the
// commit's time, so a release built twice gives the same bytes), else now.
func created() time.Time {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Unix(n, 0).UTC()
		}
	}
	return time.Now().UTC()
}

// build makes the document for the binaries.
func build(version string, binaries []string, at time.Time) ([]byte, error) {
	if !versionRE.MatchString(version) {
		return nil, fmt.Errorf("version %q is not of the form v1.2.3", version)
	}
	if len(binaries) == 0 {
		return nil, errors.New("no binaries given")
	}
	type mod struct{ path, version string }
	mods := map[mod]bool{}
	var mainPath string
	var toolchains []string
	h := sha256.New()
	for _, bin := range binaries {
		bi, err := buildinfo.ReadFile(bin)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", bin, err)
		}
		if mainPath == "" {
			mainPath = bi.Main.Path
		}
		if !slices.Contains(toolchains, bi.GoVersion) {
			toolchains = append(toolchains, bi.GoVersion)
		}
		for _, d := range bi.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			mods[mod{d.Path, d.Version}] = true
		}
		fmt.Fprintf(h, "%s %s\n", bin, bi.String())
	}
	if mainPath == "" {
		return nil, errors.New("the binaries name no main module")
	}
	d := doc{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              "sandbox-mcp-" + version,
		DocumentNamespace: "https://" + mainPath + "/spdx/" + version + "-" + hex.EncodeToString(h.Sum(nil))[:16],
		CreationInfo:      creationInfo{Created: at.Format(time.RFC3339), Creators: []string{"Tool: sandbox-mcp-sbom"}},
	}
	mainID := "SPDXRef-Package-main"
	d.Packages = append(d.Packages, pkg{Name: mainPath, SPDXID: mainID, VersionInfo: version,
		DownloadLocation: "https://" + mainPath, LicenseConcluded: "MIT", LicenseDeclared: "MIT", CopyrightText: "NOASSERTION",
		ExternalRefs: []extRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + mainPath + "@" + version}}})
	d.Relationships = append(d.Relationships, relationship{"SPDXRef-DOCUMENT", "DESCRIBES", mainID})
	keys := make([]mod, 0, len(mods))
	for m := range mods {
		keys = append(keys, m)
	}
	slices.SortFunc(keys, func(a, b mod) int { return strings.Compare(a.path+" "+a.version, b.path+" "+b.version) })
	for i, m := range keys {
		id := fmt.Sprintf("SPDXRef-Package-go-%d", i+1)
		d.Packages = append(d.Packages, pkg{Name: m.path, SPDXID: id, VersionInfo: m.version,
			DownloadLocation: "https://proxy.golang.org/" + strings.ToLower(m.path) + "/@v/" + m.version + ".zip",
			LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION",
			ExternalRefs: []extRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + m.path + "@" + m.version}}})
		d.Relationships = append(d.Relationships, relationship{mainID, "DEPENDS_ON", id})
	}
	for i, tc := range toolchains {
		id := fmt.Sprintf("SPDXRef-Package-toolchain-%d", i+1)
		d.Packages = append(d.Packages, pkg{Name: "golang.org/toolchain", SPDXID: id, VersionInfo: tc,
			DownloadLocation: "https://go.dev/dl/", LicenseConcluded: "BSD-3-Clause", LicenseDeclared: "BSD-3-Clause", CopyrightText: "NOASSERTION",
			ExternalRefs: []extRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/stdlib@" + tc}}})
		d.Relationships = append(d.Relationships, relationship{id, "BUILD_DEPENDENCY_OF", mainID})
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// checkDoc checks that the document at path is SPDX 2.3 with the main
// package it describes depending on each module@version in want.
func checkDoc(path string, want []string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var d doc
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if d.SPDXVersion != "SPDX-2.3" || d.SPDXID != "SPDXRef-DOCUMENT" || len(d.Packages) == 0 {
		return fmt.Errorf("%s is not an SPDX 2.3 document of packages", path)
	}
	ids := map[string]string{}
	for _, p := range d.Packages {
		ids[p.Name+"@"+p.VersionInfo] = p.SPDXID
	}
	deps := map[string]bool{}
	for _, r := range d.Relationships {
		if r.Element == "SPDXRef-Package-main" && r.Type == "DEPENDS_ON" {
			deps[r.Related] = true
		}
	}
	for _, w := range want {
		id, ok := ids[w]
		if !ok || !deps[id] {
			return fmt.Errorf("%s does not list %s as a dependency", path, w)
		}
	}
	return nil
}

// writeFile writes b to path whole or not at all.
func writeFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
