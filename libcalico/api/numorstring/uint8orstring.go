package numorstring

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// NumOrStringType says which of the two forms a Uint8OrString holds.
type NumOrStringType int

// The two forms of a Uint8OrString.
const (
	NumOrStringNum NumOrStringType = iota
	NumOrStringString
)

// Uint8OrString holds either an 8-bit number or a string.
type Uint8OrString struct {
	Type   NumOrStringType
	NumVal uint8
	StrVal string
}

// UnmarshalJSON accepts a number 0-255 or a string. A string holding a
// number 0-255 is read as that number.
func (u *Uint8OrString) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		if n, err := strconv.ParseUint(s, 10, 8); err == nil {
			*u = Uint8OrString{Type: NumOrStringNum, NumVal: uint8(n)}
			return nil
		}
		*u = Uint8OrString{Type: NumOrStringString, StrVal: s}
		return nil
	}
	n, err := strconv.ParseUint(string(b), 10, 8)
	if err != nil {
		return fmt.Errorf("value %s: want a number 0-255 or a string", b)
	}
	*u = Uint8OrString{Type: NumOrStringNum, NumVal: uint8(n)}
	return nil
}

// MarshalJSON writes a number or a string.
func (u Uint8OrString) MarshalJSON() ([]byte, error) {
	if u.Type == NumOrStringNum {
		return []byte(strconv.Itoa(int(u.NumVal))), nil
	}
	return json.Marshal(u.StrVal)
}

// String renders the value.
func (u Uint8OrString) String() string {
	if u.Type == NumOrStringNum {
		return strconv.Itoa(int(u.NumVal))
	}
	return u.StrVal
}

// NumValue returns the number, or an error when the value is a string that
// is not a number.
func (u Uint8OrString) NumValue() (uint8, error) {
	if u.Type == NumOrStringNum {
		return u.NumVal, nil
	}
	n, err := strconv.ParseUint(u.StrVal, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number 0-255", u.StrVal)
	}
	return uint8(n), nil
}
