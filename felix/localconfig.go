package felix

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/ini.v1"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// DefaultConfigFile is Calico felix's configuration file.
const DefaultConfigFile = "/etc/calico/felix.cfg"

// LocalConfig is the configuration felix takes from its host rather than
// the datastore, as Calico's felix: FELIX_<NAME> environment variables
// (any case) over the configuration file's keys (INI, any section, any
// case), both over FelixConfiguration node.<name> and default. NAME is
// Calico's name of the parameter: the FelixConfiguration field's Go name
// (FELIX_LOGSEVERITYSCREEN, FELIX_DEFAULTENDPOINTTOHOSTACTION) or the
// older name Calico keeps for a few (FELIX_IPINIPMTU, FELIX_REPORTINGINTERVALSECS,
// FELIX_EXTERNALNODESCIDRLIST, …). Values are written as Calico writes
// them: durations as seconds (milliseconds for IptablesLockProbeIntervalMillis),
// lists comma-separated, failsafe ports as tcp:22,udp:[fd00::/64]:53.
type LocalConfig struct {
	// Spec holds the fields set; the graph lays it over the datastore's.
	Spec v3.FelixConfigurationSpec
	// Set names the parameters set, as "FELIX_NAME" or "<file>: name".
	Set []string
	// Unknown names the FELIX_ variables and file keys that are no
	// FelixConfiguration parameter: Calico's felix ignores them too.
	Unknown []string
}

// calicoNames are Calico's parameter names that are not the Go name of
// the FelixConfiguration field (its confignamev1 tags), by JSON name.
var calicoNames = map[string]string{
	"ipipEnabled":                    "IpInIpEnabled",
	"ipipMTU":                        "IpInIpMtu",
	"iptablesPostWriteCheckInterval": "IptablesPostWriteCheckIntervalSecs",
	"iptablesLockTimeout":            "IptablesLockTimeoutSecs",
	"iptablesLockProbeInterval":      "IptablesLockProbeIntervalMillis",
	"netlinkTimeout":                 "NetlinkTimeoutSecs",
	"reportingInterval":              "ReportingIntervalSecs",
	"reportingTTL":                   "ReportingTTLSecs",
	"endpointReportingDelay":         "EndpointReportingDelaySecs",
	"usageReportingInitialDelay":     "UsageReportingInitialDelaySecs",
	"usageReportingInterval":         "UsageReportingIntervalSecs",
}

// param is one FelixConfiguration field as a local parameter.
type param struct {
	name  string // Calico's name
	index int    // field index in the spec
	json  string
}

// params maps lower-case Calico names to the spec's fields.
func params() map[string]param {
	out := map[string]param{}
	t := reflect.TypeFor[v3.FelixConfigurationSpec]()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		j, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if j == "" || j == "-" {
			continue
		}
		name := f.Name
		if n, ok := calicoNames[j]; ok {
			name = n
		}
		out[strings.ToLower(name)] = param{name: name, index: i, json: j}
	}
	return out
}

// ReadLocalConfig reads environ (os.Environ's form) and the configuration
// file (absent is no error). A value that does not parse is an error
// naming the variable or key, as Calico's felix refuses to start on one.
func ReadLocalConfig(environ []string, file string) (*LocalConfig, error) {
	lc := &LocalConfig{}
	ps := params()
	type raw struct{ from, name, value string }
	byParam := map[string]raw{}
	if file != "" {
		data, err := os.ReadFile(file)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("felix config file %s: %w", file, err)
		default:
			f, err := ini.Load(data)
			if err != nil {
				return nil, fmt.Errorf("felix config file %s: %w", file, err)
			}
			for _, s := range f.Sections() {
				for _, k := range s.Keys() {
					byParam[strings.ToLower(k.Name())] = raw{file + ": " + k.Name(), k.Name(), k.Value()}
				}
			}
		}
	}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || len(k) < 6 || !strings.EqualFold(k[:6], "FELIX_") {
			continue
		}
		byParam[strings.ToLower(k[6:])] = raw{k, k[6:], v}
	}
	for _, lname := range slices.Sorted(func(yield func(string) bool) {
		for k := range byParam {
			if !yield(k) {
				return
			}
		}
	}) {
		r := byParam[lname]
		p, ok := ps[lname]
		if !ok {
			lc.Unknown = append(lc.Unknown, r.from)
			continue
		}
		field := reflect.ValueOf(&lc.Spec).Elem().Field(p.index)
		if err := setParam(field, p, r.value); err != nil {
			return nil, fmt.Errorf("%s %q: %w", r.from, r.value, err)
		}
		lc.Set = append(lc.Set, r.from)
	}
	return lc, nil
}

var (
	durationType = reflect.TypeFor[v3.Duration]()
	portType     = reflect.TypeFor[numorstring.Port]()
	protoPorts   = reflect.TypeFor[[]v3.ProtoPort]()
)

// setParam parses raw into field as Calico's felix parses the parameter.
func setParam(field reflect.Value, p param, raw string) error {
	t := field.Type()
	elem := t
	if t.Kind() == reflect.Pointer {
		elem = t.Elem()
	}
	var v reflect.Value
	switch {
	case elem == durationType:
		n, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return errors.New("want a number of seconds")
		}
		unit := time.Second
		if strings.HasSuffix(p.name, "Millis") {
			unit = time.Millisecond
		}
		v = reflect.ValueOf(v3.Duration{Duration: time.Duration(n * float64(unit))})
	case elem == portType:
		port, err := portRange(raw)
		if err != nil {
			return err
		}
		v = reflect.ValueOf(port)
	case elem == protoPorts:
		pp, err := parseProtoPorts(raw)
		if err != nil {
			return err
		}
		v = reflect.ValueOf(pp)
	case elem.Kind() == reflect.Bool:
		switch strings.ToLower(raw) {
		case "true", "1", "yes", "y", "t":
			v = reflect.ValueOf(true)
		case "false", "0", "no", "n", "f":
			v = reflect.ValueOf(false)
		default:
			return errors.New("want true or false")
		}
	case elem.Kind() == reflect.Int:
		n, err := strconv.ParseInt(raw, 0, 64)
		if err != nil {
			return errors.New("want an integer")
		}
		v = reflect.ValueOf(int(n))
	case elem.Kind() == reflect.Uint32:
		n, err := strconv.ParseUint(raw, 0, 32)
		if err != nil {
			return errors.New("want a 32-bit number")
		}
		v = reflect.ValueOf(uint32(n))
	case elem.Kind() == reflect.String:
		v = reflect.ValueOf(raw).Convert(elem)
	case elem.Kind() == reflect.Slice && elem.Elem().Kind() == reflect.String:
		v = reflect.ValueOf(splitList(raw))
	case elem.Kind() == reflect.Slice && elem.Elem() == portType:
		var out []numorstring.Port
		for _, s := range strings.Split(raw, ",") {
			port, err := portRange(s)
			if err != nil {
				return err
			}
			out = append(out, port)
		}
		v = reflect.ValueOf(out)
	default:
		// Lists of ranges, key=value lists and objects: as Calico's
		// key=value (name=30s,…) and min-max (1-250,…) forms, through
		// the field's JSON.
		b, err := localJSON(elem, raw)
		if err != nil {
			return err
		}
		ptr := reflect.New(elem)
		if err := json.Unmarshal(b, ptr.Interface()); err != nil {
			return fmt.Errorf("not a %s: %w", p.json, err)
		}
		v = ptr.Elem()
	}
	if t.Kind() == reflect.Pointer {
		ptr := reflect.New(elem)
		ptr.Elem().Set(v)
		field.Set(ptr)
		return nil
	}
	field.Set(v)
	return nil
}

// portRange is a port or min:max range, never a name.
func portRange(s string) (numorstring.Port, error) {
	p, err := numorstring.PortFromString(strings.TrimSpace(s))
	if err != nil || p.PortName != "" {
		return numorstring.Port{}, fmt.Errorf("%q is not a port range", s)
	}
	return p, nil
}

// parseProtoPorts reads Calico's failsafe port list: port, proto:port or
// proto:net:port, an IPv6 net in brackets; protocols tcp and udp.
func parseProtoPorts(raw string) ([]v3.ProtoPort, error) {
	out := []v3.ProtoPort{}
	for _, s := range strings.Split(raw, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		net := ""
		if i, j := strings.Index(s, "["), strings.Index(s, "]:"); i >= 0 && j > i {
			net, s = s[i+1:j], s[:i]+s[j+2:]
		}
		parts := strings.Split(s, ":")
		proto, port := "tcp", parts[len(parts)-1]
		switch len(parts) {
		case 1:
		case 2:
			proto = strings.ToLower(parts[0])
		case 3:
			proto, net = strings.ToLower(parts[0]), parts[1]
		default:
			return nil, errors.New("want <protocol>:<net>:<port>, <protocol>:<port> or <port>")
		}
		if proto != "tcp" && proto != "udp" {
			return nil, fmt.Errorf("unknown protocol %q", proto)
		}
		n, err := strconv.Atoi(port)
		if err != nil || n < 0 || n > 65535 {
			return nil, fmt.Errorf("port %q: want 0-65535", port)
		}
		out = append(out, v3.ProtoPort{Protocol: proto, Port: uint16(n), Net: net})
	}
	return out, nil
}

// localJSON turns Calico's text forms into the JSON of a field: key=value
// lists into an object (keys matched to the JSON names of a struct's
// fields in any case) or into a list of {name, timeout} overrides,
// min-max ranges into {min, max} (a list of them for a slice). Text that
// is already JSON is taken as it is.
func localJSON(t reflect.Type, raw string) ([]byte, error) {
	if s := strings.TrimSpace(raw); strings.HasPrefix(s, "{") || strings.HasPrefix(s, "[") {
		return []byte(s), nil
	}
	ranges := func(s string) ([]map[string]int, error) {
		var out []map[string]int
		for _, r := range strings.Split(s, ",") {
			lo, hi, ok := strings.Cut(strings.TrimSpace(r), "-")
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if !ok || err1 != nil || err2 != nil {
				return nil, fmt.Errorf("%q: want min-max", r)
			}
			out = append(out, map[string]int{"min": a, "max": b})
		}
		return out, nil
	}
	pairs := func() ([][2]string, error) {
		var out [][2]string
		for _, kv := range strings.Split(raw, ",") {
			if kv = strings.TrimSpace(kv); kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, fmt.Errorf("%q: want key=value", kv)
			}
			out = append(out, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
		}
		return out, nil
	}
	switch {
	case t.Kind() == reflect.Struct && t.NumField() == 2 && t.Field(0).Name == "Min":
		r, err := ranges(raw)
		if err != nil || len(r) != 1 {
			return nil, fmt.Errorf("want min-max: %w", err)
		}
		return json.Marshal(r[0])
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct && t.Elem().NumField() == 2 && t.Elem().Field(0).Name == "Min":
		r, err := ranges(raw)
		if err != nil {
			return nil, err
		}
		return json.Marshal(r)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		// healthTimeoutOverrides: name=duration,…
		ps, err := pairs()
		if err != nil {
			return nil, err
		}
		var out []map[string]string
		for _, p := range ps {
			out = append(out, map[string]string{"name": p[0], "timeout": p[1]})
		}
		return json.Marshal(out)
	case t.Kind() == reflect.Map:
		ps, err := pairs()
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, p := range ps {
			out[p[0]] = p[1]
		}
		return json.Marshal(out)
	case t.Kind() == reflect.Struct:
		ps, err := pairs()
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, p := range ps {
			name := p[0]
			for i := 0; i < t.NumField(); i++ {
				if j, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); strings.EqualFold(j, name) {
					name = j
				}
			}
			out[name] = p[1]
		}
		return json.Marshal(out)
	}
	return nil, fmt.Errorf("cannot be read from text")
}

func splitList(s string) []string {
	out := []string{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
