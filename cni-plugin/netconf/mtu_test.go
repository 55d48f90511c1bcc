package netconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMTUDefault checks where a pod's MTU comes from: the configuration's
// mtu, else the MTU file felix writes beside the nodename file, else 1500;
// a file that holds no number fails the load, naming the file.
func TestMTUDefault(t *testing.T) {
	cases := []struct {
		name    string
		mtu     string // the configuration's "mtu" value, "" for none
		file    string // the MTU file's content, "" for no file
		want    int
		wantErr string
	}{
		{name: "no file", want: 1500},
		{name: "file", file: "1450\n", want: 1450},
		{name: "configured wins", mtu: "1400", file: "1450", want: 1400},
		{name: "bad file", file: "many", wantErr: "holds \"many\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.file != "" {
				if err := os.WriteFile(filepath.Join(dir, MTUFileName), []byte(c.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			conf := `{"cniVersion":"1.0.0","name":"n","type":"calico","ipam":{"type":"calico-ipam"},"nodename_file":"` + filepath.Join(dir, "nodename") + `"`
			if c.mtu != "" {
				conf += `,"mtu":` + c.mtu
			}
			got, err := Load([]byte(conf + "}"))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.MTU != c.want {
				t.Fatalf("mtu %d, want %d", got.MTU, c.want)
			}
		})
	}
}
