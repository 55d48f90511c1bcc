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

BINARIES := calicoctl calico-node calico calico-ipam install-cni calico-kube-controllers calico-etcd-proxy lab
calicoctl_MAIN := ./calicoctl/cmd/calicoctl
calico-node_MAIN := ./node/cmd/calico-node
calico_MAIN := ./cni-plugin/cmd/calico
calico-ipam_MAIN := ./cni-plugin/cmd/calico-ipam
install-cni_MAIN := ./cni-plugin/cmd/install-cni
calico-kube-controllers_MAIN := ./kube-controllers/cmd/calico-kube-controllers
calico-etcd-proxy_MAIN := ./libcalico/datastore/etcdproxy/cmd/calico-etcd-proxy
lab_MAIN := ./lab/cmd/lab

# Whole test run; CI allows 90 minutes, we aim for well under 30.
TEST_TIMEOUT ?= 25m
TEST_FLAGS ?=

# The Kubernetes binaries the tests, the benchmarks and the demo run
# (kube-apiserver, kube-controller-manager, kube-proxy, kubectl), built by
# hack/kube-tools.sh into a cache outside the checkout, keyed by version.
KUBE_BIN = $(shell hack/kube-tools.sh --print-dir)
# CoreDNS, the cluster DNS add-on of manifests/coredns.yaml (the lab and
# the e2e suites), built by hack/coredns.sh into the same cache.
COREDNS_BIN = $(shell hack/coredns.sh --print-dir)

.PHONY: all help deps build kube-tools coredns image-bins image-debs images test bench scale lint clean demo $(BINARIES)

all: build

help:
	@echo "make deps   install Debian packages and Go tools the project needs (root)"
	@echo "make build  build $(BINARIES) into $(BIN)/"
	@echo "make kube-tools  build the Kubernetes binaries (kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, kubelet, kubectl, agnhost, e2e.test, ginkgo) into $(KUBE_BIN) (once)"
	@echo "make coredns  build CoreDNS (the cluster DNS of manifests/coredns.yaml) into $(COREDNS_BIN) (once)"
	@echo "make images multi-platform ($(IMAGE_ARCHES)) OCI image archives of calico-node, calico-kube-controllers, pause, agnhost and coredns in $(IMAGE_DIR)/ (IMAGE_TAG=$(IMAGE_TAG)), no container engine needed"
	@echo "make test   run every test, including those that need root"
	@echo "make e2e    Kubernetes' sig-network NetworkPolicy and conformance suites on a lab of real nodes (root; hack/e2e.sh)"
	@echo "make bench  run every benchmark and print one table of ratios"
	@echo "make scale  the scale harness at SIZES=$(SIZES) (root; ≤ 20 min): prints the table, writes docs/scale/ (results.md, plots)"
	@echo "make lint   gofmt, go vet and staticcheck"
	@echo "make demo   3 nodes, a BIRD route reflector, Kubernetes, 6 pods, their ping matrix and one NetworkPolicy taking effect (root; KEEP=1 leaves it running)"
	@echo "make clean  remove build output"

deps:
	@hack/install-deps.sh

build: deps $(BINARIES)

$(BINARIES):
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/$@ $($@_MAIN)

# Builds the Kubernetes binaries when they are not cached yet (minutes
# cold, milliseconds after).
kube-tools:
	@IMAGE_ARCHES="$(IMAGE_ARCHES)" hack/kube-tools.sh

coredns:
	@IMAGE_ARCHES="$(IMAGE_ARCHES)" hack/coredns.sh

# The architectures the images are built for (Go's and Debian's names).
IMAGE_ARCHES ?= amd64 arm64

# The binaries of the images, for each of IMAGE_ARCHES: static (CGO off)
# Go, into $(BIN)/linux-<arch>/ (pause is the sandbox image's program).
IMAGE_BINARIES := calico-node calico calico-ipam install-cni calicoctl calico-kube-controllers calico-etcd-proxy pause
pause_MAIN := ./hack/images/pause
image-bins:
	@for arch in $(IMAGE_ARCHES); do \
		mkdir -p $(BIN)/linux-$$arch && \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/linux-$$arch/ \
			$(foreach b,$(IMAGE_BINARIES),$($(b)_MAIN)) || exit 1; \
	done

# The Debian packages of the calico-node image (iptables, ipset and their
# libraries; containernetworking-plugins for portmap and bandwidth), for
# each of IMAGE_ARCHES, downloaded once with apt-get download.
image-debs:
	@hack/image-debs.sh $(IMAGE_ARCHES)

# The container images, each a multi-platform OCI image archive (load
# them with `ctr -n k8s.io images import`, `podman load` or `docker
# load`); see docs/install.md: $(IMAGE_DIR)/calico-node.tar,
# calico-kube-controllers.tar (tagged IMAGE_TAG), pause.tar
# (registry.k8s.io/pause:3.10.2) and agnhost.tar
# (registry.k8s.io/e2e-test-images/agnhost:2.66.1, from hack/kube-tools.sh's
# agnhost) and coredns.tar (registry.k8s.io/coredns/coredns:v1.15.0, from
# hack/coredns.sh), both cross-compiled for each of IMAGE_ARCHES into
# linux-<arch>/ of their caches. Created at the commit's time so the same
# commit makes the same images.
IMAGE_TAG ?= latest
# per-arch DIR NAME: DIR/linux-<arch>/NAME for each of IMAGE_ARCHES,
# comma-separated (the images command reads each one's architecture from
# its ELF header).
comma := ,
per-arch = $(subst $(eval) ,$(comma),$(foreach a,$(IMAGE_ARCHES),$(1)/linux-$(a)/$(2)))
IMAGE_DIR ?= images
images: image-bins image-debs kube-tools coredns
	$(GO) run ./hack/images -bin '$(BIN)/linux-{arch}' -debs "$$(hack/image-debs.sh --print-dir '{arch}')" \
		-arch "$$(echo $(IMAGE_ARCHES) | tr " " ,)" -agnhost "$(call per-arch,$(KUBE_BIN),agnhost)" -coredns "$(call per-arch,$(COREDNS_BIN),coredns)" -out $(IMAGE_DIR) -tag $(IMAGE_TAG) \
		-version $(VERSION) -created "$$(git log -1 --format=%cI 2>/dev/null || echo 1970-01-01T00:00:00Z)"

# Tests that exec the binaries find them through PALISADE_BIN, and the
# Kubernetes ones through PALISADE_KUBE_BIN (a test needing them fails
# when they are missing).
test: build images kube-tools coredns image-debs
	PALISADE_BIN=$(CURDIR)/$(BIN) PALISADE_KUBE_BIN=$(KUBE_BIN) PALISADE_IMAGES=$(CURDIR)/$(IMAGE_DIR) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./...

# Kubernetes' own sig-network suites against a lab of real nodes (lab up
# --kubelet): NetworkPolicy and conformance on iptables, NetworkPolicy on
# eBPF. Longer than make test; docs/conformance.md has the results.
e2e: build images kube-tools
	hack/e2e.sh
	hack/e2e.sh --set netpol --bpf

bench: build kube-tools
	PALISADE_BIN=$(CURDIR)/$(BIN) PALISADE_KUBE_BIN=$(KUBE_BIN) $(GO) run ./hack/benchtable -- $(GO) test -run '^$$' -bench . -count 1 -p 1 -timeout 60m ./...

# The scale harness (scale/, docs/scale.md): every measurement at each of
# SIZES (cluster sizes, comma separated), the table on stdout, the table
# and the plots in docs/scale/. The BGP part runs in a network namespace
# of its own, under the kernel-test lock only while it runs. PHASES (comma
# separated: calc, fanout, fanoutcache, fanout3, bgp, ipam) runs only those.
SIZES ?= 100,250,500,1000
scale:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/scale ./scale/cmd/scale
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/scale-node ./scale/cmd/scale-node
	$(BIN)/scale -sizes $(SIZES) -out docs/scale -lock /tmp/palisade-kernel.lock $(if $(PHASES),-phases $(PHASES))

lint:
	@hack/install-deps.sh --lint
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(TOOLS)/staticcheck ./...

# The whole fabric on this machine, then removed (KEEP=1 leaves it up).
demo: build kube-tools
	KEEP=$(KEEP) PALISADE_KUBE_BIN=$(KUBE_BIN) $(BIN)/lab demo

clean:
	rm -rf $(BIN) $(IMAGE_DIR)
