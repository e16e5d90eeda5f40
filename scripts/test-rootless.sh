#!/usr/bin/env bash
# Proves that a normal user can set up and serve with rootless podman, as the README
# says: as root, creates the user sandbox-mcp-ci once (with passwordless sudo, as a
# developer's own account would have sudo), then as that user
#   1. runs scripts/setup-engine.sh, which uses sudo only for what needs root;
#   2. builds the images into the user's own podman store (scripts/build-images.sh);
#   3. runs `sandbox-mcp doctor`, which must pass;
#   4. runs the end-to-end MCP client tests against rootless podman.
# The binaries are built here, as the caller, and handed to the user.
#
#   scripts/test-rootless.sh [-- E2E_TEST_ARGS...]     (run as root)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
user=sandbox-mcp-ci
run_args=(-test.run 'TestEndToEnd/podman/newest|TestMCPGoClient|TestNoEngineAuto|TestDefaultImageToolbox/podman|TestStats/podman' -test.v)
if [[ "${1:-}" == "--" ]]; then
  shift
  run_args=("$@")
fi

log() { echo "test-rootless: $*" >&2; }

if [[ "$(id -u)" -ne 0 ]]; then
  echo "test-rootless: run as root (it creates the test user)" >&2
  exit 2
fi

# --- the user ------------------------------------------------------------------
if ! command -v sudo >/dev/null; then
  log "installing sudo"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q sudo >/dev/null
fi
if ! id "$user" >/dev/null 2>&1; then
  log "creating user $user"
  useradd --create-home --shell /bin/bash "$user"
fi
echo "$user ALL=(ALL) NOPASSWD: ALL" >/etc/sudoers.d/sandbox-mcp-ci
chmod 0440 /etc/sudoers.d/sandbox-mcp-ci
home="$(getent passwd "$user" | cut -d: -f6)"
uid="$(id -u "$user")"

# --- what the user runs --------------------------------------------------------
work="$home/ci"
rm -rf "$work"
mkdir -p "$work/bin"
log "building the server and the end-to-end tests"
(cd "$repo" && go build -buildvcs=auto -o "$work/bin/sandbox-mcp" ./cmd/sandbox-mcp)
(cd "$repo" && CGO_ENABLED=0 GOOS=linux go build -trimpath -o "$work/bin/sandbox-ctl-linux-$(go env GOARCH)" ./cmd/sandbox-ctl)
(cd "$repo" && go test -c -o "$work/bin/e2e.test" ./e2e)
# The scripts, as a checkout the user owns.
tar -C "$repo" -c scripts Containerfile.mcp-dev | tar -C "$work" -x
chown -R "$user:" "$work"

as_user() {
  # A login-like environment: its own runtime dir (as logind would make), no root caches.
  local rundir="/tmp/sandbox-mcp-ci-run-$uid"
  install -d -m 0700 -o "$user" "$rundir"
  runuser -u "$user" -- env -i HOME="$home" USER="$user" LOGNAME="$user" \
    PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    XDG_RUNTIME_DIR="$rundir" "$@"
}

t0=$SECONDS
log "as $user: scripts/setup-engine.sh"
as_user bash -c "cd '$work' && scripts/setup-engine.sh"
# After a root set-up (CI's), the user's own store has no images yet: doctor must say so
# and point at a step that works for this user, not back at a root-only one.
if ! as_user podman image exists mcp-dev; then
  if out="$(as_user "$work/bin/sandbox-mcp" doctor --runtime podman 2>&1)"; then
    echo "test-rootless: doctor passed without the user's image:" >&2
    echo "$out" >&2
    exit 1
  fi
  if ! grep -q "podman keeps images per user" <<<"$out"; then
    echo "test-rootless: doctor's hint for a missing image does not lead anywhere:" >&2
    echo "$out" >&2
    exit 1
  fi
  log "as $user: doctor before the images: $(grep '^image:' <<<"$out")"
fi
log "as $user: scripts/build-images.sh --engine podman all"
as_user bash -c "cd '$work' && scripts/build-images.sh --engine podman all"
log "as $user: set-up took $((SECONDS - t0)) s"

log "as $user: sandbox-mcp doctor"
as_user "$work/bin/sandbox-mcp" doctor --runtime podman

log "as $user: end-to-end tests on rootless podman"
as_user env SANDBOX_MCP_TEST_RUNTIMES=podman SANDBOX_MCP_TEST_BINARY="$work/bin/sandbox-mcp" \
  bash -c "cd '$work' && bin/e2e.test ${run_args[*]@Q}"
log "ok: a normal user set up, checked and served sandboxes with rootless podman"
