// Package enginetest selects the real container engines an integration test
// runs against, so one suite covers podman, Docker Engine and Apple's
// container CLI, the last either through its stand-in (on Linux) or for
// real (on a Mac).
//
// SANDBOX_MCP_TEST_RUNTIMES lists them, comma-separated (for example
// "podman,docker,container"):
//
//   - "podman", "docker": the engine's CLI on PATH.
//   - "container": Apple's CLI as emulated by the stand-in in
//     internal/applestandin (1.5.0 behaviour, on podman); built by the
//     tests, run on podman.
//   - "container@0.9.0" (any version): the stand-in pinned to an older
//     release's JSON and error texts.
//   - "container@real": Apple's own container CLI, the `container` on PATH,
//     on a Mac (Apple silicon, `container system start` done). Nothing is
//     built and podman is not used; the image is the one `make setup`
//     builds there from Containerfile.mcp-dev (mcp-dev, or
//     SANDBOX_MCP_TEST_IMAGE). `make test-mac` runs the suites so.
//
// Tests that look at the stand-in's or podman's insides (the stand-in's
// argv log or its simulated system stop, podman's storage, the host's
// /proc) skip on the real CLI and say why (Target.SkipOnReal); the few
// checks only a Mac can make run only there (RealContainerTarget).
//
// When the variable is unset, engine tests skip and say so; the README's
// test command and CI always set it.
package enginetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/apple"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/docker"
)

// EnvRuntimes names the variable listing the engines to test.
const EnvRuntimes = "SANDBOX_MCP_TEST_RUNTIMES"

// EnvAllSuites, when set, has docker and the stand-in run every suite
// beside podman, not only DialectSuites.
const EnvAllSuites = "SANDBOX_MCP_TEST_ALL_SUITES"

// RealContainer is the entry of SANDBOX_MCP_TEST_RUNTIMES that names
// Apple's own container CLI rather than the stand-in.
const RealContainer = "container@real"

// Target is one engine under test.
type Target struct {
	// Name names the target in test names: "podman", "docker",
	// "container", "container-0.9.0" or "container-real".
	Name string
	// Runtime is the --runtime value: "podman", "docker" or "container".
	Runtime string
	// Image is the sandbox image to boot (must have sh, base64, python3).
	Image string
	// Env is added to the environment of a sandbox-mcp server started for
	// this target (the stand-in's directory first on PATH, its settings).
	Env []string
	// StandIn is set for Apple's CLI as the stand-in emulates it on podman.
	StandIn bool
	// RealContainer is set for Apple's own container CLI (a Mac): each
	// sandbox is a VM, and there is no podman or host /proc behind it.
	RealContainer bool
	// New returns a driver for the engine.
	New func() sandbox.Runtime
}

// SkipOnReal skips t when tg is Apple's real container CLI, saying why:
// for tests that look at what only the stand-in or podman has (the
// stand-in's argv log and simulated system stop, podman's storage, the
// host's /proc seeing a sandbox's processes).
func (tg Target) SkipOnReal(t testing.TB, why string) {
	t.Helper()
	if tg.RealContainer {
		t.Skipf("not on Apple's real container CLI: %s", why)
	}
}

// Small returns tg booting SmallImage, for a suite that needs nothing of
// mcp-dev's toolbox and copies whole root filesystems (snapshots on the
// stand-in export and rebuild all of it: 1.6 GB of mcp-dev took 80 s a
// copy on an idle 2-core machine, the busybox image a second). Apple's
// real CLI and Kubernetes keep their image: neither has SmallImage.
func (tg Target) Small() Target { return tg.booting(SmallImage) }

// Slim returns tg booting SlimImage, for a suite that needs python3 and
// Debian's coreutils but not the rest of mcp-dev's toolbox, and copies
// whole root filesystems. Apple's real CLI and Kubernetes keep their image.
func (tg Target) Slim() Target { return tg.booting(SlimImage) }

// booting is tg booting img, one of the images scripts/build-images.sh
// builds for podman and docker (and so the stand-in).
func (tg Target) booting(img string) Target {
	if !tg.RealContainer && tg.Runtime != Kubernetes {
		tg.Image = img
	}
	return tg
}

// entry is one parsed entry of SANDBOX_MCP_TEST_RUNTIMES.
type entry struct {
	runtime string // "podman", "docker", "container" or "kubernetes"
	version string // the stand-in's version pin ("" for its newest)
	real    bool   // Apple's own CLI (container@real)
	node    bool   // Kubernetes on a real node (kubernetes@node)
	crd     bool   // Kubernetes with agent-sandbox making the pods (kubernetes@crd)
}

// parseRuntimes parses a SANDBOX_MCP_TEST_RUNTIMES value; blank entries
// are ignored.
func parseRuntimes(list string) ([]entry, error) {
	var out []entry
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
		case name == "podman" || name == "docker" || name == Kubernetes:
			out = append(out, entry{runtime: name})
		case name == RealContainer:
			out = append(out, entry{runtime: "container", real: true})
		case name == KubernetesNode:
			out = append(out, entry{runtime: Kubernetes, node: true})
		case name == KubernetesCRD:
			out = append(out, entry{runtime: Kubernetes, crd: true})
		case name == "container":
			out = append(out, entry{runtime: "container"})
		case strings.HasPrefix(name, "container@") && validVersion(strings.TrimPrefix(name, "container@")):
			out = append(out, entry{runtime: "container", version: strings.TrimPrefix(name, "container@")})
		default:
			return nil, fmt.Errorf("%s: unknown runtime %q (want podman, docker, container, container@<version> for the stand-in, %s, %s, %s, or %s)",
				EnvRuntimes, name, RealContainer, Kubernetes, KubernetesNode, KubernetesCRD)
		}
	}
	return out, nil
}

// validVersion accepts a release number such as 0.9.0 or 1.2.
func validVersion(v string) bool {
	parts := strings.Split(v, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

// Targets returns the engines to test, or skips t when none are configured.
func Targets(t testing.TB) []Target {
	t.Helper()
	return targets(t, "")
}

// RunFirstAndKubernetes runs fn as a subtest on the first target listed
// and on each Kubernetes target listed after it. It is for suites that
// run on one engine to spare the machine: podman, docker and Apple's CLI
// share their driver's calls, so one of them speaks for the others, but
// the Kubernetes runtime shares none of them and has to run the suite
// itself. Targets' filters hold: a Kubernetes target that does not run
// the suite (KubeSuites, NodeSuites, CRDSuites) is not run.
func RunFirstAndKubernetes(t *testing.T, fn func(t *testing.T, tg Target)) {
	t.Helper()
	tgs := Targets(t)
	run := tgs[:1]
	for _, tg := range tgs[1:] {
		if tg.Runtime == Kubernetes {
			run = append(run, tg)
		}
	}
	for _, tg := range run {
		t.Run(tg.Name, func(t *testing.T) { fn(t, tg) })
	}
}

// TargetsOf returns the listed targets of one runtime ("container",
// "docker", ...), for a test about that runtime alone: a suite podman
// runs is still run there, since podman does not run this one.
func TargetsOf(t testing.TB, runtime string) []Target {
	t.Helper()
	return targets(t, runtime)
}

// targets is Targets, or with only set, TargetsOf.
func targets(t testing.TB, only string) []Target {
	t.Helper()
	list := os.Getenv(EnvRuntimes)
	if list == "" {
		t.Skipf("engine tests skipped: set %s=podman (or podman,docker) to run them; `make test` does", EnvRuntimes)
	}
	entries, err := parseRuntimes(list)
	if err != nil {
		t.Fatal(err)
	}
	current := false // the stand-in at its newest release is listed
	engine := false  // podman or docker is listed
	podman := false  // podman is listed
	node := false    // the real node is listed
	for _, e := range entries {
		current = current || e.runtime == "container" && !e.real && e.version == ""
		engine = engine || e.runtime == "podman" || e.runtime == "docker"
		podman = podman || e.runtime == "podman"
		node = node || e.node
	}
	kubeAll := os.Getenv(EnvKubeAll) != ""
	// Docker and the stand-in run only DialectSuites beside podman, unless
	// the test is about one runtime (only) or every suite is asked for.
	dialectsOnly := podman && only == "" && os.Getenv(EnvAllSuites) == ""
	top, _, _ := strings.Cut(t.Name(), "/")
	var out []Target
	for _, e := range entries {
		if only != "" && e.runtime != only {
			continue
		}
		switch {
		case e.runtime == "container" && !e.real && engine && LoadSuites[top]:
			t.Logf("%s: not run by %s on the stand-in: a load suite (enginetest.LoadSuites), run on the real engines listed", entryName(e), top)
		case e.runtime == "container" && e.version != "" && current && (!DialectSuites[top] || NewestReleaseSuites[top]):
			t.Logf("container@%s: not run by %s: the stand-in's newest release runs it; an older release runs the suites in enginetest.DialectSuites but for NewestReleaseSuites, and TestEveryAppleRelease's common life", e.version, top)
		case (e.runtime == "docker" || e.runtime == "container" && !e.real && e.version == "") && dialectsOnly && !DialectSuites[top]:
			t.Logf("%s: not run by %s: podman runs it, through the same engine calls (docker and the stand-in run the suites in enginetest.DialectSuites beside podman; %s=1 runs them all)", entryName(e), top, EnvAllSuites)
		case e.node && !NodeSuites[top] && !kubeAll:
			t.Logf("%s: not run by %s: not among the suites the real node runs (enginetest.NodeSuites)", KubernetesNode, top)
		case e.node:
			out = append(out, kubeNodeTarget(t))
		case e.crd && !CRDSuites[top] && !kubeAll:
			t.Logf("%s: not run by %s: not among the suites agent-sandbox's pods run (enginetest.CRDSuites)", KubernetesCRD, top)
		case e.crd:
			out = append(out, kubeCRDTarget(t))
		case e.runtime == Kubernetes && !KubeSuites[top] && !kubeAll:
			t.Logf("kubernetes: not run by %s: not among the suites the Kubernetes runtime runs yet (enginetest.KubeSuites)", top)
		case e.runtime == Kubernetes && node && NodeSuites[top] && !kubeAll:
			t.Logf("kubernetes: not run by %s on the kubelet stand-in: the real node (%s) runs it", top, KubernetesNode)
		case e.runtime == Kubernetes:
			out = append(out, kubeTarget(t))
		case e.runtime != "container":
			f := docker.Flavor(e.runtime)
			out = append(out, Target{Name: e.runtime, Runtime: e.runtime, Image: image(), New: func() sandbox.Runtime {
				return docker.New(docker.Options{Flavor: f})
			}})
		case e.real:
			out = append(out, realTarget(t))
		default:
			out = append(out, standInTarget(t, e.version))
		}
	}
	if len(out) == 0 {
		t.Skipf("no engine listed in %s=%s runs %s (see the lines above)", EnvRuntimes, list, top)
	}
	return out
}

// DialectSuites are the engine suites whose engine calls differ between
// the dialects of one CLI: between releases of the stand-in, and between
// docker and podman. They create, adopt, inspect, stop and remove
// sandboxes, their networks and addresses, volumes and their limits,
// copies, images and snapshots, ports, stats and children. The others
// (commands, jobs and files in the shell, hostile programs, the state
// file) make the same calls whatever the dialect: one `exec -i sh` a
// shell and a few execs beside it.
//
// So a pinned older release of the stand-in ("container@0.9.0") runs only
// these when the newest release is listed too, and docker and the
// stand-in run only these when podman is listed too: the others would run
// a second time through the same kind of call, and a CI machine's two
// cores do not carry that (the end-to-end suite, in DialectSuites, still
// runs every tool through each). Listed alone, an older release, docker or
// the stand-in runs every suite; SANDBOX_MCP_TEST_ALL_SUITES has them run
// every suite beside podman; a test about one runtime (TargetsOf) runs on
// it whatever podman does.
var DialectSuites = map[string]bool{
	// package sandbox
	"TestManagerOnEngine": true, "TestLifecycleOnEngine": true, "TestNetworkOnEngine": true,
	"TestTransferOnEngine": true, "TestEgressOnEngine": true, "TestDiskLimitOnEngine": true,
	"TestIdleReaping": true, "TestPruneOnEngine": true, "TestForeignContainerOnEngine": true,
	"TestForkBombOnEngine": true, "TestEarlyAgentHoldsNoBoot": true,
	"TestSnapshotCostsTheHostNoMoreThanTheQuota": true, "TestExactRestoreAndCloneOnEngine": true,
	// package sandbox/docker: what the two dialects do apart (a squashed
	// save, sized volumes)
	"TestSaveImageSquashesDeepImages": true, "TestSizedVolumeOfAFreshName": true, "TestSweepDisksOnEngine": true,
	"TestUnformattedWorkspaceIsFormatted": true, "TestStartAfterAKilledMount": true,
	// package agent
	"TestAgentInContainer": true,
	// package e2e
	"TestEndToEnd": true, "TestSnapshots": true, "TestTransfer": true, "TestPorts": true,
	"TestStats": true, "TestChildren": true, "TestDoctorAndPruneCLI": true,
	"TestEgressEndToEnd": true, "TestBuildImage": true,
}

// NewestReleaseSuites are the end-to-end suites among DialectSuites that
// an older release of the stand-in leaves to the newest one when both are
// listed. What an older release's dialect changes is the driver's calls,
// which package sandbox's DialectSuites and TestEveryAppleRelease check
// on it, and TestEndToEnd runs every tool through; the tool layer above
// the driver is the same on every release.
var NewestReleaseSuites = map[string]bool{
	"TestSnapshots": true, "TestTransfer": true, "TestPorts": true, "TestStats": true, "TestChildren": true,
	"TestDoctorAndPruneCLI": true, "TestEgressEndToEnd": true, "TestBuildImage": true,
}

// LoadSuites are the engine suites that put the server under load or run
// hostile programs (output floods, commands that outlive their timeout, a
// hundred job calls at once, thousands of jobs, a pool full of long
// commands, 150 MB messages, `cat /dev/zero`) to check the server's own answers. Their engine calls are
// those the other suites make, so on the stand-in they would load podman
// beneath it a second time, through a relay, and check nothing of the
// Apple dialect that the other suites do not: the stand-in leaves them to
// podman and docker when either is listed (docker, beside podman, to
// podman: they are not among DialectSuites). Listed alone, and on Apple's
// real CLI, it runs them.
var LoadSuites = map[string]bool{
	// package sandbox
	"TestHostileCommandsOnEngine": true, "TestJobLogsUnderFourServersOnEngine": true, "TestJobsAtScaleOnEngine": true,
	"TestJobToolsAnswerWhileCommandsFillThePoolOnEngine": true,
	// package e2e
	"TestLargeMessages": true, "TestCatDevZeroIsBounded": true, "TestCommandsCannotLie": true,
}

// entryName is how SANDBOX_MCP_TEST_RUNTIMES spells e.
func entryName(e entry) string {
	switch {
	case e.real:
		return RealContainer
	case e.node:
		return KubernetesNode
	case e.crd:
		return KubernetesCRD
	case e.version != "":
		return e.runtime + "@" + e.version
	}
	return e.runtime
}

// StandInListed reports whether SANDBOX_MCP_TEST_RUNTIMES names the
// stand-in ("container" or "container@<version>"; not container@real),
// for tests of the stand-in itself.
func StandInListed() bool {
	entries, _ := parseRuntimes(os.Getenv(EnvRuntimes))
	for _, e := range entries {
		if e.runtime == "container" && !e.real {
			return true
		}
	}
	return false
}

// RealContainerTarget returns the target of Apple's real container CLI,
// or skips t unless SANDBOX_MCP_TEST_RUNTIMES lists container@real: for
// the checks only a Mac can make.
func RealContainerTarget(t testing.TB) Target {
	t.Helper()
	entries, err := parseRuntimes(os.Getenv(EnvRuntimes))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.real {
			return realTarget(t)
		}
	}
	t.Skipf("a check of Apple's real container CLI: set %s=%s on a Mac (`make test-mac` does)", EnvRuntimes, RealContainer)
	return Target{}
}

// realTarget is Apple's own container CLI, the one on PATH: nothing is
// built, and the servers the tests start find the same CLI on PATH.
func realTarget(t testing.TB) Target {
	t.Helper()
	bin, err := exec.LookPath("container")
	if err != nil {
		t.Fatalf("%s lists %s, but no container CLI is on PATH: install Apple's container "+
			"(https://github.com/apple/container/releases) and run `make setup`", EnvRuntimes, RealContainer)
	}
	return Target{Name: "container-real", Runtime: "container", Image: image(), RealContainer: true, New: func() sandbox.Runtime {
		return apple.New(apple.Options{Binary: bin})
	}}
}

// SmallImage is the busybox image scripts/build-images.sh builds beside
// mcp-dev, 2 MB, on podman and docker: for tests of what an engine does
// to an image's layers, which need no toolbox and, on mcp-dev, would copy
// 1.5 GB on a loaded machine.
const SmallImage = "sandbox-mcp-minimal"

// SlimImage is mcp-dev without its big packages (numpy, pandas, node, the
// C toolchain, docs), 0.3 GB: python3, coreutils, findutils and tar. A
// test image only, which `scripts/build-images.sh test` builds.
const SlimImage = "sandbox-mcp-slim"

func image() string {
	if img := os.Getenv("SANDBOX_MCP_TEST_IMAGE"); img != "" {
		return img
	}
	return "mcp-dev"
}

// Prefix returns a container-name prefix unique to this test run, and
// removes what was made under it when the test ends (see Sweep).
func Prefix(t testing.TB, rt sandbox.Runtime) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "smt" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		if left := Sweep(rt, prefix); len(left) > 0 {
			t.Errorf("containers removed at the test's end left processes running on the host:\n%s", strings.Join(left, "\n"))
		}
	})
	return prefix
}

// Sweep removes every container and workspace volume labelled with prefix,
// the network of its sandboxes and the images its snapshots and clones
// saved. It returns the host's processes that still run in the cgroup of
// a container whose removal succeeded (after a moment's wait), which a
// removal must not leave: nothing else would end them.
func Sweep(rt sandbox.Runtime, prefix string) []string {
	// Generous: a container full of processes takes a while to remove on
	// a loaded machine, and one left behind loads every later test.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs, _ := rt.List(ctx, map[string]string{sandbox.LabelOwner: prefix})
	vols := map[string]bool{}
	var removed []string
	for _, c := range cs {
		if err := rt.Remove(ctx, c.Name); err == nil || errors.Is(err, sandbox.ErrNotFound) {
			removed = append(removed, c.ID)
		}
		vols[sandbox.ContainerName(prefix+"-ws", c.Labels[sandbox.LabelName])] = true
	}
	// And those whose container is gone or never came: a workspace can be
	// an image on a loop device, which would outlive the test.
	if vl, ok := rt.(sandbox.VolumeLister); ok {
		names, _ := vl.VolumeNames(ctx)
		for _, n := range names {
			if strings.HasPrefix(n, prefix+"-ws-") || strings.HasPrefix(n, prefix+"-ws_spare_") {
				vols[n] = true
			}
		}
	}
	// Only once the containers are gone, and without force, as the
	// product does (sandbox.RemoveVolume).
	for vol := range vols {
		_ = sandbox.RemoveVolume(ctx, rt, vol, time.Minute)
	}
	il, listable := rt.(sandbox.ImageLister)
	saver, removable := rt.(sandbox.ImageSaver)
	if listable && removable {
		imgs, _ := il.ListImages(ctx)
		for _, im := range imgs {
			// <prefix>-snapshot:<name>, <prefix>-clone:<target>-<time>,
			// under whatever registry the engine names local images by.
			if strings.HasPrefix(im.Ref[strings.LastIndex(im.Ref, "/")+1:], strings.ToLower(prefix)+"-") {
				_ = saver.RemoveImage(ctx, im.Ref)
			}
		}
	}
	// And the untagged ones (a clone's, a snapshot's whose tag went),
	// which would pile up in the engine's store run after run.
	if p, ok := rt.(sandbox.ImagePruner); ok {
		_, _ = p.PruneImages(ctx, map[string]string{sandbox.LabelOwner: prefix}, false)
	}
	// The stand-in keeps Apple's images in podman's store, and untags
	// (where Apple deletes) one a container still used when it was
	// deleted: Apple's dialect has no prune, so podman's own is asked.
	if _, standIn := rt.(*apple.Dialect); standIn {
		pod := docker.New(docker.Options{Flavor: docker.Podman})
		_, _ = pod.PruneImages(ctx, map[string]string{sandbox.LabelOwner: prefix}, false)
	}
	if nw, ok := rt.(sandbox.Networker); ok {
		_, _ = nw.RemoveNetwork(ctx, sandbox.NetworkNameFor(prefix), false)
		fams, _ := nw.Networks(ctx, sandbox.LabelOwner, prefix)
		for _, n := range fams {
			if strings.HasPrefix(n, prefix+"-fam-") {
				_, _ = nw.RemoveNetwork(ctx, n, false)
			}
		}
	}
	return ProcessesLeft(removed, 10*time.Second)
}

// ProcessesLeft lists, as "PID (container, cwd) argv", the host's
// processes in a cgroup named after one of the containers ids (full
// 64-digit IDs; podman's libpod-ID and its conmon's libpod-conmon-ID,
// docker's docker-ID), once none is left or wait passed.
// Other IDs are not looked for: an engine that names containers
// otherwise, or runs them on another host, has none found.
func ProcessesLeft(ids []string, wait time.Duration) []string {
	var full []string
	for _, id := range ids {
		if len(id) == 64 && strings.Trim(id, "0123456789abcdef") == "" {
			full = append(full, id)
		}
	}
	if len(full) == 0 {
		return nil
	}
	deadline := time.Now().Add(wait)
	for {
		var left []string
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, dir := range dirs {
			cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
			if err != nil {
				continue
			}
			for _, id := range full {
				if strings.Contains(string(cg), id) {
					argv, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
					cwd, _ := os.Readlink(filepath.Join(dir, "cwd"))
					left = append(left, fmt.Sprintf("%s (container %.12s, cwd %s) %s", filepath.Base(dir), id, cwd, strings.ReplaceAll(strings.TrimSpace(string(argv)), "\x00", " ")))
				}
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(200 * time.Millisecond)
	}
}
