package felix

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/felix/calc"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestLocalConfigParsing: each FELIX_ variable, as Calico's felix names
// and parses it, sets the FelixConfiguration field (shown as the spec's
// JSON); names are any case; a value that does not parse is an error
// naming the variable.
func TestLocalConfigParsing(t *testing.T) {
	for _, c := range []struct {
		env  string
		want string // the spec's JSON, or "error: <part of it>"
	}{
		// The variables Calico's manifests set.
		{"FELIX_IPV6SUPPORT=false", `{"ipv6Support":false}`},
		{"FELIX_DEFAULTENDPOINTTOHOSTACTION=ACCEPT", `{"defaultEndpointToHostAction":"ACCEPT"}`},
		{"FELIX_LOGSEVERITYSCREEN=info", `{"logSeverityScreen":"info"}`},
		{"FELIX_HEALTHENABLED=true", `{"healthEnabled":true}`},
		{"felix_healthEnabled=yes", `{"healthEnabled":true}`},
		{"FELIX_HEALTHENABLED=T", `{"healthEnabled":true}`},
		{"FELIX_HEALTHENABLED=0", `{"healthEnabled":false}`},
		{"FELIX_HEALTHENABLED=maybe", "error: FELIX_HEALTHENABLED \"maybe\": want true or false"},
		{"FELIX_HEALTHPORT=9199", `{"healthPort":9199}`},
		{"FELIX_HEALTHPORT=x", "error: FELIX_HEALTHPORT"},
		{"FELIX_IPTABLESBACKEND=Legacy", `{"iptablesBackend":"Legacy"}`},
		// Durations are seconds, IptablesLockProbeIntervalMillis
		// milliseconds; the older names Calico keeps.
		{"FELIX_IPTABLESREFRESHINTERVAL=10", `{"iptablesRefreshInterval":"10s"}`},
		{"FELIX_ROUTEREFRESHINTERVAL=0.5", `{"routeRefreshInterval":"500ms"}`},
		{"FELIX_IPTABLESREFRESHINTERVAL=10s", "error: want a number of seconds"},
		{"FELIX_IPTABLESLOCKPROBEINTERVALMILLIS=50", `{"iptablesLockProbeInterval":"50ms"}`},
		{"FELIX_REPORTINGINTERVALSECS=0", `{"reportingInterval":"0s"}`},
		{"FELIX_IPINIPMTU=1440", `{"ipipMTU":1440}`},
		{"FELIX_IPINIPENABLED=false", `{"ipipEnabled":false}`},
		{"FELIX_IPTABLESMARKMASK=0xff000000", `{"iptablesMarkMask":4278190080}`},
		// Lists.
		{"FELIX_EXTERNALNODESCIDRLIST=10.0.0.0/8, 192.0.2.1", `{"externalNodesList":["10.0.0.0/8","192.0.2.1"]}`},
		{"FELIX_FAILSAFEINBOUNDHOSTPORTS=tcp:22,UDP:68,179,tcp:10.0.0.0/8:2379,udp:[fd00::/64]:53",
			`{"failsafeInboundHostPorts":[{"protocol":"tcp","port":22},{"protocol":"udp","port":68},{"protocol":"tcp","port":179},{"protocol":"tcp","port":2379,"net":"10.0.0.0/8"},{"protocol":"udp","port":53,"net":"fd00::/64"}]}`},
		{"FELIX_FAILSAFEINBOUNDHOSTPORTS=", `{"failsafeInboundHostPorts":[]}`},
		{"FELIX_FAILSAFEOUTBOUNDHOSTPORTS=icmp:1", "error: unknown protocol"},
		{"FELIX_NATPORTRANGE=32768:65535", `{"natPortRange":"32768:65535"}`},
		{"FELIX_NATPORTRANGE=http", "error: not a port range"},
		{"FELIX_KUBENODEPORTRANGES=30000:32767,40000", `{"kubeNodePortRanges":["30000:32767",40000]}`},
		{"FELIX_HEALTHTIMEOUTOVERRIDES=InternalDataplaneMainLoop=30s,CalculationGraph=1m", `{"healthTimeoutOverrides":[{"name":"InternalDataplaneMainLoop","timeout":"30s"},{"name":"CalculationGraph","timeout":"1m0s"}]}`},
		{"FELIX_ROUTETABLERANGE=1-250", `{"routeTableRange":{"min":1,"max":250}}`},
		{"FELIX_ROUTETABLERANGES=1-250,300-400", `{"routeTableRanges":[{"min":1,"max":250},{"min":300,"max":400}]}`},
		{"FELIX_BPFLOGFILTERS=all=tcp,eth0=udp", `{"bpfLogFilters":{"all":"tcp","eth0":"udp"}}`},
		{"FELIX_FEATUREDETECTOVERRIDE=SNATFullyRandom=true,MASQFullyRandom=false", `{"featureDetectOverride":"SNATFullyRandom=true,MASQFullyRandom=false"}`},
	} {
		t.Run(c.env, func(t *testing.T) {
			lc, err := ReadLocalConfig([]string{c.env, "PATH=/bin"}, "")
			if want, isErr := strings.CutPrefix(c.want, "error: "); isErr {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("error %v, want one containing %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// The want through the spec type, so fields the type always
			// prints (bpfLogLevel) print in both.
			var wantSpec v3.FelixConfigurationSpec
			if err := json.Unmarshal([]byte(c.want), &wantSpec); err != nil {
				t.Fatalf("want %s: %v", c.want, err)
			}
			b, _ := json.Marshal(lc.Spec)
			if w, _ := json.Marshal(wantSpec); string(b) != string(w) || !reflect.DeepEqual(lc.Spec, wantSpec) {
				t.Errorf("spec %s, want %s", b, w)
			}
			if len(lc.Set) != 1 || len(lc.Unknown) != 0 {
				t.Errorf("set %v unknown %v, want the variable set", lc.Set, lc.Unknown)
			}
		})
	}
}

// TestLocalConfigPrecedence: the environment over the config file (any
// section, any case) over node.<name> over default; FELIX_ variables and
// keys that name no parameter are reported, the rest of the environment
// is not felix's.
func TestLocalConfigPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "felix.cfg")
	if err := os.WriteFile(file, []byte("[global]\nLogSeverityScreen = Debug\nchaininsertmode = Append\nNoSuchKey = 1\n[other]\nInterfacePrefix = tap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"FELIX_LOGSEVERITYSCREEN=Warning", "FELIX_DATASTORETYPE=etcdv3", "HOME=/root", "FELIX_IPV6SUPPORT=false"}
	lc, err := ReadLocalConfig(env, file)
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	global := &v3.FelixConfigurationSpec{LogSeverityScreen: "Error", ChainInsertMode: "Insert", InterfacePrefix: "cali", IPv6Support: &yes, DefaultEndpointToHostAction: "Return"}
	node := &v3.FelixConfigurationSpec{LogSeverityScreen: "Info", DefaultEndpointToHostAction: "accept"}
	cfg := calc.MergeConfig(global, node, &lc.Spec)
	if cfg.LogSeverityScreen != "Warning" || cfg.ChainInsertMode != "Append" || strings.Join(cfg.InterfacePrefixes, ",") != "tap" ||
		cfg.IPv6Support || cfg.DefaultEndpointToHostAction != "Accept" {
		t.Errorf("merged: logSeverityScreen %q chainInsertMode %q prefixes %v ipv6 %v toHost %q; want Warning Append [tap] false Accept",
			cfg.LogSeverityScreen, cfg.ChainInsertMode, cfg.InterfacePrefixes, cfg.IPv6Support, cfg.DefaultEndpointToHostAction)
	}
	if got, want := strings.Join(lc.Unknown, " "), "FELIX_DATASTORETYPE "+file+": NoSuchKey"; got != want {
		t.Errorf("unknown %q, want %q", got, want)
	}
	if len(lc.Set) != 4 {
		t.Errorf("set %v, want 4", lc.Set)
	}
	// Every field is reachable by its Calico name.
	if n := len(params()); n != len(v3.NotActedOn[v3.KindFelixConfiguration])+len(v3.FelixConfigurationActedOn) {
		t.Errorf("%d parameters, want one per FelixConfiguration field", n)
	}
	if _, err := ReadLocalConfig(nil, filepath.Join(t.TempDir(), "absent.cfg")); err != nil {
		t.Errorf("absent file: %v", err)
	}
}

// TestEveryFieldFromEnvironment sets every FelixConfiguration field
// through its FELIX_ variable with a value of its kind.
func TestEveryFieldFromEnvironment(t *testing.T) {
	samples := map[string]string{"bool": "true", "int": "7", "uint32": "0xff000000", "string": "x", "Duration": "3",
		"[]string": "a,b", "Port": "1:2", "[]Port": "1,3:4", "[]ProtoPort": "tcp:22", "RouteTableRange": "1-2",
		"[]RouteTableIDRange": "1-2,5-6", "[]HealthTimeoutOverride": "a=1s", "map[string]string": "a=b", "IptablesBackend": "NFT",
		"BPFConntrackTimeouts": "creationGracePeriod=10s"}
	for name, p := range params() {
		f := reflect.TypeFor[v3.FelixConfigurationSpec]().Field(p.index).Type
		if f.Kind() == reflect.Pointer {
			f = f.Elem()
		}
		kind := regexp.MustCompile(`\w+\.`).ReplaceAllString(f.String(), "") // without package names
		raw, ok := samples[kind]
		if !ok {
			t.Errorf("%s: no sample for %s", p.json, kind)
			continue
		}
		lc, err := ReadLocalConfig([]string{"FELIX_" + strings.ToUpper(name) + "=" + raw}, "")
		if err != nil {
			t.Errorf("%s (%s=%s): %v", p.json, name, raw, err)
			continue
		}
		if reflect.ValueOf(lc.Spec).Field(p.index).IsZero() {
			t.Errorf("%s: FELIX_%s=%s left it unset", p.json, strings.ToUpper(name), raw)
		}
	}
}
