// Package client is the validated way to read and write projectcalico.org/v3
// resources: it defaults and validates every resource before it is written,
// keeps immutable fields immutable, enforces rules that span resources (IP
// pools must not overlap) and namespace scoping, and then hands the write to
// a datastore.Interface.
package client
