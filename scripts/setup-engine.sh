#!/usr/bin/env bash
# Installs a container engine for sandbox-mcp on Debian 12 and makes plain `podman`
# work on kernels where podman's defaults fail (see shared/reference/engine-linux.md).
# Idempotent; run as root. Usage: setup-engine.sh [--no-docker]
set -euo pipefail

usage() { echo "usage: $0 [--no-docker]" >&2; }

with_docker=1
for arg in "$@"; do
  case "$arg" in
    --no-docker) with_docker=0 ;;
    -h|--help) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done

if [[ "$(id -u)" -ne 0 ]]; then
  echo "setup-engine: must run as root (apt-get, /etc/containers)" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive

# --- packages --------------------------------------------------------------
# runc is named explicitly so apt satisfies podman's "crun | runc" with runc.
packages=(podman runc debootstrap busybox-static catatonit)
if [[ "$with_docker" -eq 1 ]]; then
  packages+=(docker.io)
fi

is_installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

missing=()
for pkg in "${packages[@]}"; do
  if is_installed "$pkg"; then
    echo "setup-engine: $pkg already installed"
  else
    missing+=("$pkg")
  fi
done

if [[ "${#missing[@]}" -gt 0 ]]; then
  echo "setup-engine: apt-get update"
  apt-get update -q >/dev/null
  echo "setup-engine: apt-get install -y ${missing[*]}"
  apt-get install -y -q "${missing[@]}" >/dev/null
fi

for cmd in podman runc debootstrap busybox; do
  if ! command -v "$cmd" >/dev/null; then
    echo "setup-engine: $cmd not on PATH after install" >&2
    exit 1
  fi
done
if [[ "$with_docker" -eq 1 ]] && ! command -v dockerd >/dev/null; then
  echo "setup-engine: dockerd not on PATH after install" >&2
  exit 1
fi

# --- podman smoke test with the system config ---------------------------------
# The MCP client runs plain `podman` without CONTAINERS_CONF, so test exactly that.
smoke_image=localhost/sandbox-mcp-minimal:latest
smoke_tmp_image=""
workdir="$(mktemp -d)"
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  if [[ -n "$smoke_tmp_image" ]]; then
    env -u CONTAINERS_CONF podman rmi -f "$smoke_tmp_image" >/dev/null 2>&1 || true
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT

if ! env -u CONTAINERS_CONF podman image exists "$smoke_image"; then
  # A throwaway one-file image: enough to start a container without any registry.
  smoke_tmp_image=localhost/sandbox-mcp-smoke:latest
  mkdir -p "$workdir/rootfs/bin"
  cp "$(command -v busybox)" "$workdir/rootfs/bin/busybox"
  tar -C "$workdir/rootfs" --numeric-owner --owner=0 --group=0 -c . \
    | env -u CONTAINERS_CONF podman import -q - "$smoke_tmp_image" >/dev/null
  smoke_image="$smoke_tmp_image"
fi

smoke() {
  env -u CONTAINERS_CONF podman run --rm "$smoke_image" /bin/busybox true >"$workdir/smoke.log" 2>&1
}

if smoke; then
  echo "setup-engine: podman works with the system config; nothing to change"
  exit 0
fi

# Only fix the failures we know; anything else needs a human.
if ! grep -qiE 'rlimit|hybrid mode|crun' "$workdir/smoke.log"; then
  echo "setup-engine: podman smoke test failed for an unknown reason:" >&2
  cat "$workdir/smoke.log" >&2
  exit 1
fi
echo "setup-engine: podman fails with the system config: $(tail -n 1 "$workdir/smoke.log")"

settings='# Installed by sandbox-mcp scripts/setup-engine.sh:
# crun fails on hybrid cgroups and the default nofile ulimit cannot be set here.
[containers]
default_ulimits = []

[engine]
runtime = "runc"
'

# Prefer a drop-in (podman 4.x reads /etc/containers/containers.conf.d/*.conf after
# containers.conf); keep it only if podman then really works.
dropin_dir=/etc/containers/containers.conf.d
dropin="$dropin_dir/50-sandbox-mcp.conf"
mkdir -p "$dropin_dir"
printf '%s' "$settings" >"$dropin"
echo "setup-engine: wrote $dropin"
if smoke; then
  echo "setup-engine: podman works now (drop-in honoured)"
  exit 0
fi

rm -f "$dropin"
echo "setup-engine: drop-in not honoured; removed $dropin"
main_conf=/etc/containers/containers.conf
if [[ -e "$main_conf" ]]; then
  backup="$main_conf.bak.$(date +%Y%m%d%H%M%S)"
  cp -p "$main_conf" "$backup"
  echo "setup-engine: backed up $main_conf to $backup"
fi
printf '%s' "$settings" >"$main_conf"
echo "setup-engine: wrote $main_conf"
if smoke; then
  echo "setup-engine: podman works now"
  exit 0
fi
echo "setup-engine: podman still fails:" >&2
cat "$workdir/smoke.log" >&2
exit 1
