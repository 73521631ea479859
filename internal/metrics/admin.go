package metrics

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"

	"github.com/phaseless/phaseless/internal/httplimit"
)

// Admin is the diagnostics listener (--admin-listen): Go's pprof profiles
// at /debug/pprof/ plus /metrics. It is off unless an address is given, and
// it has no authentication, so bind it to loopback or a private network;
// the public listeners never serve pprof.
type Admin struct {
	srv  *http.Server
	ln   net.Listener
	once sync.Once
}

// adminLimits: the diagnostics listener serves an operator or a scraper, a
// few connections at a time.
var adminLimits = httplimit.Config{MaxConns: 64}

// ListenAdmin binds addr; Serve starts answering.
func ListenAdmin(addr string, reg *Registry) (*Admin, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	if reg != nil {
		mux.Handle("GET /metrics", reg.Handler())
	}
	// httplimit's write timeout bounds each write, not the response, so a
	// CPU profile or trace that runs for its ?seconds= is not cut.
	return &Admin{srv: adminLimits.Server(mux), ln: adminLimits.Listener(ln)}, nil
}

// Addr is the bound address.
func (a *Admin) Addr() string { return a.ln.Addr().String() }

// Serve answers until Close; it returns nil after Close.
func (a *Admin) Serve() error {
	if err := a.srv.Serve(a.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close stops the listener and open profiles. Safe to call twice.
func (a *Admin) Close() error {
	var err error
	a.once.Do(func() {
		err = a.srv.Close()
		a.ln.Close()
	})
	return err
}
