# Palisade build, test and benchmark entry points. `make help` lists them.
SHELL := /bin/bash
GO ?= go
PKG := github.com/palisade-net/palisade
BIN := bin
TOOLS := $(CURDIR)/.tools

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GIT_COMMIT ?= $(shell git rev-parse --verify -q HEAD 2>/dev/null || echo unknown)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
export VERSION GIT_COMMIT BUILD_DATE
LDFLAGS := -s -w \
	-X $(PKG)/libcalico/buildinfo.Version=$(VERSION) \
	-X $(PKG)/libcalico/buildinfo.GitCommit=$(GIT_COMMIT) \
	-X $(PKG)/libcalico/buildinfo.BuildDate=$(BUILD_DATE)

BINARIES := calicoctl calico-node calico calico-ipam lab
calicoctl_MAIN := ./calicoctl/cmd/calicoctl
calico-node_MAIN := ./node/cmd/calico-node
calico_MAIN := ./cni-plugin/cmd/calico
calico-ipam_MAIN := ./cni-plugin/cmd/calico-ipam
lab_MAIN := ./lab/cmd/lab

# Whole test run; CI allows 90 minutes, we aim for well under 30.
TEST_TIMEOUT ?= 25m
TEST_FLAGS ?=

.PHONY: all help deps build test bench lint clean demo $(BINARIES)

all: build

help:
	@echo "make deps   install Debian packages and Go tools the project needs (root)"
	@echo "make build  build $(BINARIES) into $(BIN)/"
	@echo "make test   run every test, including those that need root"
	@echo "make bench  run every benchmark and print one table of ratios"
	@echo "make lint   gofmt, go vet and staticcheck"
	@echo "make demo   3 nodes, a BIRD route reflector, 6 pods and their ping matrix (root; KEEP=1 leaves it running)"
	@echo "make clean  remove build output"

deps:
	@hack/install-deps.sh

build: deps $(BINARIES)

$(BINARIES):
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/$@ $($@_MAIN)

# Tests that exec the binaries find them through PALISADE_BIN.
test: build
	PALISADE_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./...

bench: build
	PALISADE_BIN=$(CURDIR)/$(BIN) $(GO) run ./hack/benchtable -- $(GO) test -run '^$$' -bench . -count 1 -p 1 -timeout 60m ./...

lint:
	@hack/install-deps.sh --lint
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(TOOLS)/staticcheck ./...

# The whole fabric on this machine, then removed (KEEP=1 leaves it up).
demo: build
	KEEP=$(KEEP) $(BIN)/lab demo

clean:
	rm -rf $(BIN)
