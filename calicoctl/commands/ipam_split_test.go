package commands_test

import (
	"maps"
	"strings"
	"testing"
)

// TestIPAMSplit splits the IPAM fixture's pools and checks Calico's
// messages, the new pools, that the blocks and their allocations are
// untouched, and that a refused split writes nothing.
func TestIPAMSplit(t *testing.T) {
	c, _ := newIPAMCluster(t)
	c.mustRun(t, poolDoc("pool-b", "10.20.0.0/16")+"---\n"+poolDoc("split-pool-b-1", "10.30.0.0/16"), "apply", "-f", "-")
	blocksBefore := c.mustRun(t, "", "ipam", "show", "--show-blocks")

	golden(t, "ipam-split.txt", c.mustRun(t, "", "ipam", "split", "--name=pool-a", "2"))
	golden(t, "ipam-split-v6.txt", c.mustRun(t, "", "ipam", "split", "4", "--cidr=fd00:10::/48"))
	golden(t, "ipam-split-pools.txt", c.mustRun(t, "", "get", "ippools", "-o", "wide"))
	// The same blocks and addresses, now under the new pools.
	blocks := c.mustRun(t, "", "ipam", "show", "--show-blocks")
	golden(t, "ipam-split-blocks.txt", blocks)
	if strings.Count(blocks, "| Block ") != strings.Count(blocksBefore, "| Block ") {
		t.Errorf("blocks before the split:\n%s\nafter:\n%s", blocksBefore, blocks)
	}

	before := c.dump(t)
	for _, tc := range []struct {
		name, want string
		args       []string
	}{
		{"not a number", "error reading number to split IP pools into. two is not a valid number: ", []string{"two", "--name=pool-b"}},
		{"no pool named", "no name or CIDR provided. Provide a name or CIDR to denote the IP pool to split", []string{"2"}},
		{"not a power of two", "error splitting the CIDR 10.20.0.0/16 into 3 CIDRs: number to split CIDR into is not a valid power of 2: 3", []string{"3", "--name=pool-b"}},
		{"one part", "number to split CIDR into is not a valid power of 2: 1", []string{"1", "--name=pool-b"}},
		{"too many parts", "error splitting the CIDR 10.10.0.0/25 into 256 CIDRs: the CIDR 10.10.0.0/25 is not large enough to be split into 256 parts", []string{"256", "--cidr=10.10.0.0/25"}},
		{"smaller than a block", "IP pool size is too small", []string{"4", "--cidr=10.10.0.0/25"}},
		{"unknown name", "unable to find IP pool with name nope: resource does not exist: IPPool(nope)", []string{"2", "--name=nope"}},
		{"unknown CIDR", "unable to find IP pool  covering the specified CIDR 10.99.0.0/16", []string{"2", "--cidr=10.99.0.0/16"}},
		{"new name taken", `IPPool "pool-b" changed since it was read, or a pool named split-pool-b-N exists: nothing was written`, []string{"2", "--name=pool-b"}},
	} {
		r := c.run(t, "", nil, append([]string{"ipam", "split"}, tc.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q, want %q", tc.name, r.code, r.stderr, tc.want)
		}
		if after := c.dump(t); !maps.Equal(before, after) {
			t.Fatalf("%s: the refused split changed the datastore", tc.name)
		}
	}
}
