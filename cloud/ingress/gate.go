package ingress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// Gate is the coordinator's door for API keys: it authenticates (slowing
// sources that keep failing, FailureLimiter), checks the key's role for the
// surface asked for, and writes the fleet admin routes' audit log.
type Gate struct {
	keys  *Keys // nil: --dev, no keys, every caller admitted
	limit *FailureLimiter
	audit *AuditLog // nil: no audit log
	log   *slog.Logger
}

// NewGate builds a Gate. keys nil admits everyone (--dev) and still
// audits; limit nil means a FailureLimiter with its defaults.
func NewGate(keys *Keys, limit *FailureLimiter, audit *AuditLog, log *slog.Logger) *Gate {
	if limit == nil {
		limit = &FailureLimiter{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Gate{keys: keys, limit: limit, audit: audit, log: log}
}

// authenticate finds r's key, refusing at once a source in backoff.
func (g *Gate) authenticate(r *http.Request) (Key, error) {
	src := sourceOf(r)
	if wait, blocked := g.limit.Blocked(src); blocked {
		return Key{}, &llm.Error{Code: llm.CodeBudget, RetryAfter: wait,
			Message: fmt.Sprintf("too many failed authentications from %s; retry in %v", src, wait.Round(time.Second))}
	}
	k, err := g.keys.AuthenticateKey(r)
	switch {
	case err == nil:
		g.limit.Succeed(src)
	case err != errMissingKey:
		if wait := g.limit.Fail(src); wait > 0 {
			g.log.Warn("API key guessing slowed down", "source", src, "backoff", wait)
		}
	}
	return k, err
}

// Inference authenticates a call to the OpenAI/Anthropic surface
// (httpapi.Options.Authenticate): the key's tenant, or 401, 403 for a key
// of another role, 429 for a source in backoff.
func (g *Gate) Inference(r *http.Request) (string, error) {
	return g.tenantOf(r, Role.mayInfer, "the inference API needs an inference key")
}

// Worker authenticates a call to the KV handoff endpoints (/v1/kv/): only a
// worker key, 403 for any other role.
func (g *Gate) Worker(r *http.Request) (string, error) {
	return g.tenantOf(r, func(k Role) bool { return k == RoleWorker }, "the KV handoff endpoints need a worker key")
}

// tenantOf authenticates r and returns its key's tenant if allowed admits
// the key's role, a 403 saying need otherwise; open access (no keys) admits
// anyone, with no tenant.
func (g *Gate) tenantOf(r *http.Request, allowed func(Role) bool, need string) (string, error) {
	if g.keys == nil {
		return "", nil
	}
	k, err := g.authenticate(r)
	if err != nil {
		return "", err
	}
	if !allowed(k.Role) {
		return "", &llm.Error{Code: llm.CodePermission, Message: fmt.Sprintf("this API key's role is %s; %s", k.Role, need)}
	}
	return k.Tenant, nil
}

// Admin guards the fleet admin routes: operator keys may do anything, viewer
// keys only read, inference keys nothing. Refusals and every change are
// written to the audit log with the key's tenant before the response goes
// out.
func (g *Gate) Admin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var k Key
		if g.keys != nil {
			var err error
			k, err = g.authenticate(r)
			if err == nil && !k.Role.mayAdmin(r.Method) {
				err = &llm.Error{Code: llm.CodePermission, Message: fmt.Sprintf("this API key's role is %s; %s on the fleet admin API needs %s", k.Role, r.Method, neededRole(r.Method))}
			}
			if err != nil {
				status := g.deny(w, err)
				g.record(r, k, status, "denied", err.Error())
				return
			}
		}
		if !audited(r.Method) {
			h.ServeHTTP(w, r)
			return
		}
		// Hold the (small) answer of a change until its audit line is on
		// disk: an acknowledged action is always in the log.
		rec := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		outcome := "done"
		if rec.status >= 400 {
			outcome = "failed"
		}
		if err := g.record(r, k, rec.status, outcome, ""); err != nil {
			writeAdminError(w, http.StatusInternalServerError, "api_error", "audit log: "+err.Error()+" (the action was carried out)")
			return
		}
		for name, vs := range rec.header {
			w.Header()[name] = vs
		}
		w.WriteHeader(rec.status)
		w.Write(rec.body.Bytes())
	})
}

// Metrics guards the public listener's /metrics: its series name devices,
// versions and auth counters. A viewer or operator key reads it (the fleet
// admin API's read rule, for Prometheus), and so does a worker key (a
// coordinator in front reads this one's load from it, cloud/worker);
// inference keys and no key are refused, and audited as the admin routes'
// refusals are. Open access (no keys) serves anyone.
func (g *Gate) Metrics(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.keys == nil {
			h.ServeHTTP(w, r)
			return
		}
		k, err := g.authenticate(r)
		if err == nil && k.Role != RoleViewer && k.Role != RoleOperator && k.Role != RoleWorker {
			err = &llm.Error{Code: llm.CodePermission, Message: fmt.Sprintf("this API key's role is %s; /metrics needs a viewer, operator or worker key", k.Role)}
		}
		if err != nil {
			status := g.deny(w, err)
			g.record(r, k, status, "denied", err.Error())
			return
		}
		h.ServeHTTP(w, r)
	})
}

// AdminKey authenticates r for the fleet admin surface outside the admin
// routes themselves (the dashboard, cloud/ui): the same rule as Admin,
// operator keys for any method, viewer keys for GET and HEAD, other roles
// never. Open access (no keys) admits anyone with a zero Key. It writes no
// audit line; the caller records with Audit once it knows the outcome.
func (g *Gate) AdminKey(r *http.Request) (Key, error) {
	if g.keys == nil {
		return Key{}, nil
	}
	k, err := g.authenticate(r)
	if err != nil {
		return Key{}, err
	}
	if !k.Role.mayAdmin(r.Method) {
		return k, &llm.Error{Code: llm.CodePermission, Message: fmt.Sprintf("this API key's role is %s; %s on the fleet admin surface needs %s", k.Role, r.Method, neededRole(r.Method))}
	}
	return k, nil
}

// Audit writes one line of the fleet admin audit log for a request that
// AdminKey admitted or refused (outcome "done", "failed" or "denied").
func (g *Gate) Audit(r *http.Request, k Key, status int, outcome, reason string) error {
	return g.record(r, k, status, outcome, reason)
}

func neededRole(method string) string {
	if method == http.MethodGet || method == http.MethodHead {
		return "an operator or viewer key"
	}
	return "an operator key"
}

// audited: changes are recorded; reads are not.
func audited(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// deny answers an admin refusal in the admin API's JSON error shape.
func (g *Gate) deny(w http.ResponseWriter, err error) int {
	var le *llm.Error
	errors.As(err, &le)
	status, typ := http.StatusUnauthorized, "authentication_error"
	switch llm.CodeOf(err) {
	case llm.CodePermission:
		status, typ = http.StatusForbidden, "permission_error"
	case llm.CodeBudget:
		status, typ = http.StatusTooManyRequests, "rate_limit_error"
		if le != nil && le.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int((le.RetryAfter+time.Second-1)/time.Second)))
		}
	}
	msg := err.Error()
	if le != nil {
		msg = le.Message
	}
	writeAdminError(w, status, typ, msg)
	return status
}

func writeAdminError(w http.ResponseWriter, status int, typ, msg string) {
	b, _ := json.Marshal(map[string]map[string]string{"error": {"message": msg, "type": typ}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// record writes one audit line; without an audit log it only logs.
func (g *Gate) record(r *http.Request, k Key, status int, outcome, reason string) error {
	e := AuditEntry{Tenant: k.Tenant, KeyID: k.ID, Role: k.Role, Source: sourceOf(r), Method: r.Method, Path: r.URL.Path, Status: status, Outcome: outcome, Reason: reason}
	g.log.Info("fleet admin", "tenant", e.Tenant, "key", e.KeyID, "role", string(e.Role), "source", e.Source, "method", e.Method, "path", e.Path, "status", status, "outcome", outcome)
	if g.audit == nil {
		return nil
	}
	err := g.audit.Write(e)
	if err != nil {
		g.log.Error("audit log write failed", "err", err)
	}
	return err
}

// bufferedResponse holds an admin handler's answer until it is audited.
type bufferedResponse struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(status int) {
	if !b.wrote {
		b.status, b.wrote = status, true
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.wrote = true
	return b.body.Write(p)
}
