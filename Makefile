# sandbox-mcp. `make setup` once per machine, then `make test`.
# Go: the one on PATH, else where the official archive unpacks it (a new
# user's PATH may lack /usr/local/go/bin).
GO ?= $(or $(shell command -v go 2>/dev/null),$(wildcard /usr/local/go/bin/go),go)

BIN := bin
CTL_FLAGS := -trimpath -ldflags "-s -w"
# sandbox-ctl, the agent the server runs inside each sandbox, is a static linux
# binary for each sandbox architecture. It is built into agent/ctlbin/built/
# (git-ignored) and embedded in the server (-tags embedagent): bin/sandbox-mcp
# needs no file beside it. A server built without the tag (go install, make
# cross) builds its agents from its module source on first use instead.
AGENTS := agent/ctlbin/built
EMBED := -tags embedagent
CONTAINERS_CONF ?= $(CURDIR)/scripts/containers.conf
# make release: the server for these platforms, in dist/.
RELEASE_PLATFORMS ?= darwin/arm64 darwin/amd64 linux/amd64 linux/arm64

.PHONY: all build agents release setup test test-mac test-unit test-rootless bench lint cross images clean

all: build

build: agents
	$(GO) build -buildvcs=auto $(EMBED) -o $(BIN)/sandbox-mcp ./cmd/sandbox-mcp
	@# Agents an older build put beside the server would stand in for the embedded ones.
	rm -f $(BIN)/sandbox-ctl $(BIN)/sandbox-ctl-linux-amd64 $(BIN)/sandbox-ctl-linux-arm64

agents:
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build $(CTL_FLAGS) -o $(AGENTS)/sandbox-ctl-linux-amd64 ./cmd/sandbox-ctl
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build $(CTL_FLAGS) -o $(AGENTS)/sandbox-ctl-linux-arm64 ./cmd/sandbox-ctl

# A release in dist/: an archive per platform (the server with both agents
# embedded), SHA256SUMS, an SPDX SBOM and the Homebrew formula.
#   make release VERSION=v1.2.3   (RELEASE_PLATFORMS to choose the platforms)
release:
	RELEASE_PLATFORMS="$(RELEASE_PLATFORMS)" GO="$(GO)" scripts/release.sh "$(VERSION)"

# Linux: podman, runc and the offline images. macOS: Apple's container CLI
# started, mcp-dev built from Containerfile.mcp-dev (scripts/setup-macos.sh).
ifeq ($(shell uname -s),Darwin)
setup:
	scripts/setup-macos.sh
else
setup:
	@$(GO) version >/dev/null 2>&1 || { echo "make setup: Go is needed to build the server (go.mod asks for go 1.26 or newer): install it from https://go.dev/dl and put its bin directory on PATH" >&2; exit 1; }
	scripts/setup-engine.sh
	scripts/build-images.sh --engine podman all
	$(MAKE) build
	@echo
	@echo "Register the server with Claude Code:"
	@echo "  claude mcp add --scope user sandbox -- $(CURDIR)/$(BIN)/sandbox-mcp serve"
endif

# Everything, against real podman and a private Docker Engine (see scripts/test.sh);
# on macOS, `make test` is `make test-mac`.
# Extra go test args: make test ARGS='-run TestX ./shell/'
ifeq ($(shell uname -s),Darwin)
test: test-mac
else
test:
	GO="$(GO)" scripts/test.sh $(if $(ARGS),-- $(ARGS))
endif

# On a Mac (Apple silicon, after `make setup`): the engine and e2e suites against
# Apple's own container CLI, with macOS's bash 3.2 (see scripts/test-mac.sh).
test-mac:
	scripts/test-mac.sh $(if $(ARGS),-- $(ARGS))

# As root: creates the user sandbox-mcp-ci (passwordless sudo) and proves that a normal
# user sets up and serves with rootless podman. CI runs it; it changes the machine.
test-rootless:
	scripts/test-rootless.sh

# No engine: the engine tests skip.
test-unit:
	SANDBOX_MCP_TEST_RUNTIMES= $(GO) test ./...

bench:
	CONTAINERS_CONF="$(CONTAINERS_CONF)" $(GO) run ./cmd/sandbox-bench $(ARGS)

lint:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt -l: not formatted:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

cross:
	GOOS=darwin GOARCH=arm64 $(GO) build ./...
	GOOS=linux GOARCH=arm64 $(GO) build ./...

images:
	scripts/build-images.sh $(ARGS)

clean:
	rm -rf $(BIN) dist $(AGENTS)
