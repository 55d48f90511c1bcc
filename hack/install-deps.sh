#!/usr/bin/env bash
# Installs everything Palisade's build and tests need on a Debian 12 machine:
# Debian packages through apt-get and Go tools through the module proxy.
# Idempotent and quiet when everything is present; a clear error otherwise.
# Add packages here as features need them, never by hand on a machine.
set -euo pipefail

cd "$(dirname "$0")/.."
TOOLS_DIR="${TOOLS_DIR:-$PWD/.tools}"

# Debian packages the tests and benchmarks use.
#   etcd-server: a real external etcd for the datastore tests.
#   iproute2, iptables, ipset: kernel tests and the dataplane.
#   containernetworking-plugins: the reference CNI plugins (/usr/lib/cni)
#     chained after ours in tests and measured against in benchmarks.
#   bird2, gobgpd: real BGP peers and route reflectors for the BGP tests
#     (gobgpd brings the stock `gobgp` CLI that inspects our nodes).
#   frr: FRRouting, the other peer of the BGP tests (its daemons run in
#     the tests' namespaces; the system service is left off).
#   containerd, runc: the container runtime of the lab's real nodes (lab up
#     --kubelet; one containerd per node, started by the lab, never the
#     system service). Debian's 1.6 is what kubelet v1.37 is run with:
#     docs/lab.md says why.
DEBIAN_PACKAGES=(
	bird2
	containerd
	containernetworking-plugins
	etcd-server
	frr
	gobgpd
	iproute2
	iptables
	ipset
	runc
)

# Go tools, pinned: "binary module@version". Only `make lint` needs them,
# so they are installed when this script is called with --lint.
GO_TOOLS=(
	"staticcheck honnef.co/go/tools/cmd/staticcheck@v0.8.2"
)
WANT_GO_TOOLS=false
[ "${1:-}" = "--lint" ] && WANT_GO_TOOLS=true

# --bpf: the compiler of bpf/c/palisade.c, only to regenerate the committed
# object (go generate ./bpf); a build needs neither.
if [ "${1:-}" = "--bpf" ]; then
	DEBIAN_PACKAGES+=(clang-14 llvm-14 libbpf-dev)
fi

die() { echo "install-deps: $*" >&2; exit 1; }

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	[ "$(id -u)" = 0 ] || die "missing Debian packages: ${missing[*]}; run as root (sudo make deps)"
	echo "install-deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# Refresh the package lists when they are absent or older than a day.
	if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
		apt-get update -qq >/dev/null || die "apt-get update failed"
	fi
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
		|| die "apt-get install ${missing[*]} failed"
	# Debian starts etcd and FRR as services on install; our tests start
	# their own.
	if [[ " ${missing[*]} " == *" etcd-server "* ]] && command -v systemctl >/dev/null; then
		systemctl disable --now etcd >/dev/null 2>&1 || true
	fi
	if [[ " ${missing[*]} " == *" frr "* ]] && command -v systemctl >/dev/null; then
		systemctl disable --now frr >/dev/null 2>&1 || true
	fi
fi

mkdir -p "$TOOLS_DIR"

# BIRD 1.6 beside BIRD 2: Debian's `bird` package ships the same binary
# names as bird2, so it is unpacked (not installed) into $TOOLS_DIR/bird1.
if [ ! -x "$TOOLS_DIR/bird1/usr/sbin/bird" ]; then
	echo "install-deps: unpacking BIRD 1.6 into $TOOLS_DIR/bird1"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	(cd "$tmp" && apt-get download bird >/dev/null 2>&1) || {
		apt-get update -qq >/dev/null && (cd "$tmp" && apt-get download bird >/dev/null)
	} || die "apt-get download bird (BIRD 1.6) failed"
	dpkg-deb -x "$tmp"/bird_*.deb "$TOOLS_DIR/bird1" || die "unpacking BIRD 1.6 failed"
	rm -rf "$tmp"
	trap - EXIT
fi
$WANT_GO_TOOLS || exit 0
for entry in "${GO_TOOLS[@]}"; do
	bin=${entry%% *}
	mod=${entry#* }
	stamp="$TOOLS_DIR/.$bin.version"
	if [ -x "$TOOLS_DIR/$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$mod" ]; then
		continue
	fi
	echo "install-deps: go install $mod"
	GOBIN="$TOOLS_DIR" go install "$mod" || die "go install $mod failed"
	echo "$mod" >"$stamp"
done
