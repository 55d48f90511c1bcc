package commands_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// storedBadValues are values written straight into etcd that are not the
// resources their keys name.
var storedBadValues = map[string]string{
	"ippools/broken":  `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"broken"},"spec":{"cidr":`,
	"ippools/renamed": `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"other"},"spec":{"cidr":"10.9.0.0/16"}}`,
	// An IPPool under a GlobalNetworkPolicy key.
	"globalnetworkpolicies/disguised": `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"disguised"},"spec":{"cidr":"10.8.0.0/16"}}`,
}

var revisionRE = regexp.MustCompile(`revision [0-9]+`)

// TestGetAndDeleteOverBadValues: `get KIND` lists the good resources and
// names the bad values on stderr with a zero exit; a bad value asked for
// by name is an error; `delete` removes a bad value and says so; `apply`
// replaces one.
func TestGetAndDeleteOverBadValues(t *testing.T) {
	c := newCluster(t)
	c.mustRun(t, fixtures, "apply", "-f", "-")
	for key, value := range storedBadValues {
		if _, err := c.raw.Put(context.Background(), datastore.ResourcePrefix+key, value); err != nil {
			t.Fatal(err)
		}
	}
	both := func(r result) string {
		return revisionRE.ReplaceAllString("--- stdout\n"+r.stdout+"--- stderr\n"+r.stderr, "revision <rev>")
	}

	r := c.run(t, "", nil, "get", "ippools")
	if r.code != 0 {
		t.Errorf("get ippools beside bad values: exit %d", r.code)
	}
	golden(t, "badvalues-get-ippools.txt", both(r))

	r = c.run(t, "", nil, "get", "globalnetworkpolicies", "-o", "yaml")
	if r.code != 0 || strings.Contains(r.stdout, "disguised") {
		t.Errorf("get globalnetworkpolicies: exit %d, an IPPool listed as a policy:\n%s", r.code, r.stdout)
	}
	golden(t, "badvalues-get-gnp-yaml.txt", both(r))

	r = c.run(t, "", nil, "get", "ippool", "pool-a", "broken")
	if r.code == 0 || !strings.Contains(r.stdout, "pool-a") {
		t.Errorf("get ippool pool-a broken: exit %d, stdout %q; want pool-a printed and a non-zero exit", r.code, r.stdout)
	}
	golden(t, "badvalues-get-by-name.txt", both(r))

	r = c.run(t, "", nil, "delete", "ippool", "broken")
	if r.code != 0 {
		t.Errorf("delete of a bad value: exit %d", r.code)
	}
	golden(t, "badvalues-delete.txt", both(r))
	if resp, err := c.raw.Get(context.Background(), datastore.ResourcePrefix+"ippools/broken"); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("the bad value is still stored after delete: %v", err)
	}

	c.mustRun(t, "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: renamed}\nspec: {cidr: 10.9.0.0/16}\n", "apply", "-f", "-")
	r = c.run(t, "", nil, "get", "ippools")
	if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, "renamed") {
		t.Errorf("after apply over the last bad pool: exit %d\n%s", r.code, both(r))
	}
}
