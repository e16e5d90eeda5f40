#!/usr/bin/env bash
# Installs a container engine for sandbox-mcp on Debian 12 and makes plain `podman`
# work on kernels where podman's defaults fail (see shared/reference/engine-linux.md).
# Idempotent. Run it as the user who will serve: the steps that need root (apt-get,
# /etc/containers, the tun device for rootless networking) run through sudo, and the
# script says which before it runs them. As a normal user podman runs rootless and keeps
# its images in that user's store.
#
#   setup-engine.sh [--with-docker]
#
# --with-docker also installs Debian's Docker Engine (the tests use it; the server does
# not need it). --no-docker is accepted and is the default.
set -euo pipefail

usage() { echo "usage: $0 [--with-docker]" >&2; }

with_docker=0
for arg in "$@"; do
  case "$arg" in
    --with-docker) with_docker=1 ;;
    --no-docker) with_docker=0 ;;
    -h|--help) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done

me="$(id -un)"
if [[ "$(id -u)" -eq 0 ]]; then
  as_root() { "$@"; }
else
  if ! command -v sudo >/dev/null; then
    echo "setup-engine: installing packages needs root, and sudo is not installed." >&2
    echo "  Run this once as root (su -c '$0 $*'), then run make setup again as $me." >&2
    exit 1
  fi
  as_root() { sudo "$@"; }
  echo "setup-engine: running as $me; the steps that need root run with sudo (you may be asked for your password)"
fi

export DEBIAN_FRONTEND=noninteractive

# --- packages --------------------------------------------------------------
# runc is named explicitly so apt satisfies podman's "crun | runc" with runc.
# uidmap and slirp4netns make rootless podman work for a normal user.
# iptables: the Kubernetes tests' kubelet stand-in enforces NetworkPolicy
# inside its pods with it (netavark pulls it in too). containerd and the CNI
# plugins: their real node runs a kubelet on them (kubetest.StartNode).
packages=(podman runc debootstrap busybox-static catatonit uidmap slirp4netns iptables containerd containernetworking-plugins)
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
  echo "setup-engine: apt-get update (as root)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
  echo "setup-engine: apt-get install -y ${missing[*]} (as root)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
fi

for cmd in podman runc debootstrap busybox; do
  if ! command -v "$cmd" >/dev/null && ! [[ -x "/usr/sbin/$cmd" ]]; then
    echo "setup-engine: $cmd not on PATH after install" >&2
    exit 1
  fi
done
if [[ "$with_docker" -eq 1 ]] && ! command -v dockerd >/dev/null; then
  echo "setup-engine: dockerd not on PATH after install" >&2
  exit 1
fi

# --- rootless podman for a normal user -----------------------------------------
if [[ "$(id -u)" -ne 0 ]]; then
  if ! grep -q "^$me:" /etc/subuid || ! grep -q "^$me:" /etc/subgid; then
    echo "setup-engine: giving $me subordinate ids for rootless containers (as root: usermod --add-subuids/--add-subgids)"
    as_root usermod --add-subuids 100000-165535 --add-subgids 100000-165535 "$me"
  fi
  # Debian's udev makes /dev/net/tun usable by everyone; some VMs ship it 0600, which
  # breaks rootless networking (slirp4netns).
  if [[ -e /dev/net/tun && ! -w /dev/net/tun ]]; then
    echo "setup-engine: /dev/net/tun is not usable by $me; making it 0666 as Debian does (as root)"
    as_root chmod 0666 /dev/net/tun
  fi
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

# make_podman_work: plain `podman run` works with the system config, fixing the
# failures we know (crun on hybrid cgroups, the nofile ulimit); else it exits.
make_podman_work() {
  if smoke; then
    echo "setup-engine: podman works with the system config; nothing to change"
    return 0
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
  as_root mkdir -p "$dropin_dir"
  printf '%s' "$settings" | as_root tee "$dropin" >/dev/null
  echo "setup-engine: wrote $dropin (as root)"
  if smoke; then
    echo "setup-engine: podman works now (drop-in honoured)"
    return 0
  fi

  as_root rm -f "$dropin"
  echo "setup-engine: drop-in not honoured; removed $dropin"
  main_conf=/etc/containers/containers.conf
  if [[ -e "$main_conf" ]]; then
    backup="$main_conf.bak.$(date +%Y%m%d%H%M%S)"
    as_root cp -p "$main_conf" "$backup"
    echo "setup-engine: backed up $main_conf to $backup"
  fi
  printf '%s' "$settings" | as_root tee "$main_conf" >/dev/null
  echo "setup-engine: wrote $main_conf (as root)"
  if smoke; then
    echo "setup-engine: podman works now"
    return 0
  fi
  echo "setup-engine: podman still fails:" >&2
  cat "$workdir/smoke.log" >&2
  exit 1
}

# --- rootless storage: overlay, not vfs -----------------------------------------
# Podman 4.3 gives a new rootless user the vfs driver unless told otherwise: every
# container is then a full copy of its image, so a new sandbox's first command waits
# for about 800 MB to be copied, and each sandbox takes that much disk. Overlay works
# in a user namespace natively on Linux 5.13 and newer, and through fuse-overlayfs on
# older kernels. A user's store is switched only when it holds nothing but this
# project's base images (build-images.sh makes them again) and no storage.conf says
# otherwise; anything else is left alone, with the commands to switch it.
p_user() { env -u CONTAINERS_CONF podman "$@"; }

# ours_only: no container (podman's or buildah's), pod, volume, secret or network of
# the user's, and no image but the base images (no snapshot, no dangling image). A
# check that fails counts as "not only ours".
ours_only() {
  local out line q
  for q in "ps -aq --external" "pod ps -q" "volume ls -q" "secret ls -q"; do
    # shellcheck disable=SC2086 # the words of $q are the arguments
    out="$(p_user $q)" || return 1
    [[ -z "$out" ]] || return 1
  done
  out="$(p_user network ls --format '{{.Name}}')" || return 1
  ! grep -qvx podman <<<"$out" || return 1
  out="$(p_user images -a --format '{{.Repository}}:{{.Tag}}')" || return 1
  while IFS= read -r line; do
    case "$line" in
      localhost/sandbox-mcp-minimal:latest|localhost/mcp-dev:latest|localhost/sandbox-mcp-smoke:latest|"") ;;
      *) return 1 ;;
    esac
  done <<<"$out"
}

# overlay_works DIR [STORAGE-OPT]: a container runs on overlay in a throwaway store
# under DIR (on the filesystem of the user's store). Only --root and --runroot are
# the probe's own: nothing is reset, so the user's podman state is not touched.
overlay_works() {
  local probe run rc=0 opts=(--storage-driver overlay)
  probe="$(mktemp -d "$1/.sandbox-mcp-overlay-probe.XXXXXX")" || return 1
  run="$(mktemp -d /tmp/smo.XXXXXX)" || { rm -rf "$probe"; return 1; } # podman wants a short runroot
  [[ -n "${2:-}" ]] && opts+=(--storage-opt "$2")
  local p=(p_user --root "$probe/root" --runroot "$run" "${opts[@]}")
  mkdir -p "$probe/rootfs/bin"
  cp "$(command -v busybox)" "$probe/rootfs/bin/busybox"
  if ! tar -C "$probe/rootfs" --numeric-owner --owner=0 --group=0 -c . | "${p[@]}" import -q - localhost/overlay-probe:latest >/dev/null 2>"$probe/err" ||
     ! "${p[@]}" run --rm --network none localhost/overlay-probe:latest /bin/busybox true >/dev/null 2>>"$probe/err"; then
    rc=1
    overlay_err="$(tail -n 1 "$probe/err")"
  fi
  p_user unshare rm -rf "$probe" "$run" 2>/dev/null || rm -rf "$probe" "$run" 2>/dev/null || true
  return "$rc"
}

rootless_storage() {
  local driver conf graphroot mode="" native_err=""
  driver="$(p_user info --format '{{.Store.GraphDriverName}}' 2>/dev/null || true)"
  graphroot="$(p_user info --format '{{.Store.GraphRoot}}' 2>/dev/null || true)"
  conf="${XDG_CONFIG_HOME:-$HOME/.config}/containers/storage.conf"
  if [[ "$driver" == overlay ]]; then
    echo "setup-engine: rootless podman stores containers with overlay"
    return 0
  fi
  local slow="each sandbox is then a full copy of its image (slow first commands, GBs per sandbox)"
  local how="to switch: podman system reset (it deletes this user's containers, images and volumes), then put [storage] driver = \"overlay\" in $conf, then make setup again"
  if [[ -n "${CONTAINERS_STORAGE_CONF:-}" ]]; then
    echo "setup-engine: WARNING: podman uses ${driver:-?} with CONTAINERS_STORAGE_CONF=$CONTAINERS_STORAGE_CONF; $slow. Left as it is; set driver = \"overlay\" there." >&2
    return 0
  fi
  if [[ -e "$conf" ]] || grep -qsE '^[[:space:]]*(driver|rootless_storage_path)[[:space:]]*=' /etc/containers/storage.conf /usr/share/containers/storage.conf; then
    echo "setup-engine: WARNING: podman uses ${driver:-?} and a storage.conf ($conf or the system's) already configures storage; $slow. Left as it is; $how." >&2
    return 0
  fi
  if [[ -z "$graphroot" || ! -d "$(dirname "$graphroot")" ]]; then
    echo "setup-engine: WARNING: podman uses ${driver:-?} and did not name its store; $slow. Left as it is." >&2
    return 0
  fi
  overlay_err=""
  if overlay_works "$(dirname "$graphroot")"; then
    mode=native
  else
    native_err="$overlay_err"
    if ! command -v fuse-overlayfs >/dev/null; then
      echo "setup-engine: native overlay does not work here ($native_err); apt-get install -y fuse-overlayfs (as root)"
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q fuse-overlayfs >/dev/null || true
    fi
    if command -v fuse-overlayfs >/dev/null && overlay_works "$(dirname "$graphroot")" "overlay.mount_program=$(command -v fuse-overlayfs)"; then
      mode=fuse
    fi
  fi
  if [[ -z "$mode" ]]; then
    echo "setup-engine: WARNING: podman keeps ${driver:-vfs}: overlay works neither natively (${native_err:-?}) nor through fuse-overlayfs (${overlay_err:-?}); $slow" >&2
    return 0
  fi
  if ! ours_only; then
    echo "setup-engine: WARNING: podman uses ${driver:-vfs}, and this user's podman store holds containers, pods, volumes, secrets, networks or images (snapshots included) of its own, which switching to overlay would delete. Left as it is; $how$([[ $mode == fuse ]] && echo ", with [storage.options.overlay] mount_program = \"$(command -v fuse-overlayfs)\"")." >&2
    return 0
  fi
  echo "setup-engine: switching rootless podman from ${driver:-vfs} to overlay ($mode); this user's sandbox-mcp base images go and build-images.sh makes them again"
  local err
  if ! err="$(p_user system reset --force 2>&1)"; then
    echo "setup-engine: podman system reset failed, so podman keeps ${driver:-vfs}: $err" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$conf")"
  {
    echo "# Written by sandbox-mcp scripts/setup-engine.sh: overlay ($mode) instead of vfs,"
    echo "# which copies each container's whole image."
    echo "[storage]"
    echo 'driver = "overlay"'
    if [[ "$mode" == fuse ]]; then
      echo "[storage.options.overlay]"
      echo "mount_program = \"$(command -v fuse-overlayfs)\""
    fi
  } >"$conf.tmp"
  mv "$conf.tmp" "$conf"
  driver="$(p_user info --format '{{.Store.GraphDriverName}}' 2>/dev/null || true)"
  if [[ "$driver" != overlay ]]; then
    echo "setup-engine: WARNING: wrote $conf, but podman still uses ${driver:-?}" >&2
    return 0
  fi
  echo "setup-engine: wrote $conf; podman now uses overlay"
}

make_podman_work
if [[ "$(id -u)" -ne 0 ]]; then
  rootless_storage
fi
exit 0
