package agent

import (
	"net"

	"github.com/phaseless/phaseless/transport/httpapi"
)

// localGuard is the local API's DNS-rebinding and CSRF guard: loopback
// names, --allow-host, and the --listen address itself when it names one
// (an agent bound to 192.168.1.5 is called as 192.168.1.5; a rebinding page
// sends its own name, never an address).
func localGuard(cfg Config) httpapi.LocalGuard {
	hosts := append([]string(nil), cfg.AllowHosts...)
	if h, _, err := net.SplitHostPort(cfg.Listen); err == nil {
		if ip := net.ParseIP(h); ip != nil && !ip.IsUnspecified() {
			hosts = append(hosts, h)
		}
	}
	return httpapi.LocalGuard{Hosts: hosts, Origins: cfg.AllowOrigins}
}
