package numorstring

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Port is a single port, an inclusive range of ports, or a named port (a
// port declared by name on an endpoint). In YAML and JSON it is written as
// a number (80), a string number ("80"), a range ("8080:8090") or a name
// ("http").
type Port struct {
	MinPort  uint16
	MaxPort  uint16
	PortName string
}

// namedPortRE is the syntax of a port name (an IANA service name, as
// Kubernetes uses for container port names).
var namedPortRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$`) })

// SinglePort returns the port p.
func SinglePort(p uint16) Port { return Port{MinPort: p, MaxPort: p} }

// PortFromRange returns the inclusive range min..max.
func PortFromRange(minPort, maxPort uint16) (Port, error) {
	if minPort > maxPort {
		return Port{}, fmt.Errorf("port range %d:%d: minimum is above maximum", minPort, maxPort)
	}
	return Port{MinPort: minPort, MaxPort: maxPort}, nil
}

// NamedPort returns the named port name.
func NamedPort(name string) Port { return Port{PortName: name} }

// PortFromString parses "80", "80:90" or a port name.
func PortFromString(s string) (Port, error) {
	if lo, hi, isRange := strings.Cut(s, ":"); isRange {
		minPort, err1 := strconv.ParseUint(lo, 10, 16)
		maxPort, err2 := strconv.ParseUint(hi, 10, 16)
		if err1 != nil || err2 != nil {
			return Port{}, fmt.Errorf("port range %q: want two numbers 0-65535 like 8080:8090", s)
		}
		return PortFromRange(uint16(minPort), uint16(maxPort))
	}
	if n, err := strconv.ParseUint(s, 10, 16); err == nil {
		return SinglePort(uint16(n)), nil
	}
	if s != "" && s[0] >= '0' && s[0] <= '9' {
		if _, err := strconv.ParseUint(s, 10, 64); err == nil {
			return Port{}, fmt.Errorf("port %s is out of range 0-65535", s)
		}
	}
	p := NamedPort(s)
	if err := p.Validate(); err != nil {
		return Port{}, err
	}
	return p, nil
}

// Validate checks a range's order and a name's syntax.
func (p Port) Validate() error {
	if p.PortName != "" {
		if !namedPortRE().MatchString(p.PortName) {
			return fmt.Errorf("port name %q is not valid: want at most 15 lower-case letters, digits and '-'", p.PortName)
		}
		return nil
	}
	if p.MinPort > p.MaxPort {
		return fmt.Errorf("port range %d:%d: minimum is above maximum", p.MinPort, p.MaxPort)
	}
	return nil
}

// String renders the port as written in YAML.
func (p Port) String() string {
	switch {
	case p.PortName != "":
		return p.PortName
	case p.MinPort == p.MaxPort:
		return strconv.Itoa(int(p.MinPort))
	default:
		return fmt.Sprintf("%d:%d", p.MinPort, p.MaxPort)
	}
}

// UnmarshalJSON accepts a number, a range string or a name.
func (p *Port) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		parsed, err := PortFromString(s)
		if err != nil {
			return err
		}
		*p = parsed
		return nil
	}
	n, err := strconv.ParseUint(string(b), 10, 16)
	if err != nil {
		return fmt.Errorf("port %s: want a number 0-65535, a range like \"8080:8090\" or a port name", b)
	}
	*p = SinglePort(uint16(n))
	return nil
}

// MarshalJSON writes single ports as numbers and ranges and names as
// strings.
func (p Port) MarshalJSON() ([]byte, error) {
	if p.PortName == "" && p.MinPort == p.MaxPort {
		return []byte(strconv.Itoa(int(p.MinPort))), nil
	}
	return json.Marshal(p.String())
}
