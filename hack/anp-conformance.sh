#!/usr/bin/env bash
# Runs the network-policy-api conformance suite (sigs.k8s.io/network-policy-api
# conformance, the version go.mod requires) against a lab of real nodes
# (`lab up --kubelet`): builds the suite's test binary in a helper module
# of its own in the cache (never the project's go.mod), brings up its own
# lab, gives the nodes the agnhost tag the suite's manifests name (only
# local images exist: the agnhost make images builds), runs the Core
# (AdminNetworkPolicy, BaselineAdminNetworkPolicy) and the Extended
# features named below, removes the lab and prints the summary last.
#
#   hack/anp-conformance.sh [--bpf] [--run REGEX] [--features LIST]
#   hack/anp-conformance.sh --build-only
#
# docs/conformance.md has the results.
set -euo pipefail
cd "$(dirname "$0")/.."

bpf=""
run=""
build_only=""
# The Extended features Palisade implements (named ports; egress to nodes).
features="AdminNetworkPolicy,BaselineAdminNetworkPolicy,AdminNetworkPolicyNamedPorts,AdminNetworkPolicyEgressNodePeers,BaselineAdminNetworkPolicyNamedPorts,BaselineAdminNetworkPolicyEgressNodePeers"
while (($#)); do
	case "$1" in
	--bpf) bpf="--bpf"; shift ;;
	--run) run="$2"; shift 2 ;;
	--features) features="$2"; shift 2 ;;
	--build-only) build_only=1; shift ;;
	-h | --help) sed -n '2,16p' "$0"; exit 0 ;;
	*) echo "anp-conformance: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done

version=$(go list -m -f '{{.Version}}' sigs.k8s.io/network-policy-api)
CACHE_ROOT="${PALISADE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/palisade}"
dir="$CACHE_ROOT/network-policy-api-$version"
suite="$dir/conformance.test"
# The changes made to the suite's copy (below); a cached binary built
# with other changes is rebuilt.
patch_rev=2
if [ ! -x "$suite" ] || [ "$(cat "$dir/.patch" 2>/dev/null)" != "$patch_rev" ]; then
	mkdir -p "$dir/mod"
	src=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json sigs.k8s.io/network-policy-api@"$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	[ -d "$src" ] || { echo "anp-conformance: network-policy-api $version not in the module cache" >&2; exit 1; }
	# The suite's own copy, changed only where this environment needs it.
	# The kernel here has no SCTP sockets, so:
	#  - the StatefulSets' SCTP servers (agnhost porter
	#    SERVE_SCTP_PORT_*) could never start and no pod would be Ready:
	#    those containers are left out;
	#  - the four tests whose every probe is SCTP (ShortName ending in
	#    SCTP) are skipped, with t.Skip and the reason, before their
	#    manifests are applied;
	#  - in the other tests, each SCTP probe (PokeServer with protocol
	#    sctp) is skipped and logged as "SKIPPED SCTP probe", so their TCP
	#    and UDP probes still decide the result. Nothing else is skipped.
	# And the agnhost image built here has /bin/sh, not /bin/bash, which
	# the servers' commands name.
	rm -rf "$dir/src" && cp -r "$src" "$dir/src" && chmod -R u+w "$dir/src"
	python3 - "$dir/src/conformance" <<'PY'
import sys, yaml
root = sys.argv[1]
path = root + "/base/manifests.yaml"
docs = list(yaml.safe_load_all(open(path)))
for d in docs:
    if d and d.get("kind") == "StatefulSet":
        cs = d["spec"]["template"]["spec"]["containers"]
        cs = [c for c in cs if not any(e.get("name", "").startswith("SERVE_SCTP_PORT") for e in c.get("env", []))]
        for c in cs:
            if c.get("command", [None])[0] == "/bin/bash":
                c["command"][0] = "/bin/sh"
        d["spec"]["template"]["spec"]["containers"] = cs
yaml.safe_dump_all(docs, open(path, "w"), sort_keys=False)

def patch(rel, anchor, add):
    f = root + "/" + rel
    text = open(f).read()
    if text.count(anchor) != 1:
        sys.exit("anp-conformance: %s: expected one %r to patch" % (rel, anchor))
    open(f, "w").write(text.replace(anchor, anchor + add))

patch("utils/suite/suite.go", "\t// check that the test should not be skipped\n",
      "\tif strings.HasSuffix(test.ShortName, \"SCTP\") {\n"
      "\t\tt.Skipf(\"Skipping %s: every probe is SCTP and this kernel has no SCTP sockets\", test.ShortName)\n"
      "\t}\n")
patch("utils/kubernetes/helper.go",
      "func PokeServer(t *testing.T, client k8sclient.Interface, kubeConfig *rest.Config, clientNamespace, clientPod, protocol, targetHost string, targetPort int32, timeout time.Duration, shouldConnect bool) bool {\n\tt.Helper()\n",
      "\tif protocol == \"sctp\" {\n"
      "\t\tt.Logf(\"SKIPPED SCTP probe from %s/%s to %s port %d (want connected: %v): this kernel has no SCTP sockets\", clientNamespace, clientPod, targetHost, targetPort, shouldConnect)\n"
      "\t\treturn true\n"
      "\t}\n")
PY
	(
		cd "$dir/mod"
		cat >go.mod <<MOD
module palisade.local/npapi-conformance

go 1.26.8

require sigs.k8s.io/network-policy-api $version

replace sigs.k8s.io/network-policy-api => ../src
MOD
		cat >tools.go <<'GO'
//go:build tools

package tools

import _ "sigs.k8s.io/network-policy-api/conformance"
GO
		echo "anp-conformance: building the suite of network-policy-api $version in $dir"
		GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true
		GOFLAGS=-mod=mod CGO_ENABLED=0 go test -c -o "$suite.tmp" sigs.k8s.io/network-policy-api/conformance
		mv "$suite.tmp" "$suite"
		echo "$patch_rev" >"$dir/.patch"
	)
fi
[ -n "$build_only" ] && { echo "$suite"; exit 0; }

make -s build kube-tools >/dev/null
[ -f images/calico-node.tar ] || make -s images >/dev/null
agnhost_src=$(sed -n 's/^\tAgnhostRef = "\(.*\)"$/\1/p' hack/images/main.go)
agnhost_want=$(grep -ho 'registry.k8s.io/e2e-test-images/agnhost:[0-9.]*' "$(go list -m -f '{{.Dir}}' sigs.k8s.io/network-policy-api)"/conformance/base/*.yaml | sort -u | head -1)

name="anp$$"
out=$(mktemp -d /tmp/palisade-anp-conformance.XXXXXX)
down() { bin/lab down --name "$name" >"$out/down.log" 2>&1 || cat "$out/down.log" >&2; }
trap down EXIT
echo "anp-conformance: lab up --kubelet $bpf (lab $name; logs in $out)"
bin/lab up --name "$name" --kubelet --nodes 3 $bpf >"$out/up.log" 2>&1 || {
	tail -40 "$out/up.log" >&2
	exit 1
}
cp "/run/palisade-lab/$name/kube/kubeconfig" "$out/kubeconfig"
# The suite's manifests name agnhost $agnhost_want; the nodes hold the one
# make images built ($agnhost_src), tagged as both.
for mnt in "/run/palisade-lab/$name/mntns/"*; do
	node=$(basename "$mnt")
	nsenter --net="/run/netns/pl-$name-$node" --mount="$mnt" -- ctr -n k8s.io images tag --force "$agnhost_src" "$agnhost_want" >/dev/null
done
echo "anp-conformance: features $features"
rc=0
# The suite finds the API server through KUBECONFIG (controller-runtime's
# config), from the control plane's namespace.
KUBECONFIG="$out/kubeconfig" nsenter --net="/run/netns/pl-$name-kube" "$suite" -test.v -test.timeout=60m \
	-test.run "${run:-^TestConformance\$}" --supported-features="$features" \
	--debug >"$out/conformance.log" 2>&1 || rc=$?
trap - EXIT
down
echo "anp-conformance: full output in $out/conformance.log"
# One line a test: its result, and how many SCTP probes it skipped.
awk '
	/^=== (RUN|NAME|CONT)/ { split($3, p, "/"); cur = p[2] }
	/SKIPPED SCTP probe/ { sctp[cur]++ }
	/^    --- (PASS|FAIL|SKIP): TestConformance\/[^\/ ]+ / {
		split($3, p, "/"); res[p[2]] = $2; sub(":", "", res[p[2]]); order[++n] = p[2]
	}
	END {
		for (i = 1; i <= n; i++) {
			t = order[i]; c[res[t]]++
			printf "%-4s %-55s%s\n", res[t], t, (sctp[t] ? sprintf(" (%d SCTP probes skipped)", sctp[t]) : "")
		}
		printf "tests: %d pass, %d fail, %d skip\n", c["PASS"], c["FAIL"], c["SKIP"]
	}' "$out/conformance.log"
grep -E '^(PASS|FAIL|ok)' "$out/conformance.log" | tail -2
exit "$rc"
