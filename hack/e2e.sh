#!/usr/bin/env bash
# Runs Kubernetes' own e2e suites (e2e.test v1.37.2, built by
# hack/kube-tools.sh) against a lab of real nodes (`lab up --kubelet`):
# builds what is missing, brings up its own lab, runs the suites with
# ginkgo, removes the lab and prints Ginkgo's summary last.
#
#   hack/e2e.sh                       the whole set: sig-network's NetworkPolicy
#                                     suites and its conformance tests
#   hack/e2e.sh --set netpol          only the NetworkPolicy suites
#   hack/e2e.sh --set conformance     only [sig-network] ... [Conformance]
#   hack/e2e.sh --focus REGEX --skip REGEX --bpf --nodes N --procs P
#   hack/e2e.sh --set conformance --bpf              eBPF, no kube-proxy
#   hack/e2e.sh --set conformance --bpf --kube-proxy  eBPF beside kube-proxy
#
# --focus replaces the set's focus; --skip adds to the environment's
# skips below. With --bpf the lab runs no kube-proxy (felix load-balances
# Services) unless --kube-proxy. docs/conformance.md has the results and
# the reasons.
set -euo pipefail
cd "$(dirname "$0")/.."

set_name=all
focus=""
extra_skip=""
bpf=""
kube_proxy=""
nodes=3
procs=4
while (($#)); do
	case "$1" in
	--set) set_name="$2"; shift 2 ;;
	--focus) focus="$2"; shift 2 ;;
	--skip) extra_skip="$2"; shift 2 ;;
	--bpf) bpf="--bpf"; shift ;;
	--kube-proxy) kube_proxy="--kube-proxy=true"; shift ;;
	--nodes) nodes="$2"; shift 2 ;;
	--procs) procs="$2"; shift 2 ;;
	-h | --help) sed -n '2,19p' "$0"; exit 0 ;;
	*) echo "e2e: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done

netpol_focus='\[sig-network\] (Netpol|NetworkPolicy)'
conformance_focus='\[sig-network\].*\[Conformance\]'
if [ -z "$focus" ]; then
	case "$set_name" in
	all) focus="($netpol_focus)|($conformance_focus)" ;;
	netpol) focus="$netpol_focus" ;;
	conformance) focus="$conformance_focus" ;;
	*) echo "e2e: --set $set_name: want all, netpol or conformance" >&2; exit 2 ;;
	esac
fi

# What this environment cannot run, each with its reason (also in
# docs/conformance.md). Nothing here is a Palisade failure.
skips=(
	# The kernel has no SCTP sockets (netfilter's SCTP match works, but
	# agnhost cannot open an SCTP socket to probe with). The NetworkPolicy
	# specs that only write SCTP policies and probe with TCP do run.
	'\[Feature:SCTPConnectivity\]'
	# The DNS specs probe from two images, agnhost and glibc-dns-testing
	# 2.1.1, and only agnhost is built here (no registry to pull the
	# other from). The lab does run CoreDNS: Services are reached by name.
	'\[sig-network\] DNS'
	# No address outside the lab may be reached.
	'Internet'
	# The lab's nodes are IPv4 only.
	'IPv6' '[Dd]ual[Ss]tack'
	# Disruptive and slow tests restart components or take many minutes
	# each; the lab tests cover restarts (lab/kubelet_test.go).
	'\[Disruptive\]' '\[Slow\]'
)
skip=$(IFS='|'; echo "${skips[*]}")
[ -n "$extra_skip" ] && skip="$skip|$extra_skip"

make -s build kube-tools >/dev/null
[ -f images/calico-node.tar ] || make -s images >/dev/null
KUBE_BIN=$(hack/kube-tools.sh --print-dir)

name="e2e$$"
out=$(mktemp -d /tmp/palisade-e2e.XXXXXX)
down() { bin/lab down --name "$name" >"$out/down.log" 2>&1 || cat "$out/down.log" >&2; }
trap down EXIT
echo "e2e: lab up --kubelet --nodes $nodes $bpf $kube_proxy (lab $name; logs in $out)"
bin/lab up --name "$name" --kubelet --nodes "$nodes" $bpf $kube_proxy >"$out/up.log" 2>&1 || {
	tail -40 "$out/up.log" >&2
	exit 1
}
cp "/run/palisade-lab/$name/kube/kubeconfig" "$out/kubeconfig"

echo "e2e: focus $focus"
echo "e2e: skip $skip"
rc=0
# e2e.test reaches the API server from the control plane's namespace.
nsenter --net="/run/netns/pl-$name-kube" "$KUBE_BIN/ginkgo" --procs="$procs" --no-color \
	--focus="$focus" --skip="$skip" --output-dir="$out" --junit-report=junit.xml \
	"$KUBE_BIN/e2e.test" -- --kubeconfig="$out/kubeconfig" --provider=skeleton \
	--kubectl-path="$KUBE_BIN/kubectl" --report-dir="$out" >"$out/e2e.log" 2>&1 || rc=$?
grep -E '^\[FAIL\]|^  \[FAIL\]' "$out/e2e.log" | sort -u || true
trap - EXIT
down
echo "e2e: full output in $out/e2e.log"
# Ginkgo's own summary, last.
grep -E '^Ran [0-9]+ of [0-9]+ Specs|^(SUCCESS|FAIL)!' "$out/e2e.log" | tail -2
exit "$rc"
