#!/usr/bin/env bash
# Builds the offline sandbox images from Debian packages (no registry is needed).
#
#   build-images.sh [--engine podman|docker] [--force] [--no-cache] [minimal|dev|slim|all|test]
#
# podman: localhost/sandbox-mcp-minimal:latest, localhost/mcp-dev:latest
# docker: sandbox-mcp-minimal:latest, mcp-dev:latest  (docker would also accept the
#         localhost/ names, but lists them as "localhost/..." and the short names are
#         what docker users expect)
# `all` builds those two; `test` adds sandbox-mcp-slim, mcp-dev without its big
# packages, for the tests that copy a whole root filesystem (see build_slim).
#
# Existing images are kept unless --force, or, for mcp-dev, unless they were built from
# an older recipe (package list). The dev rootfs tarball is cached under
# ${XDG_CACHE_HOME:-$HOME/.cache}/sandbox-mcp/, so --force or a second engine reuses
# it; --no-cache runs debootstrap again. podman honours CONTAINERS_CONF as usual;
# docker uses DOCKER_HOST (see scripts/dockerd.sh).
# Run it as the user who will serve: podman keeps images per user. Building the dev
# rootfs needs root (debootstrap, apt-get in a chroot); a normal user's run does that one
# step through sudo, says so first, and owns the resulting tarball. Run
# scripts/setup-engine.sh first.
set -euo pipefail

usage() {
  echo "usage: $0 [--engine podman|docker] [--force] [--no-cache] [minimal|dev|slim|all|test]" >&2
}

engine=podman
force=0
no_cache=0
target=all
# Internal: build only the dev rootfs tarball into --cache-dir (the sudo step).
rootfs_only=0
cache_dir_arg=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rootfs-only) rootfs_only=1; shift ;;
    --cache-dir)
      [[ $# -ge 2 ]] || { usage; exit 2; }
      cache_dir_arg="$2"
      shift 2
      ;;
    --engine)
      [[ $# -ge 2 ]] || { usage; exit 2; }
      engine="$2"
      shift 2
      ;;
    --engine=*) engine="${1#--engine=}"; shift ;;
    --force) force=1; shift ;;
    --no-cache) no_cache=1; shift ;;
    minimal|dev|slim|all|test) target="$1"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done

case "$engine" in
  podman)
    minimal_image=localhost/sandbox-mcp-minimal:latest
    dev_image=localhost/mcp-dev:latest
    slim_image=localhost/sandbox-mcp-slim:latest
    ;;
  docker)
    minimal_image=sandbox-mcp-minimal:latest
    dev_image=mcp-dev:latest
    slim_image=sandbox-mcp-slim:latest
    ;;
  *) usage; exit 2 ;;
esac

if [[ "$rootfs_only" -eq 0 ]] && ! command -v "$engine" >/dev/null; then
  echo "build-images: $engine not found (run scripts/setup-engine.sh)" >&2
  exit 1
fi
if [[ "$rootfs_only" -eq 0 && "$engine" == docker ]] && ! docker version >/dev/null 2>&1; then
  echo "build-images: no docker daemon answers (DOCKER_HOST=${DOCKER_HOST:-unset});" \
    "start one with: eval \"\$(scripts/dockerd.sh start /tmp/smd)\"" >&2
  exit 1
fi

suite=bookworm
# mcp-dev is Debian minbase (dash, coreutils, util-linux, apt) plus the toolbox that
# Containerfile.mcp-dev gives macOS users (README: "What the default image holds") and
# what the server runs in a sandbox (nc, pkill). Installed by apt-get in the new root,
# without recommends: debootstrap's own resolver cannot follow npm's virtual packages.
# debootstrap itself adds only ca-certificates, so that apt can verify an https mirror.
dev_base=ca-certificates
dev_packages=(
  ca-certificates curl git jq tar unzip
  python3 python3-pip python3-venv
  python3-matplotlib python3-numpy python3-pandas
  nodejs npm
  build-essential
  netcat-openbsd procps
)
# Bump when the dev rootfs recipe changes otherwise, so an old cached tarball or image
# is not reused.
dev_recipe=2
dev_key="$(printf '%s|%s|%s|%s' "$suite" "minbase+$dev_base" "${dev_packages[*]}" "$dev_recipe" \
  | sha256sum | cut -c1-12)"
recipe_label=io.sandbox-mcp.recipe
cache_dir="${cache_dir_arg:-${XDG_CACHE_HOME:-$HOME/.cache}/sandbox-mcp}"
path_env='ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
# Same --change syntax for podman and docker import (Dockerfile instructions).
changes=(--change 'CMD ["/bin/sh"]' --change 'WORKDIR /workspace' --change "$path_env")
# A sandbox is disposable: `pip install` goes to the system's Python, as on the Alpine
# image, instead of stopping at Debian's "externally managed" marker. Debian's pip puts
# it under /usr/local, apart from apt's packages; `python3 -m venv` works as well.
dev_changes=(--change 'ENV PIP_BREAK_SYSTEM_PACKAGES=1' --change 'ENV PIP_ROOT_USER_ACTION=ignore'
  --change "LABEL $recipe_label=$dev_key")

workdir=""
cleanup() {
  if [[ -n "$workdir" ]]; then
    # --one-file-system: never descend into a /proc or /sys a failed debootstrap left mounted.
    rm -rf --one-file-system "$workdir"
  fi
}
trap cleanup EXIT

log() { echo "build-images: $*"; }

image_id() {
  "$engine" image inspect --format '{{.Id}}' "$1" 2>/dev/null || true
}

# The recipe key image $1 was built from (empty for images built before the label).
image_recipe() {
  "$engine" image inspect --format "{{index .Config.Labels \"$recipe_label\"}}" "$1" \
    2>/dev/null || true
}

# Imports the rootfs tar on stdin as image $1, with the extra --change arguments that
# follow, and drops the image it replaces, if unused.
import_rootfs() {
  local name="$1" old new
  shift
  old="$(image_id "$name")"
  if [[ "$engine" == podman ]]; then
    podman import --quiet "${changes[@]}" "$@" - "$name" >/dev/null
  else
    docker import "${changes[@]}" "$@" - "$name" >/dev/null
  fi
  new="$(image_id "$name")"
  if [[ -n "$old" && "$old" != "$new" ]]; then
    "$engine" rmi "$old" >/dev/null 2>&1 || true
  fi
}

# Runs a fixed check script (not user input) in a throwaway container of image $1.
check_image() {
  local name="$1" script="$2" out
  if out="$("$engine" run --rm --network none "$name" /bin/sh -c "$script" 2>&1)"; then
    log "$name: $out"
  else
    log "$name: check FAILED: $out" >&2
    return 1
  fi
}

seconds_since() {
  awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'
}

# Makes a rootfs of Debian's busybox-static in directory $1.
make_minimal_rootfs() {
  local root="$1" bb=/bin/busybox p
  if [[ ! -x "$bb" ]] || ldd "$bb" >/dev/null 2>&1; then
    echo "build-images: $bb missing or not static (apt-get install busybox-static)" >&2
    return 1
  fi
  mkdir -p "$root/bin"
  cp "$bb" "$root/bin/busybox"
  # Same links as `busybox --install -s`, made from the host without a chroot.
  while IFS= read -r p; do
    [[ -n "$p" && "$p" != bin/busybox ]] || continue
    mkdir -p "$root/$(dirname "$p")"
    ln -sf /bin/busybox "$root/$p"
  done < <("$bb" --list-full)
  mkdir -p "$root/etc" "$root/root" "$root/workspace" "$root/proc" "$root/sys" "$root/dev"
  install -d -m 1777 "$root/tmp"
  echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
  echo 'root:x:0:' >"$root/etc/group"
}

build_minimal() {
  local start="$EPOCHREALTIME"
  if [[ "$force" -eq 0 && -n "$(image_id "$minimal_image")" ]]; then
    log "$minimal_image exists; skipped (--force rebuilds)"
  else
    workdir="$(mktemp -d)"
    make_minimal_rootfs "$workdir/rootfs"
    tar -C "$workdir/rootfs" --numeric-owner --owner=0 --group=0 -c . \
      | import_rootfs "$minimal_image"
    cleanup
    workdir=""
    log "$minimal_image built in $(seconds_since "$start") s"
  fi
  # shellcheck disable=SC2016 # expanded by the container's shell
  check_image "$minimal_image" '
    for c in sh base64 sleep nc; do command -v "$c" >/dev/null || { echo "missing $c"; exit 1; }; done
    [ "$(echo aGk= | base64 -d)" = hi ] || { echo "base64 broken"; exit 1; }
    sleep 0.01 || exit 1
    echo "ok: sh base64 sleep nc"'
}

# The mirror of $suite from the machine's apt sources (deb822 or one-line format;
# apt parses them for us), else Debian's default.
apt_mirror() {
  local uri release
  # shellcheck disable=SC2016 # apt's own $(FIELD) syntax below
  while IFS='|' read -r uri release; do
    if [[ "$release" == "$suite" && "$uri" == http* ]]; then
      echo "${uri%/}"
      return
    fi
  done < <(apt-get indextargets --no-release-info --format '$(REPO_URI)|$(RELEASE)' \
    'Created-By: Packages' 2>/dev/null || true)
  echo http://deb.debian.org/debian
}

# Sets dev_tarball to the cached dev rootfs tarball, building it with debootstrap if
# needed. Not run in $(...): the EXIT trap must see $workdir.
dev_tarball=""
dev_rootfs_tar() {
  local tarball mirror root proxy t0
  tarball="$cache_dir/mcp-dev-$suite-$dev_key.tar"
  if [[ "$no_cache" -eq 0 && -s "$tarball" ]]; then
    log "reusing cached rootfs $tarball"
    dev_tarball="$tarball"
    return
  fi
  if [[ "$(id -u)" -ne 0 ]]; then
    if ! command -v sudo >/dev/null; then
      echo "build-images: building the dev rootfs needs root (debootstrap, apt-get in a chroot), and sudo is not installed;" >&2
      echo "  run once as root: su -c '$0 --rootfs-only --cache-dir $cache_dir', then this again" >&2
      return 1
    fi
    log "building the dev rootfs needs root (debootstrap, apt-get in a chroot): running that step with sudo"
    mkdir -p "$cache_dir"
    local args=(--rootfs-only --cache-dir "$cache_dir")
    [[ "$no_cache" -eq 1 ]] && args+=(--no-cache)
    sudo "$0" "${args[@]}"
    sudo chown "$(id -u):$(id -g)" "$tarball"
    [[ -s "$tarball" ]] || { echo "build-images: the sudo step made no $tarball" >&2; return 1; }
    dev_tarball="$tarball"
    return
  fi
  command -v debootstrap >/dev/null || {
    echo "build-images: debootstrap not found (run scripts/setup-engine.sh)" >&2
    return 1
  }
  mirror="$(apt_mirror)"
  # debootstrap ignores apt.conf; pass apt's proxy on if the environment has none.
  if [[ -z "${http_proxy:-}" ]]; then
    proxy="$(apt-config dump --format '%v%n' Acquire::http::Proxy 2>/dev/null | head -n 1 || true)"
    if [[ -n "$proxy" && "$proxy" != DIRECT ]]; then
      export http_proxy="$proxy"
    fi
  fi
  mkdir -p "$cache_dir"
  # Build next to the cache (same filesystem) rather than in a possibly small /tmp.
  workdir="$(mktemp -d "$cache_dir/build.XXXXXX")"
  root="$workdir/rootfs"
  t0="$EPOCHREALTIME"
  log "debootstrap $suite minbase from $mirror (about a minute)"
  if ! debootstrap --variant=minbase --include="$dev_base" "$suite" "$root" "$mirror" \
    >"$workdir/debootstrap.log" 2>&1; then
    echo "build-images: debootstrap failed; log tail:" >&2
    tail -n 30 "$workdir/debootstrap.log" >&2
    if [[ -f "$root/debootstrap/debootstrap.log" ]]; then
      tail -n 30 "$root/debootstrap/debootstrap.log" >&2
    fi
    return 1
  fi
  log "debootstrap done in $(seconds_since "$t0") s"
  t0="$EPOCHREALTIME"
  log "apt-get install ${dev_packages[*]} (about a minute)"
  # debootstrap left the suite's package lists in the root, so no `apt-get update`.
  # No service may start in the chroot; unsafe-io: a failed build is thrown away anyway.
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"
  if ! LC_ALL=C DEBIAN_FRONTEND=noninteractive chroot "$root" \
    apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-unsafe-io \
    "${dev_packages[@]}" >"$workdir/apt.log" 2>&1; then
    echo "build-images: apt-get install in the new root failed; log tail:" >&2
    tail -n 30 "$workdir/apt.log" >&2
    return 1
  fi
  rm -f "$root/usr/sbin/policy-rc.d"
  log "apt-get install done in $(seconds_since "$t0") s"
  mkdir -p "$root/workspace"
  # Smaller image: apt lists and caches are rebuilt by `apt-get update` when needed.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
    "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/debconf/*-old \
    "$root"/var/log/apt/* "$root"/var/log/dpkg.log "$root"/var/log/alternatives.log
  # The engine bind-mounts its own; do not ship the build host's.
  : >"$root/etc/resolv.conf"
  : >"$root/etc/hostname"
  tar -C "$root" --numeric-owner -cf "$workdir/rootfs.tar" .
  mv -f "$workdir/rootfs.tar" "$tarball"
  cleanup
  workdir=""
  log "cached rootfs $tarball"
  # Rootfs tarballs of older recipes are never used again.
  local old
  for old in "$cache_dir"/mcp-dev-*.tar; do
    if [[ -f "$old" && "$old" != "$tarball" ]]; then
      rm -f "$old"
      log "removed $old (an older recipe)"
    fi
  done
  dev_tarball="$tarball"
}

build_dev() {
  local start="$EPOCHREALTIME" recipe
  recipe="$(image_recipe "$dev_image")"
  if [[ "$force" -eq 0 && "$recipe" == "$dev_key" ]]; then
    log "$dev_image exists; skipped (--force rebuilds)"
  else
    if [[ "$force" -eq 0 && -n "$(image_id "$dev_image")" ]]; then
      log "$dev_image was built from an older recipe; rebuilding"
    fi
    dev_rootfs_tar
    import_rootfs "$dev_image" "${dev_changes[@]}" <"$dev_tarball"
    log "$dev_image built in $(seconds_since "$start") s"
  fi
  # The toolbox, as the README's table and e2e/toolbox_test.go list it.
  # shellcheck disable=SC2016 # expanded by the container's shell
  check_image "$dev_image" '
    for c in sh base64 nc setsid pkill timeout apt-get python3 pip3 node npm cc c++ make \
      git curl jq tar unzip; do
      command -v "$c" >/dev/null || { echo "missing $c"; exit 1; }
    done
    fail() { echo "$1 broken"; exit 1; }
    case "$(readlink -f /bin/sh)" in */dash) ;; *) echo "sh is not dash"; exit 1 ;; esac
    [ "$(echo aGk= | base64 -d)" = hi ] || fail base64
    nc -h 2>&1 | grep -q OpenBSD || { echo "nc is not netcat-openbsd"; exit 1; }
    setsid true && timeout 5 true || fail setsid/timeout
    pkill --version >/dev/null && apt-get --version >/dev/null || fail pkill/apt-get
    [ "$(python3 -c "import json, http, asyncio, sqlite3, dataclasses, shutil, unittest, ssl
print(6*7)")" = 42 ] || fail python3
    python3 -m pip --version >/dev/null || fail pip
    [ "$(python3 -c "import matplotlib.pyplot, numpy, pandas; print(int(numpy.arange(7).sum() * 2))")" = 42 ] || fail matplotlib/numpy/pandas
    python3 -m venv /tmp/venv && /tmp/venv/bin/python -m pip --version >/dev/null || fail venv
    [ "$(node -e "console.log(6*7)")" = 42 ] && npm --version >/dev/null || fail node/npm
    printf "int main(void) { return 42; }\n" >/tmp/t.c && cc -o /tmp/t /tmp/t.c || fail cc
    /tmp/t; [ $? = 42 ] || fail cc
    make --version >/dev/null || fail make
    git --version >/dev/null && curl --version >/dev/null || fail git/curl
    [ "$(echo "{\"a\": 42}" | jq .a)" = 42 ] || fail jq
    tar --version >/dev/null && unzip -v >/dev/null || fail tar/unzip
    [ -s /etc/ssl/certs/ca-certificates.crt ] || fail ca-certificates
    echo "ok: dash base64 nc setsid pkill timeout apt-get python3 pip venv matplotlib numpy pandas node npm cc make git curl jq tar unzip ca-certificates"'
}

# sandbox-mcp-slim is mcp-dev less its big packages (numpy, pandas, matplotlib, node,
# the C toolchain's libraries and headers, docs and locales): 0.3 GB, not 1.6, with
# python3's standard library and Debian's coreutils, findutils and tar still there.
# A test image only: snapshots through Apple's CLI export and rebuild the whole root
# filesystem, 80 s a copy of mcp-dev on a 2-core machine. Rebuilt when mcp-dev is.
# Globs, for any architecture's multiarch directory (x86_64-linux-gnu, aarch64-linux-gnu).
slim_recipe=2
slim_drop=(
  /usr/lib/python3/dist-packages /usr/share/nodejs /usr/lib/node_modules
  /usr/lib/gcc /usr/libexec/gcc /usr/include /usr/lib/git-core "/usr/bin/*-linux-gnu-lto-dump-*"
  "/usr/lib/*-linux-gnu/openblas-pthread" "/usr/lib/*-linux-gnu/perl"
  "/usr/lib/*-linux-gnu/libnode.so*" "/usr/lib/*-linux-gnu/libicudata.so*"
  "/usr/lib/*-linux-gnu/*.a" "/usr/lib/*-linux-gnu/lib[athlu]san.so*"
  /usr/share/doc /usr/share/man /usr/share/info /usr/share/locale /usr/share/unicode
  /usr/share/javascript /usr/share/matplotlib /usr/share/perl
)
build_slim() {
  local start="$EPOCHREALTIME" key ctx dev_id
  dev_id="$(image_id "$dev_image")"
  [[ -n "$dev_id" ]] || { echo "build-images: $slim_image is made from $dev_image, which is missing (build dev first)" >&2; return 1; }
  key="$dev_id-slim$slim_recipe"
  if [[ "$force" -eq 0 && "$(image_recipe "$slim_image")" == "$key" ]]; then
    log "$slim_image exists; skipped (--force rebuilds)"
  else
    workdir="$(mktemp -d)"
    ctx="$workdir"
    # The list is fixed above (no user input); the shell in the image expands its globs.
    printf 'FROM %s\nRUN rm -rf %s\nLABEL %s=%s\n' "$dev_image" "${slim_drop[*]}" "$recipe_label" "$key" >"$ctx/Containerfile"
    local old
    old="$(image_id "$slim_image")"
    "$engine" build -q -t "$slim_image" -f "$ctx/Containerfile" "$ctx" >/dev/null
    if [[ -n "$old" && "$old" != "$(image_id "$slim_image")" ]]; then
      "$engine" rmi "$old" >/dev/null 2>&1 || true
    fi
    cleanup
    workdir=""
    log "$slim_image built in $(seconds_since "$start") s"
  fi
  # What the tests that use it run: python3's standard library, GNU find's -printf.
  # shellcheck disable=SC2016 # expanded by the container's shell
  check_image "$slim_image" '
    for c in sh base64 nc setsid timeout python3 tar truncate dd mkfifo stat find; do
      command -v "$c" >/dev/null || { echo "missing $c"; exit 1; }
    done
    [ "$(python3 -c "import os, struct, tarfile, sys; print(6*7)")" = 42 ] || { echo "python3 broken"; exit 1; }
    find / -maxdepth 0 -printf "%U\n" >/dev/null || { echo "find -printf broken"; exit 1; }
    echo "ok: sh base64 nc setsid timeout python3 tar truncate dd mkfifo stat find; $(du -xsm / | cut -f1) MB"'
}

if [[ "$rootfs_only" -eq 1 ]]; then
  dev_rootfs_tar
  exit 0
fi
case "$target" in
  minimal) build_minimal ;;
  dev) build_dev ;;
  slim) build_slim ;;
  all) build_minimal; build_dev ;;
  test) build_minimal; build_dev; build_slim ;;
esac
