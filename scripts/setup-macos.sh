#!/usr/bin/env bash
# macOS set-up for Apple's container CLI (`make setup` runs it on macOS):
#   1. checks that `container` is installed and new enough,
#   2. starts its system service non-interactively (installing the default kernel),
#   3. builds the default sandbox image mcp-dev from Containerfile.mcp-dev unless present,
#   4. builds bin/sandbox-mcp with `make build`, which embeds the in-VM agents
#      (sandbox-ctl for linux/arm64 and linux/amd64), and shows where doctor finds them.
# Safe to re-run: each step is skipped when already done.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
GO="${GO:-go}"
IMAGE="${SANDBOX_MCP_IMAGE:-mcp-dev}"
min_version=0.8.0
recommended=1.2.1

log() { echo "setup-macos: $*" >&2; }

if ! command -v container >/dev/null; then
  log "Apple's container CLI is not installed."
  log "Install it from https://github.com/apple/container/releases (signed .pkg) or with \`brew install container\`, then re-run."
  exit 1
fi

version_line="$(container --version)"
version="$(sed -E 's/.*version ([0-9]+\.[0-9]+(\.[0-9]+)?).*/\1/' <<<"$version_line")"
older() { # older A B: A < B
  [[ "$1" != "$2" && "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" == "$1" ]]
}
if older "$version" "$min_version"; then
  log "container $version is too old: sandbox-mcp needs $min_version or newer (\`brew upgrade container\`)."
  exit 1
fi
if older "$version" "$recommended"; then
  log "container $version works; $recommended or newer is recommended (live snapshots, socket mounts)."
fi
log "container $version"

if ! container system status >/dev/null 2>&1; then
  log "starting the container system service"
  container system start --enable-kernel-install
fi

if container image inspect "$IMAGE" >/dev/null 2>&1; then
  log "image $IMAGE present"
else
  log "building image $IMAGE from Containerfile.mcp-dev (a few minutes the first time)"
  container build -t "$IMAGE" -f Containerfile.mcp-dev .
fi

# make build, not a bare go build: the server must carry the agents it copies into
# each VM (without them, port forwards take one exec per connection and children
# have no control socket).
"${MAKE:-make}" --no-print-directory build GO="$GO"
log "built bin/sandbox-mcp"
doctor="$(bin/sandbox-mcp doctor --runtime container 2>&1 || true)"
grep '^agent:' <<<"$doctor" >&2 || true
if grep -q '^agent: .*NONE' <<<"$doctor" || ! grep -q '^agent: .*linux/arm64: ok' <<<"$doctor"; then
  log "bin/sandbox-mcp has no agent for linux/arm64 VMs (see above)."
  exit 1
fi
echo
echo "Register the server with Claude Code:"
echo "  claude mcp add --scope user sandbox -- $repo/bin/sandbox-mcp serve"
