// Package testsupport holds, in its subpackages, the helpers the tests of
// several folders share: promscrape reads a Prometheus /metrics answer,
// udpflow counts numbered UDP datagrams between two sockets, and
// ipamreport checks a `calicoctl ipam check` report after a churn run.
// Nothing outside tests imports them.
package testsupport
