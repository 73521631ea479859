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
// it has no authentication, so bind it to loopback; the public listeners
// never serve pprof. It answers only requests whose Host names this machine
// (LoopbackHosts): a page in the machine's browser could otherwise read
// /debug/pprof/cmdline, credentials in URLs included, through DNS
// rebinding.
type Admin struct {
	srv  *http.Server
	ln   net.Listener
	once sync.Once
}

// adminLimits: the diagnostics listener serves an operator or a scraper, a
// few connections at a time.
var adminLimits = httplimit.Config{MaxConns: 64}

// ListenAdmin binds addr; Serve starts answering. Requests must name a
// loopback address, localhost or one of hosts in their Host header.
func ListenAdmin(addr string, reg *Registry, hosts []string) (*Admin, error) {
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
	allowed := NewLoopbackHosts(hosts)
	guarded := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed.Allow(r.Host) {
			http.Error(w, fmt.Sprintf("Host %q is not this machine's admin listener (allowed: loopback addresses, localhost and the configured names)", r.Host), http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, r)
	})
	// httplimit's write timeout bounds each write, not the response, so a
	// CPU profile or trace that runs for its ?seconds= is not cut.
	return &Admin{srv: adminLimits.Server(guarded), ln: adminLimits.Listener(ln)}, nil
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
