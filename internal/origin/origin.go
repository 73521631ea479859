// Package origin reads and compares web origins (RFC 6454:
// scheme://host[:port]), the unit both the agent's local API (which
// browser origins may call it) and its updater (where bundles may be
// fetched from) allow by.
package origin

import (
	"net/url"
	"strings"
)

// Parse reads raw as an origin: an http or https URL with a host and
// nothing else (no user, path, query or fragment; a bare "/" path is
// allowed). ok is false for anything more or less.
func Parse(raw string) (u *url.URL, ok bool) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, false
	}
	return u, true
}

// Of is u's origin as browsers send it in an Origin header: lower-case
// scheme and host, the scheme's default port left out, an IPv6 host in
// brackets. Two URLs share an origin exactly when Of gives the same string.
func Of(u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return strings.ToLower(u.Scheme) + "://" + host
}
