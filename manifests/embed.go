package manifests

import _ "embed"

// CoreDNS is coredns.yaml, the cluster DNS add-on the lab installs on real
// nodes (the e2e suites reach Services by name).
//
//go:embed coredns.yaml
var CoreDNS string

// AdminNetworkPolicyCRDs is network-policy-api-crds.yaml, the
// AdminNetworkPolicy and BaselineAdminNetworkPolicy CRDs
// calico-kube-controllers' adminnetworkpolicy controller reads (written
// by hack/network-policy-api-crds.sh from the module go.mod requires).
//
//go:embed network-policy-api-crds.yaml
var AdminNetworkPolicyCRDs string
