package metrics

import (
	"errors"
	"net"
	"strings"
)

// LoopbackHosts is the DNS-rebinding guard that the agent's local API
// (httpapi.LocalGuard) and the admin listeners share. A listener on
// loopback is reachable from any web page the machine's browser shows: a
// page whose own name is re-pointed at 127.0.0.1 becomes same-origin with
// it, but it still sends its own name in the Host header. So a Host is
// accepted only when it is a loopback address, localhost or one of the
// names given, with any port.
type LoopbackHosts map[string]bool

// NewLoopbackHosts accepts loopback names plus extra (names or IP
// addresses, without port).
func NewLoopbackHosts(extra []string) LoopbackHosts {
	h := LoopbackHosts{"localhost": true}
	for _, n := range extra {
		h[strings.ToLower(strings.Trim(n, "[]"))] = true
	}
	return h
}

// Allow reports whether the Host header hostport names this machine.
func (h LoopbackHosts) Allow(hostport string) bool {
	host := hostport
	if name, _, err := net.SplitHostPort(hostport); err == nil {
		host = name
	} else {
		var ae *net.AddrError
		if !errors.As(err, &ae) || ae.Err != "missing port in address" {
			return false
		}
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	return h[host]
}
