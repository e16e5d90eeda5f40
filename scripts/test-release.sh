#!/usr/bin/env bash
# Checks scripts/release.sh: builds a release (darwin/arm64 and linux/amd64 unless
# RELEASE_PLATFORMS says otherwise) twice into temporary directories and checks that
# the checksums verify and match between the two builds (reproducible), each archive
# holds the server, LICENSE and README.md and stays under 40 MB, the linux/amd64
# server runs and carries its agents, the SBOM lists the modules of go.mod at their
# versions, and the Homebrew formula names each archive with its checksum.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
export RELEASE_PLATFORMS=${RELEASE_PLATFORMS:-darwin/arm64 linux/amd64}
version=v0.0.0-check
fail() { echo "test-release: FAIL: $*" >&2; exit 1; }
one=$(mktemp -d) two=$(mktemp -d)
trap 'rm -rf "$one" "$two"' EXIT

DIST=$one scripts/release.sh "$version"
DIST=$two scripts/release.sh "$version" 2>/dev/null
(cd "$one" && sha256sum -c --quiet SHA256SUMS) || fail "SHA256SUMS does not verify"
cmp -s "$one/SHA256SUMS" "$two/SHA256SUMS" || fail "two builds of one commit differ: $(diff "$one/SHA256SUMS" "$two/SHA256SUMS")"

for p in $RELEASE_PLATFORMS; do
  os=${p%/*} arch=${p#*/}
  name=sandbox-mcp_${version}_${os}_${arch}
  a=$one/$name.tar.gz
  [[ -f $a ]] || fail "no archive for $p"
  got=$(tar -tzf "$a" | sort | tr '\n' ' ')
  [[ $got == "$name/ $name/LICENSE $name/README.md $name/sandbox-mcp " ]] || fail "$name.tar.gz holds: $got"
  size=$(stat -c %s "$a")
  echo "test-release: $name.tar.gz: $size bytes" >&2
  ((size <= 40 * 1024 * 1024)) || fail "$name.tar.gz is $size bytes, over 40 MB"
  grep -q "sha256 \"$(awk -v f="$name.tar.gz" '$2 == f { print $1 }' "$one/SHA256SUMS")\"" "$one/Formula/sandbox-mcp.rb" ||
    fail "the formula does not carry $name's checksum"
  grep -q "url \".*/$name.tar.gz\"" "$one/Formula/sandbox-mcp.rb" || fail "the formula does not name $name.tar.gz"
done

if [[ " $RELEASE_PLATFORMS " == *" linux/$("$GO" env GOARCH) "* ]]; then
  x=$(mktemp -d)
  tar -xzf "$one/sandbox-mcp_${version}_linux_$("$GO" env GOARCH).tar.gz" -C "$x"
  bin=$x/sandbox-mcp_${version}_linux_$("$GO" env GOARCH)/sandbox-mcp
  out=$("$bin" --version 2>&1) || fail "--version: $out"
  [[ $out == *"$version"* ]] || fail "--version says $out"
  out=$(SANDBOX_MCP_STATE_DIR=$x/state "$bin" doctor --runtime podman 2>&1 || true)
  for a in amd64 arm64; do
    grep -q "linux/$a: ok, embedded" <<<"$out" || fail "doctor does not find the embedded linux/$a agent:
$out"
  done
  rm -rf "$x"
fi

sbom=$one/sandbox-mcp_${version}.spdx.json
"$GO" run ./scripts/sbom -check "$sbom" $("$GO" list -m -f '{{if not .Main}}{{.Path}}@{{.Version}}{{end}}' \
  github.com/mark3labs/mcp-go go.etcd.io/bbolt github.com/spf13/cobra github.com/creack/pty github.com/fsnotify/fsnotify github.com/hashicorp/yamux) ||
  fail "the SBOM"
if command -v ruby >/dev/null; then ruby -c "$one/Formula/sandbox-mcp.rb" >/dev/null || fail "the formula is not valid Ruby"; fi
echo "test-release: ok" >&2
