#!/usr/bin/env bash
# The engine and end-to-end suites against Apple's own `container` CLI, on a Mac
# (`make test-mac`, or `scripts/test.sh --real-container`). On Linux, `make test` runs
# the same suites through the stand-in in internal/applestandin.
#
#   scripts/test-mac.sh [-- GO_TEST_ARGS...]
#
#   -- ARGS   passed to `go test` after the script's own flags (a later -parallel or
#             -timeout wins); package arguments replace the default packages, e.g.
#             scripts/test-mac.sh -- -run TestManagerOnEngine -v ./sandbox/
#
# Needs: Apple silicon; Apple's container CLI, no older than sandbox/apple's
# MinVersion, with `container system start` done; the image mcp-dev (or
# $SANDBOX_MCP_TEST_IMAGE); Go with cgo for -race (Xcode's command line tools).
# `make setup` does all but Go. It checks those, then runs `go vet`, the checks only a
# Mac makes (TestMacOnly*, verbose, so their timings show), and `go test -race` on
# ./sandbox/... ./e2e/ ./internal/... with SANDBOX_MCP_TEST_RUNTIMES=container@real,
# and prints each package's time and a summary. Exits with go test's status.
#
# Environment: TEST_MAC_PARALLEL (default 4) is go test's -parallel: every sandbox
# is a VM, and the tests of a package would otherwise boot one per CPU at once.
#
# Written for macOS's own bash 3.2 and BSD tools: no mapfile, declare -A,
# ${array[-1]}, EPOCHREALTIME or ${array[@]} of an empty array under set -u; no
# GNU-only flags (sort -V, rm --one-file-system, grep \s, timeout); no /proc.
set -eu
set -o pipefail

usage() {
  echo "usage: $0 [-- go test args...]" >&2
}

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"

GO="${GO:-go}"
IMAGE="${SANDBOX_MCP_TEST_IMAGE:-mcp-dev}"
PARALLEL="${TEST_MAC_PARALLEL:-4}"
RUNTIMES=container@real

# go_args holds the caller's go test args; n_go_args counts them (bash 3.2 calls
# "${go_args[@]}" of an empty array unbound under set -u).
go_args=()
n_go_args=0
while [ $# -gt 0 ]; do
  case "$1" in
    --)
      shift
      if [ $# -gt 0 ]; then go_args=("$@"); n_go_args=$#; fi
      break
      ;;
    -h|--help) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done

log() { echo "test-mac.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# --- timing: whole seconds from bash's SECONDS ------------------------------------
timings=""
phase_name=""
phase_t0=0
phase() { # phase NAME: ends the current phase (if any) and starts NAME
  phase_done
  phase_name="$1"
  phase_t0=$SECONDS
  log "== $phase_name"
}
phase_done() {
  if [ -n "$phase_name" ]; then
    local secs=$((SECONDS - phase_t0))
    timings="${timings}$(printf 'test-mac.sh:   %-24s %6d s' "$phase_name" "$secs")
"
    log "== $phase_name: $secs s"
    phase_name=""
  fi
}

go_out=""
mac_out=""
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  phase_done
  [ -z "$go_out" ] || rm -f "$go_out"
  [ -z "$mac_out" ] || rm -f "$mac_out"
  log "timings:"
  printf '%s' "$timings" >&2
  printf 'test-mac.sh:   %-24s %6d s (exit status %d)\n' total "$SECONDS" "$status" >&2
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# bounded SECS CMD...: runs CMD, ending it after SECS seconds (macOS has no
# timeout(1)); its exit status, or 143 when it was ended.
bounded() {
  local secs="$1" pid waited=0 status=0
  shift
  "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$waited" -ge "$secs" ]; then
      kill "$pid" 2>/dev/null || true
      break
    fi
    sleep 1
    waited=$((waited + 1))
  done
  wait "$pid" || status=$?
  return "$status"
}

# older A B: version A (x.y or x.y.z) is older than B.
older() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    na = split(a, x, "."); nb = split(b, y, ".")
    for (i = 1; i <= 3; i++) {
      if (x[i] + 0 < y[i] + 0) exit 0
      if (x[i] + 0 > y[i] + 0) exit 1
    }
    exit 1
  }'
}

# --- preflight -----------------------------------------------------------------------
phase "preflight"
[ "$(uname -s)" = Darwin ] ||
  die "Apple's container CLI runs only on macOS; on Linux, \`make test\` runs these suites through the stand-in"
[ "$(uname -m)" = arm64 ] ||
  die "Apple's container CLI needs Apple silicon (uname -m says $(uname -m); a terminal under Rosetta says x86_64 too)"

command -v container >/dev/null ||
  die "Apple's container CLI is not installed: get it from https://github.com/apple/container/releases (or \`brew install container\`), then \`make setup\`"

# The oldest release the product supports, from the dialect itself.
min_version="$(sed -n -E 's/^[[:space:]]*MinVersion[[:space:]]*=[[:space:]]*Version[{]([0-9]+), ([0-9]+), ([0-9]+)[}].*/\1.\2.\3/p' sandbox/apple/version.go)"
[ -n "$min_version" ] || die "no MinVersion found in sandbox/apple/version.go"
version_line="$(bounded 60 container --version)" || die "\`container --version\` failed"
version="$(printf '%s\n' "$version_line" | sed -n -E 's/.*version ([0-9]+\.[0-9]+(\.[0-9]+)?).*/\1/p')"
[ -n "$version" ] || die "cannot read a version in \`container --version\`: $version_line"
if older "$version" "$min_version"; then
  die "container $version is older than $min_version, the oldest release sandbox-mcp supports: \`brew upgrade container\` or a newer .pkg"
fi
log "container $version (sandbox-mcp needs $min_version or newer)"

st=0
bounded 60 container system status >/dev/null 2>&1 || st=$?
case "$st" in
  0) ;;
  143) die "\`container system status\` did not answer in 60 s: the service may be stuck (\`container system stop\`, then \`container system start\`)" ;;
  *) die "the container system service is not running: \`container system start --enable-kernel-install\` (\`make setup\` does it)" ;;
esac
if ! bounded 120 container image inspect "$IMAGE" >/dev/null 2>&1; then
  die "image $IMAGE is missing: \`make setup\` builds it from Containerfile.mcp-dev"
fi
log "image $IMAGE present"

[ "$("$GO" env CGO_ENABLED)" = 1 ] ||
  die "go test -race needs cgo and a C compiler: \`xcode-select --install\`"

export SANDBOX_MCP_TEST_RUNTIMES="$RUNTIMES"
log "SANDBOX_MCP_TEST_RUNTIMES=$SANDBOX_MCP_TEST_RUNTIMES"

# --- packages among the go test args ---------------------------------------------------
# Words that are neither flags nor the value of a flag that takes one (-run TestX);
# everything after -args goes to the test binary.
takes_value() {
  case "$1" in
    run|skip|bench|benchtime|count|cpu|timeout|parallel|shuffle|fuzz|fuzztime|\
    fuzzminimizetime|list|covermode|coverpkg|coverprofile|cpuprofile|memprofile|\
    memprofilerate|blockprofile|blockprofilerate|mutexprofile|mutexprofilefraction|\
    trace|outputdir|o|exec|p|tags|ldflags|gcflags|asmflags|mod|modfile|overlay|\
    pkgdir|toolexec|vet|C) return 0 ;;
  esac
  return 1
}
pkgs=()
n_pkgs=0
i=0
while [ "$i" -lt "$n_go_args" ]; do
  a="${go_args[$i]}"
  i=$((i + 1))
  case "$a" in
    -args|--args) break ;;
    -*=*) ;;
    -*)
      f="${a#-}"; f="${f#-}"; f="${f#test.}"
      if takes_value "$f"; then i=$((i + 1)); fi
      ;;
    *) pkgs[n_pkgs]="$a"; n_pkgs=$((n_pkgs + 1)) ;;
  esac
done
default_pkgs=0
if [ "$n_pkgs" -eq 0 ]; then
  pkgs=(./sandbox/... ./e2e/ ./internal/...)
  n_pkgs=3
  default_pkgs=1
fi
# -count=1: a cached pass says nothing about the container CLI installed now.
test_cmd=("$GO" test -race -count=1 -timeout 60m -parallel "$PARALLEL")

phase "go vet"
"$GO" vet "${pkgs[@]}"

go_out="$(mktemp "${TMPDIR:-/tmp}/sandbox-mcp-gotest.XXXXXX")"
mac_out="$(mktemp "${TMPDIR:-/tmp}/sandbox-mcp-gotest-mac.XXXXXX")"
status=0

# --- the checks only a Mac makes, verbose --------------------------------------------
mac_only=0
if [ "$default_pkgs" -eq 1 ] && [ "$n_go_args" -eq 0 ]; then
  mac_only=1
  phase "mac-only checks"
  set +e
  "${test_cmd[@]}" -v -run '^TestMacOnly' ./sandbox/apple/ 2>&1 | tee "$mac_out"
  mac_status=${PIPESTATUS[0]}
  set -e
  [ "$mac_status" -eq 0 ] || status=$mac_status
  # The main run leaves them out: they ran just now.
  test_cmd=("${test_cmd[@]}" -skip '^TestMacOnly')
fi

# engine_report: what the engine was doing, for a run that failed.
engine_report() {
  log "container system status:"
  bounded 30 container system status >&2 || log "container system status failed or did not answer"
  log "containers left (container list --all):"
  bounded 30 container list --all >&2 || log "container list did not answer"
  log "container processes:"
  ps -axo pid=,ppid=,etime=,stat=,command= 2>/dev/null |
    awk '{ n = $5; sub(/.*\//, "", n) } n ~ /^container/ || n ~ /Virtualization/' | cut -c1-300 >&2 || true
}

# package_times: each package's go test time, slowest first, from go test's
# "ok"/"FAIL" lines.
package_times() {
  log "go test time per package (slowest first):"
  awk '($1 == "ok" || $1 == "FAIL") && $3 ~ /^[0-9.]+s$/ { t = $3; sub(/s$/, "", t); printf "test-mac.sh:   %8.1f s  %-4s %s\n", t, $1, $2 }' "$1" |
    sort -k2,2nr >&2 || true
}

phase "go test"
# The default packages before the caller's args: anything after -args goes to the tests.
if [ "$default_pkgs" -eq 1 ]; then
  test_cmd=("${test_cmd[@]}" "${pkgs[@]}")
fi
if [ "$n_go_args" -gt 0 ]; then
  test_cmd=("${test_cmd[@]}" "${go_args[@]}")
fi
log "${test_cmd[*]}"
set +e
"${test_cmd[@]}" 2>&1 | tee "$go_out"
test_status=${PIPESTATUS[0]}
set -e
phase_done
package_times "$go_out"
[ "$test_status" -eq 0 ] || status=$test_status
if [ "$mac_only" -eq 1 ]; then
  log "the checks only a Mac makes (results and what they logged):"
  grep -E '^[[:space:]]*(--- (PASS|FAIL|SKIP): TestMacOnly|maconly_test\.go:[0-9]+:)' "$mac_out" | sed 's/^/test-mac.sh:   /' >&2 || true
fi
if [ "$status" -ne 0 ]; then
  log "tests failed (status $status); the failed tests:"
  cat "$mac_out" "$go_out" | grep -E '^([[:space:]]*--- FAIL|FAIL|panic:)' >&2 || true
  engine_report
else
  log "all passed on container $version with image $IMAGE"
fi
exit "$status"
