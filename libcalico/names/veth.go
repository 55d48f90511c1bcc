package names

import (
	"crypto/sha1"
	"encoding/hex"
)

// VethPrefix starts the host-side name of every workload interface.
const VethPrefix = "cali"

// vethHashLen is how many hex digits of the hash follow the prefix; with the
// 4-byte prefix the name fills the kernel's 15-byte limit.
const vethHashLen = 11

// VethNameForWorkload is the host-side veth name of a Kubernetes pod:
// "cali" followed by the first 11 hex digits of sha1("<namespace>.<pod>").
func VethNameForWorkload(namespace, pod string) string {
	sum := sha1.Sum([]byte(namespace + "." + pod))
	return VethPrefix + hex.EncodeToString(sum[:])[:vethHashLen]
}

// VethNameForContainer is the host-side veth name of a workload that is not
// a Kubernetes pod: "cali" followed by up to 11 characters of its container
// ID.
func VethNameForContainer(containerID string) string {
	if len(containerID) > vethHashLen {
		containerID = containerID[:vethHashLen]
	}
	return VethPrefix + containerID
}
