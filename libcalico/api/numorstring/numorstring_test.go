package numorstring

import (
	"encoding/json"
	"testing"
)

func TestASNumberJSON(t *testing.T) {
	cases := []struct {
		name, in string
		want     ASNumber
		wantErr  string
	}{
		{"number", `64512`, 64512, ""},
		{"plain string", `"65001"`, 65001, ""},
		{"dotted", `"64512.10"`, 64512<<16 | 10, ""},
		{"dotted zero high", `"0.65535"`, 65535, ""},
		{"max 32-bit", `4294967295`, 4294967295, ""},
		{"too big", `4294967296`, 0, `AS number 4294967296: want a number 0-4294967295 or dotted notation like "64512.10"`},
		{"negative", `-1`, 0, `AS number -1: want a number 0-4294967295 or dotted notation like "64512.10"`},
		{"dotted part too big", `"65536.1"`, 0, `AS number "65536.1": dotted notation needs two numbers 0-65535`},
		{"garbage", `"abc"`, 0, `AS number "abc": want a number 0-4294967295 or dotted notation like 64512.10`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var a ASNumber
			err := json.Unmarshal([]byte(c.in), &a)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Fatalf("error = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || a != c.want {
				t.Fatalf("got %d, %v; want %d", a, err, c.want)
			}
			out, _ := json.Marshal(a)
			if string(out) != a.String() {
				t.Fatalf("marshal = %s", out)
			}
		})
	}
}

func TestPortJSON(t *testing.T) {
	cases := []struct {
		name, in, out string
		want          Port
		wantErr       string
	}{
		{"number", `80`, `80`, SinglePort(80), ""},
		{"string number", `"443"`, `443`, SinglePort(443), ""},
		{"range", `"8080:8090"`, `"8080:8090"`, Port{MinPort: 8080, MaxPort: 8090}, ""},
		{"named", `"http"`, `"http"`, NamedPort("http"), ""},
		{"zero", `0`, `0`, SinglePort(0), ""},
		{"reversed range", `"90:80"`, "", Port{}, "port range 90:80: minimum is above maximum"},
		{"out of range", `70000`, "", Port{}, `port 70000: want a number 0-65535, a range like "8080:8090" or a port name`},
		{"out of range string", `"70000"`, "", Port{}, "port 70000 is out of range 0-65535"},
		{"bad range", `"1:x"`, "", Port{}, `port range "1:x": want two numbers 0-65535 like 8080:8090`},
		{"bad name", `"Bad_Name"`, "", Port{}, `port name "Bad_Name" is not valid: want at most 15 lower-case letters, digits and '-'`},
		{"name too long", `"abcdefghijklmnop"`, "", Port{}, `port name "abcdefghijklmnop" is not valid: want at most 15 lower-case letters, digits and '-'`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p Port
			err := json.Unmarshal([]byte(c.in), &p)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Fatalf("error = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || p != c.want {
				t.Fatalf("got %+v, %v; want %+v", p, err, c.want)
			}
			out, _ := json.Marshal(p)
			if string(out) != c.out {
				t.Fatalf("marshal = %s, want %s", out, c.out)
			}
		})
	}
}

func TestProtocol(t *testing.T) {
	cases := []struct {
		in         string
		num        uint8
		ports      bool
		wantErr    string
		marshalled string
	}{
		{`"TCP"`, 6, true, "", `"TCP"`},
		{`"udp"`, 17, true, "", `"udp"`},
		{`"ICMPv6"`, 58, false, "", `"ICMPv6"`},
		{`"SCTP"`, 132, true, "", `"SCTP"`},
		{`"UDPLite"`, 136, true, "", `"UDPLite"`},
		{`6`, 6, true, "", `6`},
		{`"17"`, 17, true, "", `17`},
		{`47`, 47, false, "", `47`},
		{`0`, 0, false, "protocol 0 is not valid, want 1-255", ""},
		{`"GRE"`, 0, false, `protocol "GRE" is not one of TCP, UDP, ICMP, ICMPv6, SCTP, UDPLite or a number 1-255`, ""},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			var p Protocol
			if err := json.Unmarshal([]byte(c.in), &p); err != nil {
				t.Fatalf("unmarshal: %v", err)
			}
			err := p.Validate()
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Fatalf("Validate = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			n, err := p.NumValue()
			if err != nil || n != c.num {
				t.Fatalf("NumValue = %d, %v; want %d", n, err, c.num)
			}
			if p.SupportsPorts() != c.ports {
				t.Fatalf("SupportsPorts = %v", p.SupportsPorts())
			}
			out, _ := json.Marshal(p)
			if string(out) != c.marshalled {
				t.Fatalf("marshal = %s, want %s", out, c.marshalled)
			}
		})
	}
	if got := ProtocolFromString("TCP"); got.StrVal != "TCP" || ProtocolFromInt(17).NumVal != 17 {
		t.Fatalf("constructors: %+v", got)
	}
}

func TestUint8OrString(t *testing.T) {
	var u Uint8OrString
	if err := json.Unmarshal([]byte(`300`), &u); err == nil {
		t.Fatal("300 accepted as uint8")
	}
	if err := json.Unmarshal([]byte(`"name"`), &u); err != nil || u.String() != "name" {
		t.Fatalf("got %+v %v", u, err)
	}
	if _, err := u.NumValue(); err == nil {
		t.Fatal("NumValue of a name succeeded")
	}
}
