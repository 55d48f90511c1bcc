#!/usr/bin/env bash
# Downloads, for each architecture asked for (default: this machine's), the
# Debian packages the calico-node image is made of, into a cache outside the
# checkout keyed by architecture, with apt-get download and nothing else:
#   node/  the userspace felix runs (iptables, both backends, and ipset, with
#          everything they depend on), unpacked whole into the image;
#   cni/   containernetworking-plugins, of which the image takes only the
#          portmap and bandwidth plugins;
#   agnhost/  the shell and tools the e2e suites run in the agnhost image
#          through `kubectl exec … /bin/sh -c` (sh, sleep, grep, curl, wget,
#          nc; nslookup, which the Services specs resolve ExternalName
#          Services with), with everything they depend on.
# A foreign architecture (arm64 on an amd64 machine) is added to dpkg
# (`dpkg --add-architecture`, then apt-get update) the first time; that
# needs root. Idempotent: a second call finds the packages and returns at
# once.
#
#   hack/image-debs.sh [ARCH...]           download what is missing
#   hack/image-debs.sh --print-dir [ARCH]  print the cache directory of ARCH
set -euo pipefail

NODE_PACKAGES=(iptables ipset)
CNI_PACKAGES=(containernetworking-plugins)
AGNHOST_PACKAGES=(dash coreutils grep curl wget netcat-openbsd bind9-dnsutils)
CACHE_ROOT="${PALISADE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/palisade}"
NATIVE=$(dpkg --print-architecture)

die() { echo "image-debs: $*" >&2; exit 1; }
dir_of() { echo "$CACHE_ROOT/image-debs-$1"; }

if [ "${1:-}" = "--print-dir" ]; then
	dir_of "${2:-$NATIVE}"
	exit 0
fi

# closure ARCH PKG... prints every package the list needs for ARCH,
# recursively (Depends and Pre-Depends), one per line. apt-cache names a
# package of the native architecture (or of all) plainly and a foreign
# one as name:arch, and with a foreign architecture known it lists a
# Multi-Arch dependency for both: kept are the names of ARCH, and plain
# names only where there is no name:ARCH (fetch checks every package's
# architecture afterwards).
closure() {
	local arch=$1
	shift
	local names=()
	for p in "$@"; do names+=("$p:$arch"); done
	apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
		--no-breaks --no-replaces --no-enhances "${names[@]}" 2>/dev/null |
		grep -v '^ ' | grep -v '^<' | sort -u |
		awk -v arch="$arch" -v native="$NATIVE" '
			{ n = split($0, f, ":"); base = f[1]; a = (n > 1) ? f[2] : native }
			a == arch { if (n > 1) want[base] = $0; else if (!(base in want)) want[base] = base }
			a == native && n == 1 && arch != native { plain[base] = 1 }
			END {
				for (b in plain) if (!(b in want)) want[b] = b
				for (b in want) print want[b]
			}' | sort
}

# foreign ARCH makes dpkg and apt know ARCH (root only).
foreign() {
	[ "$1" = "$NATIVE" ] && return 0
	dpkg --print-foreign-architectures | grep -qx "$1" && return 0
	[ "$(id -u)" = 0 ] || die "dpkg does not know architecture $1: run as root (dpkg --add-architecture $1 && apt-get update)"
	echo "image-debs: adding architecture $1 to dpkg"
	dpkg --add-architecture "$1" || die "dpkg --add-architecture $1 failed"
	apt-get update -qq >/dev/null || die "apt-get update (for $1) failed"
}

# fetch ARCH SUBDIR [--no-deps] PKG... downloads the packages (and their
# closure unless --no-deps) into the cache directory of ARCH.
fetch() {
	local arch=$1 dir
	dir="$(dir_of "$1")/$2"
	shift 2
	local want=()
	if [ "$1" = "--no-deps" ]; then
		shift
		for p in "$@"; do want+=("$p:$arch"); done
	else
		mapfile -t want < <(closure "$arch" "$@")
		if ((${#want[@]} < $#)); then
			[ "$(id -u)" = 0 ] || die "apt-cache knows none of $* for $arch; run apt-get update as root"
			apt-get update -qq >/dev/null || die "apt-get update failed"
			mapfile -t want < <(closure "$arch" "$@")
		fi
	fi
	(($# > 0 && ${#want[@]} >= $#)) || die "apt-cache does not know $* for $arch"
	complete() {
		for p in "${want[@]}"; do
			compgen -G "$dir/${p%%:*}_*.deb" >/dev/null || return 1
		done
	}
	complete && return 0
	mkdir -p "$dir"
	echo "image-debs: downloading ${want[*]} into $dir"
	(cd "$dir" && apt-get download "${want[@]}" >/dev/null 2>&1) || {
		[ "$(id -u)" = 0 ] && apt-get update -qq >/dev/null
		(cd "$dir" && apt-get download "${want[@]}" >/dev/null)
	} || die "apt-get download ${want[*]} failed"
	complete || die "some packages are still missing from $dir"
	for deb in "$dir"/*.deb; do
		case "$(dpkg-deb -f "$deb" Architecture)" in
		"$arch" | all) ;;
		*) die "$deb is not for $arch: remove it and look at the closure" ;;
		esac
	done
	printf '%s\n' "${want[@]}" >"$dir/.packages"
}

arches=("$@")
((${#arches[@]} > 0)) || arches=("$NATIVE")
for arch in "${arches[@]}"; do
	foreign "$arch"
	fetch "$arch" node "${NODE_PACKAGES[@]}"
	fetch "$arch" cni --no-deps "${CNI_PACKAGES[@]}"
	fetch "$arch" agnhost "${AGNHOST_PACKAGES[@]}"
done
