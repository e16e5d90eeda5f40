# sandbox-mcp. `make setup` once per machine, then `make test`.
GO ?= go

BIN := bin
CTL_FLAGS := -trimpath -ldflags "-s -w"
# sandbox-ctl runs inside Linux sandboxes: always a static linux binary, for the
# host's architecture (bin/sandbox-ctl) and for both sandbox architectures.
HOST_ARCH := $(shell $(GO) env GOARCH)
CONTAINERS_CONF ?= $(CURDIR)/scripts/containers.conf

.PHONY: all build setup test test-mac test-unit test-rootless bench lint cross images clean

all: build

build:
	$(GO) build -buildvcs=auto -o $(BIN)/sandbox-mcp ./cmd/sandbox-mcp
	CGO_ENABLED=0 GOOS=linux GOARCH=$(HOST_ARCH) $(GO) build $(CTL_FLAGS) -o $(BIN)/sandbox-ctl ./cmd/sandbox-ctl
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build $(CTL_FLAGS) -o $(BIN)/sandbox-ctl-linux-amd64 ./cmd/sandbox-ctl
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build $(CTL_FLAGS) -o $(BIN)/sandbox-ctl-linux-arm64 ./cmd/sandbox-ctl

# Linux: podman, runc and the offline images. macOS: Apple's container CLI
# started, mcp-dev built from Containerfile.mcp-dev (scripts/setup-macos.sh).
ifeq ($(shell uname -s),Darwin)
setup:
	scripts/setup-macos.sh
else
setup:
	scripts/setup-engine.sh
	scripts/build-images.sh --engine podman all
	$(MAKE) build
	@echo
	@echo "Register the server with Claude Code:"
	@echo "  claude mcp add sandbox -- $(CURDIR)/$(BIN)/sandbox-mcp serve"
endif

# Everything, against real podman and a private Docker Engine (see scripts/test.sh);
# on macOS, `make test` is `make test-mac`.
# Extra go test args: make test ARGS='-run TestX ./shell/'
ifeq ($(shell uname -s),Darwin)
test: test-mac
else
test:
	scripts/test.sh $(if $(ARGS),-- $(ARGS))
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
	rm -rf $(BIN) dist
