#!/usr/bin/env bash
# Writes manifests/network-policy-api-crds.yaml: the AdminNetworkPolicy
# and BaselineAdminNetworkPolicy CRDs (experimental channel, which adds
# namedPort, egress nodes and domainNames to the standard one) of the
# sigs.k8s.io/network-policy-api module at the version go.mod requires,
# taken from the Go module cache. Run it after changing that version; the
# manifests tests check the file matches.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/network-policy-api)
version=$(go list -m -f '{{.Version}}' sigs.k8s.io/network-policy-api)
[ -n "$dir" ] || { go mod download sigs.k8s.io/network-policy-api; dir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/network-policy-api); }
out=manifests/network-policy-api-crds.yaml
{
	echo "# AdminNetworkPolicy and BaselineAdminNetworkPolicy CRDs, experimental"
	echo "# channel, of sigs.k8s.io/network-policy-api $version (written by"
	echo "# hack/network-policy-api-crds.sh; do not edit)."
	for f in policy.networking.k8s.io_adminnetworkpolicies.yaml policy.networking.k8s.io_baselineadminnetworkpolicies.yaml; do
		echo "---"
		sed '/^---$/d' "$dir/config/crd/experimental/$f"
	done
} >"$out"
echo "wrote $out ($version)"
