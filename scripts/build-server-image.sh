#!/usr/bin/env bash
# Builds the server's image for a cluster (deploy/kubernetes/Containerfile): the
# static Linux server for this machine's architecture, both agents embedded.
#
#   scripts/build-server-image.sh [--engine podman|docker] [TAG]   (TAG default sandbox-mcp-server:latest)
#
# Push the tag to a registry the cluster's nodes pull from, and name it in an
# overlay of deploy/kubernetes (kustomization.yaml's images).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
engine=podman
if [[ "${1:-}" == --engine ]]; then engine="$2"; shift 2; fi
tag="${1:-sandbox-mcp-server:latest}"
GO="${GO:-go}"
arch="$("$GO" env GOARCH)"
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cd "$repo"
make -s agents GO="$GO"
CGO_ENABLED=0 GOOS=linux GOARCH="$arch" "$GO" build -trimpath -tags embedagent -o "$ctx/sandbox-mcp-linux-$arch" ./cmd/sandbox-mcp
cp deploy/kubernetes/Containerfile "$ctx/"
"$engine" build --build-arg "TARGETARCH=$arch" -t "$tag" -f "$ctx/Containerfile" "$ctx"
echo "built $tag" >&2
