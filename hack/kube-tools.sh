#!/usr/bin/env bash
# Builds the Kubernetes binaries the tests run (kube-apiserver,
# kube-controller-manager, kube-scheduler, kube-proxy, kubelet, kubectl, the
# e2e test image agnhost, the upstream e2e suite e2e.test and the ginkgo
# that runs it) from the Go
# module proxy, in
# a helper module of their own (never the project's go.mod), and keeps them
# in a cache outside the checkout, keyed by version. A second call finds
# them and returns at once; a cold build takes several minutes.
#
#   hack/kube-tools.sh            build when missing; quiet when present
#   hack/kube-tools.sh --print-dir  print the directory of the binaries
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
CACHE_ROOT="${PALISADE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/palisade}"
DIR="$CACHE_ROOT/kube-$KUBE_VERSION"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl)
# agnhost is the e2e suites' workload (test/images/agnhost, part of the
# k8s.io/kubernetes module); e2e.test is test/e2e compiled as a test binary.
AGNHOST_PKG=k8s.io/kubernetes/test/images/agnhost
E2E_PKG=k8s.io/kubernetes/test/e2e
# ginkgo runs e2e.test in parallel processes (at the version Kubernetes
# requires).
GINKGO_PKG=github.com/onsi/ginkgo/v2/ginkgo
# The agnhost image is built for each of these (make images' IMAGE_ARCHES),
# into linux-ARCH/, with the files upstream's image adds beside the binary:
# porter's TLS certificate and key (porter/localhost.crt and .key in the
# k8s.io/kubernetes module: a throwaway pair for 127.0.0.1 that the
# Kubernetes repository publishes for its test image; nothing is
# committed here).
IMAGE_ARCHES="${IMAGE_ARCHES:-amd64 arm64}"
PORTER_FILES=(localhost.crt localhost.key)

die() { echo "kube-tools: $*" >&2; exit 1; }

if [ "${1:-}" = "--print-dir" ]; then
	echo "$DIR"
	exit 0
fi

complete() {
	[ "$(cat "$DIR/.version" 2>/dev/null)" = "$KUBE_VERSION" ] || return 1
	for b in "${BINARIES[@]}" agnhost e2e.test ginkgo; do [ -x "$DIR/$b" ] || return 1; done
}
# images_complete: agnhost and porter's files for every image architecture
# (added to a cache built before they were asked for, without rebuilding
# the rest).
arch_complete() {
	[ -x "$DIR/linux-$1/agnhost" ] || return 1
	for f in "${PORTER_FILES[@]}"; do [ -s "$DIR/linux-$1/$f" ] || return 1; done
}
images_complete() {
	for a in $IMAGE_ARCHES; do arch_complete "$a" || return 1; done
}
complete && images_complete && exit 0

mkdir -p "$CACHE_ROOT"
# One build at a time on a machine: a second caller waits, then finds the
# binaries the first one built.
exec 9>"$CACHE_ROOT/.kube-tools.lock"
flock 9
complete && images_complete && exit 0

command -v go >/dev/null || die "go is not on PATH"
src="$CACHE_ROOT/kube-src-$KUBE_VERSION"
mkdir -p "$src"
cd "$src"

# Kubernetes replaces its staging modules with local folders, which a
# module proxy download does not have: each is replaced by the same module
# at the matching v0 version, named from kubernetes' own go.mod.
download=$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBE_VERSION")
modfile=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' <<<"$download")
modroot=$(sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$download")
[ -f "$modfile" ] || die "could not download k8s.io/kubernetes@$KUBE_VERSION"
staging_version="v0.${KUBE_VERSION#v1.}"
mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$modfile" |
	grep -v -e '^k8s.io/sample-cli-plugin$' -e '^k8s.io/sample-controller$')
((${#staging[@]} > 20)) || die "found only ${#staging[@]} staging modules in $modfile"

{
	echo "module palisade.invalid/kubetools"
	echo
	echo "go 1.26.8"
	echo
	echo "require k8s.io/kubernetes $KUBE_VERSION"
	echo
	echo "replace ("
	for m in "${staging[@]}"; do echo "	$m => $m $staging_version"; done
	echo ")"
	echo
	echo "tool ("
	for b in "${BINARIES[@]}"; do echo "	k8s.io/kubernetes/cmd/$b"; done
	echo "	$AGNHOST_PKG"
	echo ")"
} >go.mod

minor="${KUBE_VERSION#v1.}"
minor="${minor%%.*}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
if ! complete; then
	echo "kube-tools: building Kubernetes $KUBE_VERSION (${BINARIES[*]}) into $DIR; a cold build takes several minutes"
	out="$CACHE_ROOT/.kube-out-$$"
	rm -rf "$out"
	mkdir -p "$out"
	pkgs=()
	for b in "${BINARIES[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
	GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$out" -ldflags "$ldflags" "${pkgs[@]}" "$AGNHOST_PKG" ||
		die "go build of Kubernetes $KUBE_VERSION failed"
	GOFLAGS=-mod=mod CGO_ENABLED=0 go test -c -trimpath -o "$out/e2e.test" -ldflags "$ldflags" "$E2E_PKG" ||
		die "go test -c of Kubernetes $KUBE_VERSION's e2e suite failed"
	GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$out/ginkgo" "$GINKGO_PKG" ||
		die "go build of ginkgo failed"
	echo "$KUBE_VERSION" >"$out/.version"
	rm -rf "$DIR"
	mv "$out" "$DIR"
	echo "kube-tools: Kubernetes $KUBE_VERSION is in $DIR"
fi

# agnhost for each image architecture, each directory written aside and
# renamed into place whole.
for a in $IMAGE_ARCHES; do
	arch_complete "$a" && continue
	d="$DIR/linux-$a"
	echo "kube-tools: building agnhost $KUBE_VERSION for linux/$a into $d"
	out="$CACHE_ROOT/.kube-out-$a-$$"
	rm -rf "$out"
	mkdir -p "$out"
	GOFLAGS=-mod=mod CGO_ENABLED=0 GOOS=linux GOARCH="$a" go build -trimpath -o "$out/agnhost" -ldflags "$ldflags" "$AGNHOST_PKG" ||
		die "go build of agnhost $KUBE_VERSION for $a failed"
	for f in "${PORTER_FILES[@]}"; do
		install -m 0644 "$modroot/test/images/agnhost/porter/$f" "$out/$f" || die "$modroot has no test/images/agnhost/porter/$f"
	done
	rm -rf "$d"
	mv "$out" "$d"
done
