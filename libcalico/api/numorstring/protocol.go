package numorstring

import (
	"fmt"
	"strings"
)

// Protocol names understood by Calico, in their canonical spelling.
const (
	ProtocolTCP     = "TCP"
	ProtocolUDP     = "UDP"
	ProtocolICMP    = "ICMP"
	ProtocolICMPv6  = "ICMPv6"
	ProtocolSCTP    = "SCTP"
	ProtocolUDPLite = "UDPLite"
)

// protocolNumbers maps the canonical names to their IANA numbers.
var protocolNumbers = map[string]uint8{
	ProtocolTCP: 6, ProtocolUDP: 17, ProtocolICMP: 1, ProtocolICMPv6: 58, ProtocolSCTP: 132, ProtocolUDPLite: 136,
}

// Protocol is an IP protocol: a name (TCP, UDP, ICMP, ICMPv6, SCTP, UDPLite;
// case-insensitive) or a number 1-255.
type Protocol Uint8OrString

// ProtocolFromInt returns the numeric protocol p.
func ProtocolFromInt(p uint8) Protocol { return Protocol{Type: NumOrStringNum, NumVal: p} }

// ProtocolFromString returns the named protocol s (or numeric when s is a
// number).
func ProtocolFromString(s string) Protocol {
	var u Uint8OrString
	_ = u.UnmarshalJSON([]byte(fmt.Sprintf("%q", s)))
	return Protocol(u)
}

// UnmarshalJSON accepts a number or a name.
func (p *Protocol) UnmarshalJSON(b []byte) error { return (*Uint8OrString)(p).UnmarshalJSON(b) }

// MarshalJSON writes a number or a name.
func (p Protocol) MarshalJSON() ([]byte, error) { return Uint8OrString(p).MarshalJSON() }

// String renders the protocol as written.
func (p Protocol) String() string { return Uint8OrString(p).String() }

// canonicalName returns the canonical spelling of a named protocol.
func (p Protocol) canonicalName() (string, bool) {
	for name := range protocolNumbers {
		if strings.EqualFold(name, p.StrVal) {
			return name, true
		}
	}
	return "", false
}

// Validate accepts the known names and the numbers 1-255.
func (p Protocol) Validate() error {
	if p.Type == NumOrStringNum {
		if p.NumVal == 0 {
			return fmt.Errorf("protocol 0 is not valid, want 1-255")
		}
		return nil
	}
	if _, ok := p.canonicalName(); !ok {
		return fmt.Errorf("protocol %q is not one of TCP, UDP, ICMP, ICMPv6, SCTP, UDPLite or a number 1-255", p.StrVal)
	}
	return nil
}

// NumValue returns the protocol's IANA number.
func (p Protocol) NumValue() (uint8, error) {
	if p.Type == NumOrStringNum {
		return p.NumVal, nil
	}
	if name, ok := p.canonicalName(); ok {
		return protocolNumbers[name], nil
	}
	return 0, fmt.Errorf("protocol %q is not known", p.StrVal)
}

// SupportsPorts reports whether rules may match ports of this protocol (TCP,
// UDP, SCTP and UDPLite, by name or number).
func (p Protocol) SupportsPorts() bool {
	n, err := p.NumValue()
	if err != nil {
		return false
	}
	switch n {
	case 6, 17, 132, 136:
		return true
	}
	return false
}
