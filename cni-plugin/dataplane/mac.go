package dataplane

import (
	"crypto/rand"
	"fmt"
	"net"
)

// NewContainerMAC returns a random MAC for a workload interface of the
// kind the kernel gives a new veth itself (unicast, locally
// administered), chosen before the veth exists so that the
// WorkloadEndpoint carrying it can be written while the veth is made.
func NewContainerMAC() (net.HardwareAddr, error) {
	mac := make(net.HardwareAddr, 6)
	if _, err := rand.Read(mac); err != nil {
		return nil, fmt.Errorf("choosing a workload MAC: %w", err)
	}
	mac[0] = mac[0]&^0x01 | 0x02 // unicast, locally administered
	return mac, nil
}
