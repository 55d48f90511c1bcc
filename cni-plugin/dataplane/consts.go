package dataplane

import "net"

// Calico's fixed addresses: every workload's gateway is 169.254.1.1 (IPv4)
// or the link-local address the host veth derives from its MAC (IPv6); the
// host side answers for both.
var (
	HostMAC     = net.HardwareAddr{0xee, 0xee, 0xee, 0xee, 0xee, 0xee}
	GatewayIPv4 = net.IPv4(169, 254, 1, 1).To4()
	GatewayIPv6 = net.ParseIP("fe80::ecee:eeff:feee:eeee")
)
