#!/usr/bin/env bash
# Builds a release into $DIST (default dist/):
#   sandbox-mcp_<version>_<os>_<arch>.tar.gz   the server (both sandbox-ctl agents embedded),
#                                              LICENSE and README.md, for each platform
#   SHA256SUMS                                 of the archives
#   sandbox-mcp_<version>.spdx.json            SPDX SBOM of the modules in the servers and agents
#   Formula/sandbox-mcp.rb                     the Homebrew formula for this repository as a tap
# The archives are reproducible: the same commit gives the same bytes (file times are the
# commit's, owners are 0, names are sorted, the build is -trimpath).
#
# usage: scripts/release.sh VERSION      e.g. scripts/release.sh v0.4.0
# env:   DIST, RELEASE_PLATFORMS (default "darwin/arm64 darwin/amd64 linux/amd64 linux/arm64"),
#        RELEASE_URL (where the archives will be downloaded from, for the formula)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() { echo "release: $*" >&2; exit 1; }
version=${1:-}
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "usage: scripts/release.sh VERSION (v1.2.3, not '${version}')"
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
dist=${DIST:-dist}
platforms=${RELEASE_PLATFORMS:-darwin/arm64 darwin/amd64 linux/amd64 linux/arm64}
module=$("$GO" list -m)
url=${RELEASE_URL:-https://$module/releases/download/$version}
if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
  SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH
stamp=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y%m%d%H%M.%S 2>/dev/null || date -u -r "$SOURCE_DATE_EPOCH" +%Y%m%d%H%M.%S)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$dist"

# The agents, embedded in every server.
make -s agents GO="$GO"
bins=(agent/ctlbin/built/sandbox-ctl-linux-amd64 agent/ctlbin/built/sandbox-ctl-linux-arm64)

archives=()
for p in $platforms; do
  os=${p%/*} arch=${p#*/}
  name=sandbox-mcp_${version}_${os}_${arch}
  stage=$work/$name
  mkdir -p "$stage"
  echo "release: $name" >&2
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath -buildvcs=false -tags embedagent \
    -ldflags "-s -w -X $module/internal/version.Set=$version" -o "$stage/sandbox-mcp" ./cmd/sandbox-mcp
  cp LICENSE README.md "$stage/"
  chmod 0755 "$stage/sandbox-mcp"
  chmod 0644 "$stage/LICENSE" "$stage/README.md"
  touch -t "$stamp" "$stage" "$stage"/*
  tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" -cf - "$name" |
    gzip -n -9 >"$dist/$name.tar.gz.tmp"
  mv "$dist/$name.tar.gz.tmp" "$dist/$name.tar.gz"
  archives+=("$name.tar.gz")
  bins+=("$stage/sandbox-mcp")
done

(cd "$dist" && sha256sum "${archives[@]}" | sort -k2 >SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
"$GO" run ./scripts/sbom -version "$version" -out "$dist/sandbox-mcp_${version}.spdx.json" "${bins[@]}"

# The formula: one archive per Mac and Linux machine the release has.
sum() { awk -v f="$1" '$2 == f { print $1 }' "$dist/SHA256SUMS"; }
block() { # block OS ARCH: the url and sha256 lines for that platform, or nothing
  local f=sandbox-mcp_${version}_$1_$2.tar.gz
  [[ -n $(sum "$f") ]] || return 0
  printf '      url "%s/%s"\n      sha256 "%s"\n' "$url" "$f" "$(sum "$f")"
}
mkdir -p "$dist/Formula"
{
  cat <<RUBY
# Homebrew formula for sandbox-mcp $version, made by scripts/release.sh.
class SandboxMcp < Formula
  desc "MCP server that gives AI agents long-lived Linux sandboxes"
  homepage "https://$module"
  version "${version#v}"
  license "MIT"

RUBY
  for os in macos linux; do
    goos=$os; [[ $os == macos ]] && goos=darwin
    arm=$(block "$goos" arm64) intel=$(block "$goos" amd64)
    [[ -n $arm$intel ]] || continue
    echo "  on_$os do"
    [[ -z $arm ]] || printf '    on_arm do\n%s\n    end\n' "$arm"
    [[ -z $intel ]] || printf '    on_intel do\n%s\n    end\n' "$intel"
    echo "  end"
    echo
  done
  cat <<'RUBY'
  def install
    bin.install "sandbox-mcp"
  end

  def caveats
    <<~EOS
      On macOS, sandboxes are Apple container VMs: install Apple's container CLI
      (https://github.com/apple/container/releases), run `container system start`,
      then `sandbox-mcp doctor`, which checks everything and prints the client set-up.
      On Linux, podman or docker is needed.
    EOS
  end

  test do
    assert_match version.to_s, shell_output("#{bin}/sandbox-mcp --version")
  end
end
RUBY
} >"$dist/Formula/sandbox-mcp.rb.tmp"
mv "$dist/Formula/sandbox-mcp.rb.tmp" "$dist/Formula/sandbox-mcp.rb"
ls -l "$dist" >&2
