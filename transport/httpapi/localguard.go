package httpapi

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"

	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/internal/origin"
	"github.com/phaseless/phaseless/llm"
)

// LocalGuard protects an API served on a device's loopback address from
// the web pages its browser shows. A loopback listener is reachable from
// any page: through DNS rebinding (a page's own name re-pointed at
// 127.0.0.1, so the browser's same-origin rule no longer separates them)
// and through cross-origin "simple" requests (a form or fetch POST with a
// text/plain body, which the browser sends without asking first). Local
// LLM servers have had exactly these holes (Ollama, CVE-2024-28224). The
// guard refuses:
//
//   - a Host that is not a loopback address, "localhost" or one of Hosts
//     (a rebinding page always sends its own name);
//   - a browser Origin not in Origins (pages of other sites);
//   - a body whose Content-Type is not application/json (the only type a
//     cross-origin page cannot send without a CORS preflight, which an
//     origin outside Origins fails).
//
// Requests arriving on a Unix socket are not checked: no browser reaches one.
// Refusals are in the caller's API shape (Anthropic for /v1/messages,
// OpenAI otherwise). An allowed Origin gets CORS headers, so a head unit's
// own web UI can call the API once it is listed.
type LocalGuard struct {
	// Hosts are accepted in the Host header besides loopback addresses and
	// localhost: names or IP addresses, without port, compared
	// case-insensitively.
	Hosts []string
	// Origins are the browser origins (scheme://host[:port]) allowed to call
	// the API. Requests without an Origin (SDKs, curl) are not affected.
	Origins []string
}

// Validate names the first bad entry.
func (g LocalGuard) Validate() error {
	for _, h := range g.Hosts {
		if h == "" || strings.ContainsAny(h, "/:@ ") && net.ParseIP(h) == nil {
			return fmt.Errorf("allowed host %q: want a host name or IP address without scheme or port", h)
		}
	}
	for _, o := range g.Origins {
		if _, err := canonicalOrigin(o); err != nil {
			return err
		}
	}
	return nil
}

// canonicalOrigin returns o as browsers send it (origin.Of).
func canonicalOrigin(o string) (string, error) {
	u, ok := origin.Parse(o)
	if !ok {
		return "", fmt.Errorf("allowed origin %q: want scheme://host[:port], e.g. http://localhost:3000", o)
	}
	return origin.Of(u), nil
}

// Wrap returns h behind the guard. g must be valid (Validate).
func (g LocalGuard) Wrap(h http.Handler) http.Handler {
	hosts := metrics.NewLoopbackHosts(g.Hosts)
	origins := map[string]bool{}
	for _, o := range g.Origins {
		if c, err := canonicalOrigin(o); err == nil {
			origins[c] = true
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, unix := r.Context().Value(http.LocalAddrContextKey).(*net.UnixAddr); unix {
			h.ServeHTTP(w, r)
			return
		}
		a := apiOpenAI
		if r.URL.Path == "/v1/messages" {
			a = apiAnthropic
		}
		if !hosts.Allow(r.Host) {
			forbidden("host", "Host %q is not this device's API (allowed: loopback addresses, localhost and the configured names)", r.Host).write(w, a)
			return
		}
		from := r.Header.Get("Origin")
		if from != "" {
			c, err := canonicalOrigin(from)
			if err != nil || !origins[c] {
				forbidden("origin", "Origin %q may not call this API (not on the allowed origin list)", from).write(w, a)
				return
			}
			w.Header().Set("Access-Control-Allow-Origin", from)
			w.Header().Add("Vary", "Origin")
			if r.Method == http.MethodOptions {
				preflight(w, r)
				return
			}
		}
		if r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch {
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				(&apiError{status: http.StatusUnsupportedMediaType, code: llm.CodeInvalid, param: "Content-Type",
					message: fmt.Sprintf("Content-Type %q is not accepted; send the body as application/json", r.Header.Get("Content-Type")),
					oaiType: "invalid_request_error", oaiCode: "unsupported_media_type", antType: "invalid_request_error"}).write(w, a)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

func forbidden(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusForbidden, code: llm.CodePermission, param: param, message: fmt.Sprintf(format, args...),
		oaiType: "invalid_request_error", oaiCode: "forbidden_" + param, antType: "permission_error"}
}

// preflight answers a CORS preflight from an allowed origin.
func preflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
	if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
		h.Set("Access-Control-Allow-Headers", req)
	}
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
}
