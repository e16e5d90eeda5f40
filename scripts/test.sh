#!/usr/bin/env bash
# The project's test command (`make test` runs it): unit tests plus the engine suites
# against real podman, a private Docker Engine, and Apple's container CLI as emulated
# on podman by the stand-in in internal/applestandin (1.5.0 behaviour, all but the load
# suites, enginetest.LoadSuites; 0.9.0 for the suites whose engine calls differ by release:
# enginetest.OlderReleaseSuites), and the Kubernetes runtime against a real kube-apiserver
# whose pods run on podman through the kubelet stand-in in internal/kubetest (the suites
# in enginetest.KubeSuites).
# Run it as the user who set up and serves: as a normal user podman is rootless, the
# docker suite uses a docker daemon that answers for that user or is skipped with a
# line saying why, and the few tests that need root (loop-device volumes, mounts)
# skip and say so; as root (CI) everything runs, with a private dockerd.
#
#   scripts/test.sh [--setup] [--no-docker] [-- GO_TEST_ARGS...]
#   scripts/test.sh --real-container [-- GO_TEST_ARGS...]
#
#   --real-container  on a Mac: the engine and e2e suites against Apple's own container
#                     CLI instead (scripts/test-mac.sh, `make test-mac`); this script's
#                     lines up to here run on macOS's bash 3.2 for that
#   --setup      run scripts/setup-engine.sh even if podman is installed, and build the
#                Kubernetes control plane the kube tests run against
#                (scripts/build-kube-apiserver.sh) (CI=true does both); otherwise
#                setup-engine runs only when podman (or dockerd, if needed) is missing
#   --no-docker  test podman and the container stand-in only (no private dockerd)
#   -- ARGS      passed to `go test`; package arguments replace ./..., e.g.
#                scripts/test.sh -- -run TestManagerOnEngine -v ./sandbox/
#
# Environment: SANDBOX_MCP_TEST_RUNTIMES, if set, is used as is (e.g. "podman"); a
# private dockerd is then started only if it lists docker and no docker daemon answers.
# Runs `go vet` and `go test -race -timeout 84m` and exits with go test's status
# (go test took 20 to 30 minutes on one 2-core machine and more than 50 on a slower
# one of the same kind, its slowest packages, sandbox and e2e, running side by side;
# CI allows 90 for the whole run, and its steps before go test take about 2).
# go test's output goes to stdout; this script's own messages and timings to stderr.
set -euo pipefail

usage() {
  echo "usage: $0 [--setup] [--no-docker] [-- go test args...]" >&2
  echo "       $0 --real-container [-- go test args...]   (on a Mac: scripts/test-mac.sh)" >&2
}

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

GO="${GO:-go}"
# Where the official archive unpacks Go, which a new user's PATH may lack.
if ! command -v "$GO" >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go; fi
if ! command -v "$GO" >/dev/null 2>&1; then
  echo "test.sh: Go is needed (go.mod asks for go 1.26 or newer): install it from https://go.dev/dl and put its bin directory on PATH" >&2
  exit 1
fi
# The tests run `go build` themselves: the same Go comes first on PATH.
PATH="$(dirname "$(command -v "$GO")"):$PATH"
export PATH
do_setup=0
[[ "${CI:-}" == true ]] && do_setup=1
no_docker=0
go_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --setup) do_setup=1; shift ;;
    --no-docker) no_docker=1; shift ;;
    --real-container)
      shift
      if [[ $# -gt 0 ]]; then exec "$repo/scripts/test-mac.sh" "$@"; fi
      exec "$repo/scripts/test-mac.sh"
      ;;
    --) shift; go_args=("$@"); break ;;
    -h|--help) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done

log() { echo "test.sh: $*" >&2; }

# --- timing ------------------------------------------------------------------
t_total="$EPOCHREALTIME"
phase_names=()
phase_secs=()
phase_name=""
phase_t0=""
seconds_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
phase() { # phase NAME: ends the current phase (if any) and starts NAME
  phase_done
  phase_name="$1"
  phase_t0="$EPOCHREALTIME"
  log "== $phase_name"
}
phase_done() {
  if [[ -n "$phase_name" ]]; then
    phase_names+=("$phase_name")
    phase_secs+=("$(seconds_since "$phase_t0")")
    log "== $phase_name: ${phase_secs[-1]} s"
    phase_name=""
  fi
}

# --- cleanup: private dockerd and temp dir, also on failure and interrupt -------
tmp=""
docker_dir=""
go_out=""
server_image=""
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  phase_done
  if [[ -n "$docker_dir" ]]; then
    phase "stop dockerd"
    "$repo/scripts/dockerd.sh" stop "$docker_dir" || log "stopping dockerd failed"
    # dockerd unmounts its overlays on shutdown; undo any it left before removing.
    local m
    while read -r m; do
      umount -l "$m" 2>/dev/null || true
    done < <(awk -v d="$docker_dir/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r)
  fi
  if [[ -n "$tmp" ]]; then
    rm -rf --one-file-system "$tmp" || log "could not remove $tmp"
  fi
  [[ -z "$go_out" ]] || rm -f "$go_out"
  if [[ -n "$server_image" ]]; then # the test removes it; a run that did not reach it too
    local id
    id="$(podman image inspect --format '{{.Id}}' "$server_image" 2>/dev/null || true)"
    [[ -z "$id" ]] || rm -f "/var/tmp/kubetest-images/$id.tar"
    podman rmi -f "$server_image" >/dev/null 2>&1 || true
  fi
  phase_done
  local i
  log "timings:"
  for i in "${!phase_names[@]}"; do
    printf 'test.sh:   %-22s %8s s\n' "${phase_names[$i]}" "${phase_secs[$i]}" >&2
  done
  printf 'test.sh:   %-22s %8s s (exit status %d)\n' "total" "$(seconds_since "$t_total")" "$status" >&2
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- which engines -----------------------------------------------------------
if [[ -n "${SANDBOX_MCP_TEST_RUNTIMES:-}" ]]; then
  runtimes="$SANDBOX_MCP_TEST_RUNTIMES"
  caller_runtimes=1
elif [[ "$no_docker" -eq 1 ]]; then
  runtimes=podman,container,container@0.9.0,kubernetes,kubernetes@crd
  caller_runtimes=0
else
  runtimes=podman,docker,container,container@0.9.0,kubernetes,kubernetes@crd
  caller_runtimes=0
fi
# As root, the Kubernetes runtime also runs on a real node (a kubelet on
# containerd), for the suites enginetest.NodeSuites lists.
if [[ "$caller_runtimes" -eq 0 && "$(id -u)" -eq 0 ]]; then
  runtimes+=,kubernetes@node
fi
has_runtime() { [[ ",${runtimes// /}," == *",$1,"* ]]; }
# As a normal user the docker tests use a docker daemon that already answers (the
# user's rootless dockerd through DOCKER_HOST, or the system's for a member of the
# docker group); the private dockerd these tests otherwise start needs root.
docker_daemon=""
if has_runtime docker && [[ "$(id -u)" -ne 0 ]]; then
  if command -v docker >/dev/null && docker version >/dev/null 2>&1; then
    docker_daemon=user
    log "docker: using the daemon that answers for $(id -un) (${DOCKER_HOST:-the default socket})"
  else
    runtimes="$(echo ",${runtimes// /}," | sed 's/,docker,/,/; s/^,//; s/,$//')"
    log "docker: SKIPPED: no docker daemon answers for $(id -un), and the private dockerd these tests start needs root." \
      "Run make test as root for the docker suite (CI does), or point DOCKER_HOST at a daemon you can use (e.g. a rootless dockerd)."
  fi
fi
# The stand-in for Apple's container CLI ("container", "container@0.9.0") runs on
# podman, and stands in for a VM (an address of its own, stats of its own) only on
# podman run as root: rootless podman gives a container neither on every host.
if [[ "$(id -u)" -ne 0 && "$caller_runtimes" -eq 0 ]] && [[ ",${runtimes// /}," == *",container"* ]]; then
  runtimes="$(echo ",${runtimes// /}," | sed 's/,container[^,]*//g; s/^,//; s/,$//')"
  log "container: SKIPPED: the stand-in for Apple's container CLI needs podman as root (rootless podman gives a" \
    "container no address of its own, and no stats on cgroup v1). Run make test as root for it (CI does)."
fi
needs_podman() { has_runtime podman || [[ ",${runtimes// /}," == *",container"* ]]; }

# --- engine set-up (slow; only when needed) ------------------------------------
setup_args=()
# A daemon that already answers for this user needs no docker.io from us.
has_runtime docker && [[ -z "$docker_daemon" ]] && setup_args+=(--with-docker)
if [[ "$do_setup" -eq 0 ]]; then
  if ! command -v podman >/dev/null; then
    log "podman not found: running scripts/setup-engine.sh"
    do_setup=1
  elif has_runtime docker && [[ -z "$docker_daemon" ]] && ! command -v dockerd >/dev/null; then
    log "dockerd not found: running scripts/setup-engine.sh"
    do_setup=1
  fi
fi
if [[ "$do_setup" -eq 1 ]]; then
  phase "setup-engine"
  "$repo/scripts/setup-engine.sh" "${setup_args[@]}"
fi

export CONTAINERS_CONF="$repo/scripts/containers.conf"

if [[ "$($GO env CGO_ENABLED)" != 1 ]]; then
  log "go test -race needs cgo and a C compiler (apt-get install gcc)"
  exit 1
fi

# --- images --------------------------------------------------------------------
if needs_podman; then
  phase "podman images"
  # Builds only what is missing or from an older recipe, and checks each image.
  "$repo/scripts/build-images.sh" --engine podman test
fi

# --- Kubernetes control plane (the kube runtime's tests) --------------------------
# etcd, the control plane's programs and the CSI sidecars built from the Go module
# proxy, once per machine (about 16 minutes on 2 cores). Without --setup or CI a missing one is not built: those tests
# then skip and say why; CI may not skip them.
if [[ "$do_setup" -eq 1 ]]; then
  phase "kube control plane"
  "$repo/scripts/build-kube-apiserver.sh" >/dev/null
fi

# --- private Docker Engine -------------------------------------------------------
if has_runtime docker; then
  if [[ -z "$docker_daemon" ]] && { [[ "$caller_runtimes" -eq 0 ]] || ! docker version >/dev/null 2>&1; }; then
    phase "start dockerd"
    tmp="$(mktemp -d /tmp/smt.XXXXXX)" # short: socket paths are limited to 108 bytes
    docker_dir="$tmp/d"
    out="$("$repo/scripts/dockerd.sh" start "$docker_dir")"
    eval "$out" # export DOCKER_HOST=unix://…
    export DOCKER_HOST
    log "DOCKER_HOST=$DOCKER_HOST"
  fi
  phase "docker images"
  "$repo/scripts/build-images.sh" --engine docker test
fi

# The real node loads its images from archives of podman's (kubetest.SavedImage):
# saved here, before the tests, since saving a large image holds podman's store.
if has_runtime kubernetes@node; then
  mkdir -p -m 0700 /var/tmp/kubetest-images
  # The server's image for sandbox/kube's TestServerInClusterOnARealNode, built
  # here from this tree (scripts/build-server-image.sh) for the same reason; the
  # test removes it and its archive.
  server_image="localhost/sandbox-mcp-server:kubetest-$$"
  phase "server image for the real node"
  "$repo/scripts/build-server-image.sh" "$server_image" >/dev/null
  export SANDBOX_MCP_TEST_SERVER_IMAGE="$server_image"
  for img in localhost/sandbox-mcp-minimal:latest localhost/mcp-dev:latest "$server_image"; do
    id="$(podman image inspect --format '{{.Id}}' "$img" 2>/dev/null || true)"
    if [[ -n "$id" && ! -f "/var/tmp/kubetest-images/$id.tar" ]]; then
      log "saving $img for the real node"
      podman save -q --format docker-archive -o "/var/tmp/kubetest-images/$id.tar.$$.tmp" "$img" &&
        mv "/var/tmp/kubetest-images/$id.tar.$$.tmp" "/var/tmp/kubetest-images/$id.tar"
    fi
  done
fi
export SANDBOX_MCP_TEST_RUNTIMES="$runtimes"
log "SANDBOX_MCP_TEST_RUNTIMES=$SANDBOX_MCP_TEST_RUNTIMES"

# --- go vet and go test ----------------------------------------------------------
# Package arguments among the go test args: words that are neither flags nor the
# values of flags that take one (e.g. "-run TestX"). Everything after -args goes to
# the test binary.
value_flags=" run skip bench benchtime count cpu timeout parallel shuffle fuzz fuzztime
  fuzzminimizetime list covermode coverpkg coverprofile cpuprofile memprofile
  memprofilerate blockprofile blockprofilerate mutexprofile mutexprofilefraction trace
  outputdir o exec p tags ldflags gcflags asmflags mod modfile overlay pkgdir toolexec
  vet C "
value_flags="${value_flags//$'\n'/ }"
pkgs=()
i=0
while [[ $i -lt ${#go_args[@]} ]]; do
  a="${go_args[$i]}"
  i=$((i + 1))
  case "$a" in
    -args|--args) break ;;
    -*=*) ;;
    -*)
      f="${a#-}"; f="${f#-}"; f="${f#test.}"
      [[ "$value_flags" == *" $f "* ]] && i=$((i + 1))
      ;;
    *) pkgs+=("$a") ;;
  esac
done
# -json, turned back into go test's plain output by internal/testreport,
# which also lists the slowest tests at the end; not when the caller asks
# for verbose, JSON, benchmark or list output, which go test then prints
# as asked.
report_json=1
for a in "${go_args[@]}"; do
  case "$a" in
    -v|-v=*|--v|-test.v*|-json|--json|-bench*|--bench*|-test.bench*|-list*|--list*|-test.list*) report_json=0 ;;
  esac
done
test_cmd=("$GO" test -race -timeout 84m)
if [[ "$report_json" -eq 1 ]]; then test_cmd+=(-json); fi
if [[ ${#pkgs[@]} -eq 0 ]]; then
  pkgs=(./...)
  # The two long packages first, each with a process of its own from the
  # start, and the others one after another in a third: with go test's
  # default of one process a core, on two cores sandbox waited for every
  # package before it (13 minutes) while e2e held the other.
  test_cmd+=(-p 3 ./sandbox ./e2e ./...)
fi
test_cmd+=("${go_args[@]}")

phase "go vet"
"$GO" vet "${pkgs[@]}"

# engine_report: what the engines were doing, for a run that failed: every
# engine process with its age, state and the kernel function it waits in (a
# podman stuck on a lock shows as a futex wait), then the containers left.
engine_report() {
  log "engine processes (pid ppid age-s state wchan args):"
  ps -eo pid=,ppid=,etimes=,stat=,wchan:24=,args= 2>/dev/null |
    awk '$6 ~ /(^|\/)(podman|conmon|runc|crun|catatonit|dockerd|containerd|containerd-shim[^ ]*|netavark|aardvark-dns|slirp4netns|fuse-overlayfs|container)$/' | cut -c1-400 >&2 || true
  if needs_podman; then
    log "podman ps --all (bounded to 30 s):"
    timeout 30 podman ps --all --format '{{.Names}} {{.Status}}' >&2 || log "podman ps did not answer"
  fi
  # A full disk fails writes in sandboxes and on the host alike.
  log "disk space:"
  timeout 10 df -h / /tmp /var/lib/containers 2>/dev/null | awk '!seen[$0]++ { print "test.sh:   " $0 }' >&2 || true
}

# package_times: each package's go test time, slowest first, from go test's
# "ok"/"FAIL" lines.
package_times() {
  log "go test time per package (slowest first):"
  awk '($1 == "ok" || $1 == "FAIL") && $3 ~ /^[0-9.]+s$/ { t = $3; sub(/s$/, "", t); printf "test.sh:   %8.1f s  %-4s %s\n", t, $1, $2 }' "$1" |
    sort -k2,2nr >&2 || true
}

phase "go test"
log "${test_cmd[*]}"
go_out="$(mktemp /tmp/sandbox-mcp-gotest.XXXXXX)"
report_dir="$(mktemp -d /tmp/sandbox-mcp-testreport.XXXXXX)"
report=(cat)
if [[ "$report_json" -eq 1 ]]; then
  if "$GO" build -o "$report_dir/testreport" ./internal/testreport; then
    report=("$report_dir/testreport")
  else
    log "could not build internal/testreport: go test's output is its JSON"
  fi
fi
set +e
"${test_cmd[@]}" 2>&1 | "${report[@]}" 2>"$report_dir/slowest" | tee "$go_out"
statuses=("${PIPESTATUS[@]}")
set -e
status=${statuses[0]}
phase_done
if [[ "${statuses[1]}" -ne 0 ]]; then
  log "internal/testreport failed (status ${statuses[1]}); what it wrote to stderr:"
  [[ "$status" -eq 0 ]] && status=1
fi
package_times "$go_out"
cat "$report_dir/slowest" >&2
rm -rf "$report_dir"
if [[ "$status" -ne 0 ]]; then
  log "go test failed (status $status); the failed tests:"
  grep -E '^(\s*--- FAIL|FAIL|panic:)' "$go_out" >&2 || true
  engine_report
fi
exit "$status"
