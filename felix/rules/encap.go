package rules

import (
	"fmt"

	"github.com/palisade-net/palisade/felix/calc"
)

// vxlanInput is the start of cali-INPUT while VXLAN is in use for the
// family (calc.Config VXLAN4/VXLAN6), as Calico's: VXLAN packets to a
// local address are accepted only from the addresses of known nodes
// (and externalNodesList, the all-vxlan-net set) and dropped from
// anyone else, so no host that merely reaches a node can inject packets
// into the overlay.
func vxlanInput(cfg *calc.Config, family int) []Rule {
	if family == 4 && !cfg.VXLAN4 || family == 6 && !cfg.VXLAN6 {
		return nil
	}
	udp := fmt.Sprintf("-p udp -m udp --dport %d", cfg.VXLANPort)
	return []Rule{
		{Match: udp + " -m set --match-set " + IPSetName(calc.IPSetAllVXLAN, family) + " src -m addrtype --dst-type LOCAL",
			Action: "ACCEPT", Comment: fmt.Sprintf("Allow IPv%d VXLAN packets from allowed hosts", family)},
		{Match: udp + " -m addrtype --dst-type LOCAL",
			Action: "DROP", Comment: fmt.Sprintf("Drop IPv%d VXLAN packets from non-allowed hosts", family)},
	}
}

// vxlanOutput is the rule of cali-OUTPUT, before host endpoint policy,
// that accepts the host's own VXLAN to the nodes (all-vxlan-net) while
// VXLAN is in use, as Calico's: a host endpoint policy cannot cut the
// overlay by mistake.
func vxlanOutput(cfg *calc.Config, family int) []Rule {
	if family == 4 && !cfg.VXLAN4 || family == 6 && !cfg.VXLAN6 {
		return nil
	}
	return []Rule{{Match: fmt.Sprintf("-p udp -m udp --dport %d -m addrtype --src-type LOCAL -m set --match-set %s dst", cfg.VXLANPort, IPSetName(calc.IPSetAllVXLAN, family)),
		Action: "ACCEPT", Comment: fmt.Sprintf("Allow IPv%d VXLAN packets to other allowed hosts", family)}}
}

// workloadEncapDrop drops VXLAN packets (UDP to vxlanPort) sent by
// workloads unless allowVXLANPacketsFromWorkloads, with or without VXLAN
// in use, as Calico: encapsulation would let a pod step around the
// egress policy of its own endpoint. Calico writes the rule into every
// cali-fw- chain; Palisade writes it once where workload traffic enters
// (cali-wl-to-host, and per workload interface prefix in cali-FORWARD,
// given by match), which drops the same packets and keeps the endpoint
// chains to the matches the nft fast path encodes. IP-in-IP is not
// dropped here: Palisade builds no IP-in-IP (allowIPIPPacketsFromWorkloads
// stays listed as not acted on).
func workloadEncapDrop(cfg *calc.Config, match string) []Rule {
	if cfg.AllowVXLANFromWorkloads {
		return nil
	}
	return []Rule{{Match: fmt.Sprintf("%s-p udp -m udp --dport %d", match, cfg.VXLANPort), Action: "DROP",
		Comment: "Drop VXLAN encapped packets originating in workloads"}}
}
