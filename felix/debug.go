package felix

import (
	"net/http"
	"net/http/pprof"
)

// profiles is the handler of the debugPort server: Go's runtime profiles
// under /debug/pprof/, as Calico's felix serves them there (heap,
// goroutine, profile, trace, …).
func profiles() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
