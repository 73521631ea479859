package ingress

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// AuditLog records who did what on the fleet admin routes, one JSON object
// per line, appended and fsynced before the response is written, so an
// action the operator saw acknowledged is on disk. It records every
// request that changes something (any method but GET/HEAD/OPTIONS) and
// every refused admin request (no key, a wrong key, a role that may not);
// dashboards' successful reads are not recorded, they would drown it.
type AuditLog struct {
	mu  sync.Mutex // guards f, closed
	f   *os.File
	now func() time.Time
}

// AuditEntry is one line of the audit log.
type AuditEntry struct {
	Time    time.Time `json:"time"`
	Tenant  string    `json:"tenant"`           // the key's tenant; "" when unauthenticated
	KeyID   string    `json:"key_id,omitempty"` // hash of the key (never the key)
	Role    Role      `json:"role,omitempty"`
	Source  string    `json:"source"` // the peer's address
	Method  string    `json:"method"`
	Path    string    `json:"path"`
	Status  int       `json:"status"`
	Outcome string    `json:"outcome"`          // "done", "failed" (status ≥ 400 from the handler) or "denied"
	Reason  string    `json:"reason,omitempty"` // why it was denied
}

// OpenAudit opens (creating, mode 0600) the audit log at path for
// appending. now may be nil (time.Now).
func OpenAudit(path string, now func() time.Time) (*AuditLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	return &AuditLog{f: f, now: now}, nil
}

// Write appends e (its Time set now) and syncs the file.
func (a *AuditLog) Write(e AuditEntry) error {
	e.Time = a.now().UTC()
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return os.ErrClosed
	}
	if _, err := a.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	return a.f.Sync()
}

// Close closes the file; safe to call twice.
func (a *AuditLog) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}
