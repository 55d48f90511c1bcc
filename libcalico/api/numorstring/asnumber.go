package numorstring

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// ASNumber is a 32-bit BGP autonomous system number. In YAML and JSON it is
// a number (64512) or a string, plain ("64512") or in dotted notation
// ("1.10", meaning 1*65536+10).
type ASNumber uint32

// ASNumberFromString parses a plain or dotted AS number.
func ASNumberFromString(s string) (ASNumber, error) {
	if hi, lo, dotted := strings.Cut(s, "."); dotted {
		h, err1 := strconv.ParseUint(hi, 10, 16)
		l, err2 := strconv.ParseUint(lo, 10, 16)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("AS number %q: dotted notation needs two numbers 0-65535", s)
		}
		return ASNumber(h<<16 | l), nil
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("AS number %q: want a number 0-4294967295 or dotted notation like 64512.10", s)
	}
	return ASNumber(n), nil
}

// String renders the number in plain notation.
func (a ASNumber) String() string { return strconv.FormatUint(uint64(a), 10) }

// UnmarshalJSON accepts a number or a plain or dotted string.
func (a *ASNumber) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		n, err := ASNumberFromString(s)
		if err != nil {
			return err
		}
		*a = n
		return nil
	}
	n, err := strconv.ParseUint(string(b), 10, 32)
	if err != nil {
		return fmt.Errorf("AS number %s: want a number 0-4294967295 or dotted notation like \"64512.10\"", b)
	}
	*a = ASNumber(n)
	return nil
}

// MarshalJSON writes the number as a JSON number.
func (a ASNumber) MarshalJSON() ([]byte, error) { return []byte(a.String()), nil }
