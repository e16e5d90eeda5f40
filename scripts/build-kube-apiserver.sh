#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager and the kubelet from the Go module
# proxy and installs Debian's etcd, the control plane (and the real node) the
# Kubernetes runtime's tests run against (Debian 12 packages none of the three, and
# released binaries are downloads these machines cannot reach). The tests run the
# controller manager for its garbage collector and volume binding, and the kubelet
# on Debian's containerd (kubetest.StartNode).
#
#   build-kube-apiserver.sh [OUT_DIR]
#
# All three land in OUT_DIR (default ~/.cache/sandbox-mcp/kube/VERSION); the
# apiserver's path is printed last. It is built in a throw-away module that requires
# k8s.io/kubernetes at KUBE_VERSION and replaces each k8s.io staging module with its
# matching v0.x release, as k8s.io/kubernetes' own go.mod points them at its
# staging tree (`go install ...@version` refuses replace directives). Idempotent:
# binaries already built are kept. About 8 minutes on 2 cores the first time, and
# about 10 more for the CSI sidecars.
set -euo pipefail

version="${KUBE_VERSION:-v1.37.2}"
staging="v0.${version#v1.}"
out="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/sandbox-mcp/kube/$version}"
bin="$out/kube-apiserver"
kcm="$out/kube-controller-manager"
kubelet="$out/kubelet"

if ! command -v etcd >/dev/null; then
  if [[ "$(id -u)" -eq 0 ]]; then as_root() { "$@"; }; else as_root() { sudo "$@"; }; fi
  echo "build-kube-apiserver: installing Debian's etcd-server" >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q etcd-server >/dev/null
  # The package starts a system etcd on the loopback's client port; the tests run
  # their own on free ports, and none is wanted in the background.
  as_root systemctl disable --now etcd >/dev/null 2>&1 || true
fi

# agent-sandbox's controller and its Sandbox resource definition, for the
# runtime's --kube-sandbox-crd (sandbox/kube's tests run them beside the
# apiserver). Its module has no replace directives: go install builds it.
asver=v1.0.1
asdir="$out/agent-sandbox-$asver"
if [[ ! -x "$asdir/agent-sandbox-controller" || ! -f "$asdir/crds/extensions.agents.x-k8s.io_sandboxwarmpools.yaml" ]]; then
  echo "build-kube-apiserver: building agent-sandbox's controller $asver" >&2
  asw="$(mktemp -d)"
  GOBIN="$asw/bin" GOFLAGS= CGO_ENABLED=0 go install -trimpath "sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller@$asver"
  src="$(cd "$asw" && GOFLAGS= go mod download -json "sigs.k8s.io/agent-sandbox@$asver" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  mkdir -p "$asw/out/crds" "$out"
  # The Sandbox, and the extensions' SandboxTemplate, SandboxWarmPool and
  # SandboxClaim (--kube-warm-pools).
  cp "$src/k8s/crds/"*.yaml "$asw/out/crds/"
  cp "$asw/bin/agent-sandbox-controller" "$asw/out/"
  # Whole or not at all: the directory is renamed into place (an older
  # build's, without the extensions' resources, moved aside first).
  rm -rf "$asdir.tmp" "$asdir.old"
  cp -r "$asw/out" "$asdir.tmp"
  if [[ -e "$asdir" ]]; then mv -T "$asdir" "$asdir.old"; fi
  mv -T "$asdir.tmp" "$asdir"
  rm -rf "$asdir.old"
  rm -rf "$asw"
fi

# The CSI sidecars that turn claims and VolumeSnapshots into calls of a CSI
# driver (external-provisioner; external-snapshotter's csi-snapshotter and
# snapshot-controller), and the snapshot resource definitions, for the
# runtime's VolumeSnapshot tests (kubetest.StartCSI runs them beside the
# test driver in internal/kubetest/csihost). Their modules carry replace
# directives, which go install refuses, so each is built as its own main
# module from a copy of its source; external-snapshotter's points its client
# module at its own tree, which the module's zip leaves out: the released
# client of the same version stands in for it.
provver=v6.4.0
snapver=v8.7.0
csidir="$out/csi-$provver-$snapver"
if [[ ! -x "$csidir/snapshot-controller" ]]; then
  echo "build-kube-apiserver: building csi-provisioner $provver, csi-snapshotter and snapshot-controller $snapver" >&2
  cw="$(mktemp -d)"
  srcof() {
    (cd "$cw" && GOFLAGS=-mod=mod go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  }
  cp -r "$(srcof "github.com/kubernetes-csi/external-provisioner/v6@$provver")" "$cw/provisioner"
  cp -r "$(srcof "github.com/kubernetes-csi/external-snapshotter/v8@$snapver")" "$cw/snapshotter"
  client="$(srcof "github.com/kubernetes-csi/external-snapshotter/client/v8@$snapver")"
  chmod -R u+w "$cw/provisioner" "$cw/snapshotter"
  mkdir -p "$cw/out/crds"
  (cd "$cw/provisioner" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$cw/out/" ./cmd/csi-provisioner)
  (cd "$cw/snapshotter" &&
    go mod edit -replace "github.com/kubernetes-csi/external-snapshotter/client/v8=github.com/kubernetes-csi/external-snapshotter/client/v8@$snapver" &&
    GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$cw/out/" ./cmd/csi-snapshotter ./cmd/snapshot-controller)
  cp "$client"/config/crd/*.yaml "$cw/out/crds/"
  rm -f "$cw/out/crds/kustomization.yaml"
  mkdir -p "$out"
  rm -rf "$csidir.tmp"
  cp -r "$cw/out" "$csidir.tmp"
  mv -T "$csidir.tmp" "$csidir"
  chmod -R u+w "$cw"
  rm -rf "$cw"
fi

if [[ -x "$bin" && -x "$kcm" && -x "$kubelet" ]] && "$bin" --version 2>/dev/null | grep -q "$version" &&
  "$kcm" --version 2>/dev/null | grep -q "$version" && "$kubelet" --version 2>/dev/null | grep -q "$version"; then
  echo "$bin"
  exit 0
fi

mod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$version.mod"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
go mod init kube-apiserver-build >/dev/null 2>&1
go mod download k8s.io/kubernetes@"$version"
{
  echo "require k8s.io/kubernetes $version"
  echo "replace ("
  # The staging modules, as k8s.io/kubernetes lists them.
  sed -n 's#^\s*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*#\t\1 => \1 '"$staging"'#p' "$mod"
  echo ")"
} >> go.mod
GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true
mkdir -p "$out" "$work/bin"
echo "build-kube-apiserver: building kube-apiserver, kube-controller-manager and kubelet $version (a few minutes)" >&2
minor="${version#v1.}"
minor="${minor%%.*}"
GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath \
  -ldflags "-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
  -o "$work/bin/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubelet
# Each lands whole or not at all: a copy beside it, then a rename.
for b in kube-apiserver kube-controller-manager kubelet; do
  cp "$work/bin/$b" "$out/$b.tmp"
  mv "$out/$b.tmp" "$out/$b"
done
echo "$bin"
