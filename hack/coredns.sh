#!/usr/bin/env bash
# Builds CoreDNS, the cluster DNS of the lab and the e2e suites
# (manifests/coredns.yaml), from the Go module proxy, outside the checkout
# (never the project's go.mod), and keeps the binary in a cache keyed by
# version. A second call finds it and returns at once.
#
# Only the plugins a cluster DNS needs are compiled in: CoreDNS's own way
# of choosing them is a plugin.cfg read by its directives_generate.go, which
# writes the plugin imports (core/plugin/zplugin.go) and their order
# (core/dnsserver/zdirectives.go). This script does the same on a copy of
# the module's source. `forward` is deliberately not in the list: this
# CoreDNS cannot ask any upstream resolver, whatever its Corefile says.
#
# Besides this machine's coredns in the cache directory, one is built for
# each of IMAGE_ARCHES (make images' list) into linux-ARCH/, for the
# multi-platform coredns image.
#
#   hack/coredns.sh              build when missing; quiet when present
#   hack/coredns.sh --print-dir  print the directory of the binary
set -euo pipefail

COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
CACHE_ROOT="${PALISADE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/palisade}"
DIR="$CACHE_ROOT/coredns-$COREDNS_VERSION"
IMAGE_ARCHES="${IMAGE_ARCHES:-amd64 arm64}"
# name:package, in the order of CoreDNS's own plugin.cfg (that order is the
# order a query passes the plugins in).
PLUGINS=(
	reload:reload
	ready:ready
	health:health
	prometheus:metrics
	errors:errors
	log:log
	loadbalance:loadbalance
	cache:cache
	kubernetes:kubernetes
	loop:loop
)

die() { echo "coredns: $*" >&2; exit 1; }

if [ "${1:-}" = "--print-dir" ]; then
	echo "$DIR"
	exit 0
fi

native_complete() {
	[ "$(cat "$DIR/.version" 2>/dev/null)" = "$COREDNS_VERSION" ] && [ -x "$DIR/coredns" ]
}
complete() {
	native_complete || return 1
	for a in $IMAGE_ARCHES; do [ -x "$DIR/linux-$a/coredns" ] || return 1; done
}
complete && exit 0

mkdir -p "$CACHE_ROOT"
# One build at a time on a machine: a second caller waits, then finds the
# binary the first one built.
exec 9>"$CACHE_ROOT/.coredns.lock"
flock 9
complete && exit 0

command -v go >/dev/null || die "go is not on PATH"
echo "coredns: building CoreDNS $COREDNS_VERSION (this machine's and linux/${IMAGE_ARCHES// /, linux/}, where missing) into $DIR"
moddir=$(GOFLAGS=-mod=mod go mod download -json "github.com/coredns/coredns@$COREDNS_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[ -f "$moddir/directives_generate.go" ] || die "could not download github.com/coredns/coredns@$COREDNS_VERSION"

# The module cache is read-only: generate and build in a writable copy.
src="$CACHE_ROOT/coredns-src-$COREDNS_VERSION"
rm -rf "$src"
cp -r "$moddir" "$src"
chmod -R u+w "$src"
cd "$src"
printf '%s\n' "${PLUGINS[@]}" >plugin.cfg
go run directives_generate.go || die "directives_generate.go failed"
grep -q '"kubernetes",' core/dnsserver/zdirectives.go || die "generated directives lack kubernetes"
if grep -q 'plugin/forward"' core/plugin/zplugin.go; then die "generated plugin imports include forward"; fi

# build GOARCH OUT: the flags of CoreDNS's own Makefile (static, stripped,
# grpcnotrace).
build() {
	GOFLAGS=-mod=mod CGO_ENABLED=0 GOOS=linux GOARCH="$1" go build -trimpath -tags grpcnotrace -o "$2" \
		-ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" . ||
		die "go build of CoreDNS $COREDNS_VERSION for $1 failed"
}
if ! native_complete; then
	out="$CACHE_ROOT/.coredns-out-$$"
	rm -rf "$out"
	mkdir -p "$out"
	build "$(go env GOARCH)" "$out/coredns"
	echo "$COREDNS_VERSION" >"$out/.version"
	rm -rf "$DIR"
	mv "$out" "$DIR"
fi
# Each architecture's directory is written aside and renamed into place.
for a in $IMAGE_ARCHES; do
	[ -x "$DIR/linux-$a/coredns" ] && continue
	out="$CACHE_ROOT/.coredns-out-$a-$$"
	rm -rf "$out"
	mkdir -p "$out"
	build "$a" "$out/coredns"
	mv "$out" "$DIR/linux-$a"
done
cd /
rm -rf "$src"
echo "coredns: CoreDNS $COREDNS_VERSION is in $DIR"
