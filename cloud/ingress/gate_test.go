package ingress

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
)

const testKeys = `
sk-infer-0001 apps
sk-ops-000001 ops role=operator
sk-view-00001 dash role=viewer
sk-work-00001 coord role=worker
`

func testGate(t *testing.T, now func() time.Time) (*Gate, string) {
	t.Helper()
	k, err := ParseKeys(strings.NewReader(testKeys))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	audit, err := OpenAudit(path, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { audit.Close() })
	return NewGate(k, &FailureLimiter{Now: now}, audit, nil), path
}

func keyed(method, path, key, remote string) *http.Request {
	r := httptest.NewRequest(method, path, strings.NewReader(`{"name":"update"}`))
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	r.RemoteAddr = remote
	return r
}

func readAudit(t *testing.T, path string) []AuditEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []AuditEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// Each role reaches its own surface and nothing else, both ways; every
// refusal and every change is in the audit log with the key's tenant,
// successful reads are not.
func TestGateRoles(t *testing.T) {
	g, auditPath := testGate(t, nil)
	for _, c := range []struct {
		key  string
		want llm.Code // "" = admitted
	}{
		{"sk-infer-0001", ""}, {"sk-ops-000001", llm.CodePermission}, {"sk-view-00001", llm.CodePermission},
		{"sk-work-00001", ""}, {"sk-wrong-0001", llm.CodeAuth}, {"", llm.CodeAuth},
	} {
		tenant, err := g.Inference(keyed("POST", "/v1/chat/completions", c.key, "10.0.0.1:5000"))
		ok := err == nil && c.want == "" && tenant != "" || err != nil && llm.CodeOf(err) == c.want
		if !ok {
			t.Errorf("inference with %q: tenant %q err %v, want code %q", c.key, tenant, err, c.want)
		}
	}
	// The KV handoff endpoints take worker keys only: an inference key
	// would run prefills outside its budget and push to any URL.
	for key, want := range map[string]llm.Code{"sk-work-00001": "", "sk-infer-0001": llm.CodePermission, "sk-ops-000001": llm.CodePermission, "": llm.CodeAuth} {
		tenant, err := g.Worker(keyed("POST", "/v1/kv/prefill", key, "10.0.0.3:5000"))
		if ok := err == nil && want == "" && tenant == "coord" || err != nil && llm.CodeOf(err) == want; !ok {
			t.Errorf("kv with %q: tenant %q err %v, want code %q", key, tenant, err, want)
		}
	}

	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			w.WriteHeader(http.StatusAccepted)
			w.Write([]byte(`{"id":"c1"}`))
			return
		}
		w.Write([]byte(`[]`))
	})
	admin := g.Admin(inner)
	cases := []struct {
		method, key string
		status      int
	}{
		{"POST", "sk-infer-0001", 403}, // issue 21: an inference key queued an update
		{"GET", "sk-infer-0001", 403},
		{"PUT", "sk-view-00001", 403},
		{"GET", "sk-view-00001", 200},
		{"POST", "sk-ops-000001", 202},
		{"GET", "sk-ops-000001", 200},
		{"POST", "", 401},
		{"POST", "sk-wrong-0001", 401},
	}
	for _, c := range cases {
		w := httptest.NewRecorder()
		admin.ServeHTTP(w, keyed(c.method, "/v1/fleet/devices/car-9/commands", c.key, "10.0.0.2:5000"))
		if w.Code != c.status {
			t.Errorf("%s with %q: %d %s, want %d", c.method, c.key, w.Code, w.Body, c.status)
		}
		if c.status == 202 && w.Body.String() != `{"id":"c1"}` {
			t.Errorf("operator's answer %q", w.Body)
		}
		if c.status >= 400 && !strings.Contains(w.Body.String(), `"type":"`) {
			t.Errorf("refusal body %q", w.Body)
		}
	}
	got := readAudit(t, auditPath)
	want := []struct {
		tenant, method, outcome string
		status                  int
	}{
		{"apps", "POST", "denied", 403}, {"apps", "GET", "denied", 403}, {"dash", "PUT", "denied", 403},
		{"ops", "POST", "done", 202}, {"", "POST", "denied", 401}, {"", "POST", "denied", 401},
	}
	if len(got) != len(want) {
		t.Fatalf("audit has %d entries, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		e := got[i]
		if e.Tenant != w.tenant || e.Method != w.method || e.Outcome != w.outcome || e.Status != w.status || e.Source != "10.0.0.2" || e.Path != "/v1/fleet/devices/car-9/commands" || e.Time.IsZero() {
			t.Errorf("audit %d: %+v, want %+v", i, e, w)
		}
		if e.Outcome == "denied" && e.Reason == "" {
			t.Errorf("audit %d: no reason", i)
		}
	}
	if got[3].KeyID != TenantOf("sk-ops-000001") || got[3].Role != RoleOperator {
		t.Errorf("operator entry %+v", got[3])
	}
	b, _ := os.ReadFile(auditPath)
	if strings.Contains(string(b), "sk-ops-000001") {
		t.Fatal("the audit log holds a key")
	}
}

// After five wrong keys a source waits 1 s, then 2 s, 4 s ... (capped),
// during which even a right key is refused with 429 and Retry-After; a
// success clears it; other sources are not affected. A fake clock: no
// sleeps.
func TestGateSlowsGuessing(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { return now }
	g, _ := testGate(t, clock)
	const attacker, other = "192.0.2.7:4000", "198.51.100.1:4000"
	try := func(key, src string) error {
		_, err := g.Inference(keyed("POST", "/v1/chat/completions", key, src))
		return err
	}
	for i := range 5 {
		if err := try("sk-guess-000"+string(rune('a'+i)), attacker); llm.CodeOf(err) != llm.CodeAuth {
			t.Fatalf("guess %d: %v, want 401", i, err)
		}
	}
	if err := try("sk-infer-0001", attacker); err != nil {
		t.Fatalf("within the free failures a right key works: %v", err)
	}
	// The success cleared the count: five more free guesses, then backoff.
	for range 5 {
		try("sk-guess-xxxx", attacker)
	}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if err := try("sk-guess-yyyy", attacker); llm.CodeOf(err) != llm.CodeAuth {
			t.Fatalf("failure %d: %v", 6+i, err)
		}
		err := try("sk-infer-0001", attacker)
		var le *llm.Error
		if llm.CodeOf(err) != llm.CodeBudget || !errors.As(err, &le) || le.RetryAfter != want {
			t.Fatalf("in backoff %d: %v, want 429 retry after %v", i, err, want)
		}
		if err := try("sk-infer-0001", other); err != nil {
			t.Fatalf("another source is slowed too: %v", err)
		}
		now = now.Add(want)
	}
	if err := try("sk-infer-0001", attacker); err != nil {
		t.Fatalf("after the backoff a right key works: %v", err)
	}

	// Admin routes share the limiter, answering 429 with Retry-After.
	for range 6 {
		try("sk-guess-zzzz", attacker)
	}
	w := httptest.NewRecorder()
	g.Admin(http.NotFoundHandler()).ServeHTTP(w, keyed("GET", "/v1/fleet/devices", "sk-ops-000001", attacker))
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("admin in backoff: %d Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
}

func TestFailureLimiterCapAndForget(t *testing.T) {
	now := time.Unix(0, 0)
	l := &FailureLimiter{Free: 1, Base: time.Second, Max: 8 * time.Second, Forget: time.Minute, MaxSources: 2, Now: func() time.Time { return now }}
	var last time.Duration
	for range 10 {
		last = l.Fail("a")
	}
	if last != 8*time.Second {
		t.Fatalf("backoff %v, want the 8 s cap", last)
	}
	now = now.Add(time.Minute)
	if _, blocked := l.Blocked("a"); blocked {
		t.Fatal("not forgotten after Forget")
	}
	if l.Fail("a") != 0 {
		t.Fatal("a forgotten source starts afresh")
	}
	now = now.Add(time.Second)
	l.Fail("b")
	now = now.Add(time.Second)
	l.Fail("c") // the table holds 2: the longest idle ("a") goes
	if len(l.sources) != 2 || l.sources["a"] != nil {
		t.Fatalf("sources %v", l.sources)
	}
}
