// Package bpf loads Palisade's eBPF dataplane into a network namespace:
// the TCX programs compiled from c/palisade.c (embedded, built with
// bpf2go), the maps they share, pinned in bpffs so a restarted felix
// adopts them, and the attachments to interfaces.
package bpf
