#!/usr/bin/env bash
# Downloads the Debian packages of the userspace felix needs in the
# calico-node image (iptables, both backends, and ipset, with everything
# they depend on) into a cache outside the checkout, with apt-get download
# and nothing else. Idempotent: a second call finds them and returns at
# once. Prints the directory with --print-dir.
set -euo pipefail

PACKAGES=(iptables ipset)
CACHE_ROOT="${PALISADE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/palisade}"
DIR="$CACHE_ROOT/image-debs-$(dpkg --print-architecture)"

die() { echo "image-debs: $*" >&2; exit 1; }

if [ "${1:-}" = "--print-dir" ]; then
	echo "$DIR"
	exit 0
fi

# Every package the list needs, recursively (Depends and Pre-Depends).
closure() {
	apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
		--no-breaks --no-replaces --no-enhances "${PACKAGES[@]}" 2>/dev/null |
		grep -v '^ ' | grep -v '^<' | sort -u
}
mapfile -t want < <(closure)
if ((${#want[@]} < ${#PACKAGES[@]})); then
	[ "$(id -u)" = 0 ] || die "apt-cache knows none of ${PACKAGES[*]}; run apt-get update as root"
	apt-get update -qq >/dev/null || die "apt-get update failed"
	mapfile -t want < <(closure)
fi
((${#want[@]} >= ${#PACKAGES[@]})) || die "apt-cache does not know ${PACKAGES[*]}"

complete() {
	for p in "${want[@]}"; do
		compgen -G "$DIR/${p}_*.deb" >/dev/null || return 1
	done
}
complete && exit 0

mkdir -p "$DIR"
echo "image-debs: downloading ${want[*]} into $DIR"
(cd "$DIR" && apt-get download "${want[@]}" >/dev/null 2>&1) || {
	[ "$(id -u)" = 0 ] && apt-get update -qq >/dev/null
	(cd "$DIR" && apt-get download "${want[@]}" >/dev/null)
} || die "apt-get download ${want[*]} failed"
complete || die "some packages are still missing from $DIR"
printf '%s\n' "${want[@]}" >"$DIR/.packages"
