package etcdpki

import (
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// JoinFileName is the join file's name in the embedded etcd's data
// directory.
const JoinFileName = "join.cfg"

// joinHeader opens every join file.
const joinHeader = `# How to reach this etcd: a calicoctl configuration (calicoctl -c FILE,
# calico-node --config FILE) with the endpoints, the CA and a client
# certificate. It grants full access to the datastore: keep it mode 0600.
`

// WriteJoin writes the join file at path: a CalicoAPIConfig naming
// endpoints and, unless files is nil (plain HTTP), carrying the CA and
// the client certificate and key inline. It is replaced atomically, mode
// 0600.
func WriteJoin(path string, endpoints []string, files *Files) error {
	cfg := v3.CalicoAPIConfig{
		TypeMeta: v3.TypeMeta{Kind: v3.KindCalicoAPIConfig, APIVersion: v3.APIVersion},
		Spec:     v3.CalicoAPIConfigSpec{DatastoreType: v3.DatastoreEtcdV3, EtcdEndpoints: strings.Join(endpoints, ",")},
	}
	if files != nil {
		for _, f := range []struct {
			path string
			into *string
		}{{files.CA, &cfg.Spec.EtcdCACert}, {files.ClientCert, &cfg.Spec.EtcdCert}, {files.ClientKey, &cfg.Spec.EtcdKey}} {
			b, err := os.ReadFile(f.path)
			if err != nil {
				return fmt.Errorf("join file %s: %w", path, err)
			}
			*f.into = string(b)
		}
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("join file %s: %w", path, err)
	}
	return writeFile(path, append([]byte(joinHeader), b...))
}

// WriteClientFiles writes the CA, client certificate and key carried by a
// join file's configuration as PEM files in dir (ca.pem, client.pem,
// client-key.pem, mode 0600), for clients that take only files, such as
// the CNI plugins' etcd_ca_cert_file, etcd_cert_file and etcd_key_file.
func WriteClientFiles(dir string, spec v3.CalicoAPIConfigSpec) (Files, error) {
	f := In(dir)
	if spec.EtcdCACert == "" || spec.EtcdCert == "" || spec.EtcdKey == "" {
		return f, fmt.Errorf("writing etcd client files in %s: the configuration carries no inline etcdCACert, etcdCert and etcdKey", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, fmt.Errorf("writing etcd client files: %w", err)
	}
	for _, w := range []struct{ path, data string }{{f.CA, spec.EtcdCACert}, {f.ClientCert, spec.EtcdCert}, {f.ClientKey, spec.EtcdKey}} {
		if err := writeFile(w.path, []byte(w.data)); err != nil {
			return f, err
		}
	}
	return f, nil
}

// ReadJoin reads a join file (any calicoctl configuration file).
func ReadJoin(path string) (v3.CalicoAPIConfigSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return v3.CalicoAPIConfigSpec{}, fmt.Errorf("reading join file: %w", err)
	}
	var cfg v3.CalicoAPIConfig
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return v3.CalicoAPIConfigSpec{}, fmt.Errorf("join file %s: %w", path, err)
	}
	if cfg.Kind != v3.KindCalicoAPIConfig {
		return v3.CalicoAPIConfigSpec{}, fmt.Errorf("join file %s: kind is %q, want %s", path, cfg.Kind, v3.KindCalicoAPIConfig)
	}
	return cfg.Spec, nil
}
