package cloud

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/internal/metrics/metricstest"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/pki"
	"github.com/phaseless/phaseless/transport/quic"
	"github.com/phaseless/phaseless/transport/schedhint"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startCloud runs a coordinator on loopback ports until the test ends.
func startCloud(t *testing.T, mutate func(*Config)) *Cloud {
	t.Helper()
	cfg := Config{
		HTTP: "127.0.0.1:0", QUIC: "", MQTT: "", DataDir: t.TempDir(), Dev: true,
		BuiltinWorkers: 2, Budget: 200000, BudgetPeriod: time.Minute, BatchWindow: 150 * time.Millisecond, BatchMax: 16,
		SLATTFT: 2 * time.Second, SLAITL: 200 * time.Millisecond,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := c.Serving(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := wait(); err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return c
}

type streamed struct {
	status int
	header http.Header
	text   string
	body   string
}

// chat posts one streaming OpenAI request and reads the SSE answer.
func chat(t *testing.T, addr, key, policy, content string, maxTokens int) streamed {
	t.Helper()
	body := fmt.Sprintf(`{"model":"auto","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, maxTokens, content)
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if policy != "" {
		req.Header.Set("x-phaseless-policy", policy)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := streamed{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		out.body = string(b)
		return out
	}
	sc := bufio.NewScanner(resp.Body)
	var sb strings.Builder
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &ev) == nil {
			for _, c := range ev.Choices {
				sb.WriteString(c.Delta.Content)
			}
		}
	}
	out.text = sb.String()
	return out
}

// scrape reads addr's /metrics, with key (a viewer's) when keys are on.
func scrape(t *testing.T, addr string, key ...string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	if len(key) > 0 {
		req.Header.Set("Authorization", "Bearer "+key[0])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestCloudHTTP: a streamed request through the real HTTP surface carries
// the route, the scheduler hint and the budget header; the dev-mode policy
// override takes effect; the metrics show the decision and the stream.
func TestCloudHTTP(t *testing.T) {
	c := startCloud(t, nil)
	addr := c.HTTPAddr()
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + addr + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", p, resp, err)
		}
		resp.Body.Close()
	}
	r := chat(t, addr, "", "", "hello, what is the weather like today?", 16)
	if r.status != 200 || r.text == "" {
		t.Fatalf("status %d body %q text %q", r.status, r.body, r.text)
	}
	if !strings.HasPrefix(r.header.Get("x-phaseless-route"), "cloud/") {
		t.Fatalf("route %q", r.header.Get("x-phaseless-route"))
	}
	// The cloud's default scheduler is the priced policy (priced-pd).
	h, err := schedhint.Parse(r.header.Get("x-scheduler-hint"))
	if err != nil || h.Policy != sched.PolicyPriced || h.InputTokens < 20 {
		t.Fatalf("hint %q → %+v, %v", r.header.Get("x-scheduler-hint"), h, err)
	}
	if r.header.Get("x-burst-budget-remaining") == "" {
		t.Fatal("no x-burst-budget-remaining")
	}
	rr := chat(t, addr, "", sched.NameRoundRobin, "hello again", 4)
	if h, _ := schedhint.Parse(rr.header.Get("x-scheduler-hint")); h.Policy != sched.PolicyRoundRobin {
		t.Fatalf("policy override ignored: %+v", h)
	}
	if bad := chat(t, addr, "", "fastest", "x", 4); bad.status != 400 {
		t.Fatalf("unknown policy: %d %s", bad.status, bad.body)
	}
	// --scheduler picks the policy in force for every request.
	rules := startCloud(t, func(c *Config) { c.Scheduler = sched.NameRules })
	if h, _ := schedhint.Parse(chat(t, rules.HTTPAddr(), "", "", "hello", 4).header.Get("x-scheduler-hint")); h.Policy != sched.PolicyRules {
		t.Fatalf("--scheduler rules: %+v", h)
	}
	if _, err := New(Config{HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Dev: true, Budget: 1, BatchMax: 1, SLATTFT: time.Second, SLAITL: time.Second, Scheduler: "fastest"}, nil); err == nil || !strings.Contains(err.Error(), "unknown policy") {
		t.Fatalf("--scheduler fastest: %v", err)
	}
	fams := metricstest.Parse(t, scrape(t, addr))
	metricstest.CheckConventions(t, fams)
	for _, want := range []struct {
		name   string
		labels []string
		v      float64
	}{
		{"phaseless_sched_decision_seconds", nil, 2},
		{"phaseless_engine_capacity", nil, 32},
		{"phaseless_batch_size", nil, 2},
		{"phaseless_pool_capacity", []string{"pool=prefill-heavy"}, -1},
		{"phaseless_pool_utilization", []string{"pool=decode-heavy"}, -1},
		{"phaseless_worker_healthy", nil, 1},
		{"phaseless_cloud_sla_requests_total", nil, -1},
	} {
		v, ok := metricstest.Value(fams, want.name, want.labels...)
		if !ok || (want.v >= 0 && v != want.v) {
			t.Errorf("%s%v = %v (found %v), want %v", want.name, want.labels, v, ok, want.v)
		}
	}
	var ttfts uint64
	for _, s := range fams["phaseless_cloud_ttft_seconds"].GetMetric() {
		ttfts += s.GetHistogram().GetSampleCount()
	}
	if ttfts != 2 {
		t.Errorf("phaseless_cloud_ttft_seconds counts %d requests over its pools, want 2", ttfts)
	}
}

// TestAgingRateReachesBuiltinEngines: --aging-rate is each built-in
// engine's admission order, and --host-kv gives each its host KV tier.
func TestAgingRateReachesBuiltinEngines(t *testing.T) {
	c := startCloud(t, func(cfg *Config) { cfg.AgingRate = 5000; cfg.HostKV = 2 })
	n := 0
	for _, w := range c.workers.Workers() {
		if b, ok := w.Engine().(*worker.Builtin); ok {
			n++
			if got := b.LM().Config().AgingRate; got != 5000 {
				t.Fatalf("%s: aging rate %v, want 5000", w.Name(), got)
			}
			if st := b.LM().Stats(); st.Host.BlocksTotal != 2*st.KVBlocksTotal {
				t.Fatalf("%s: host tier of %d blocks for %d in the cache, want twice as many", w.Name(), st.Host.BlocksTotal, st.KVBlocksTotal)
			}
		}
	}
	if n == 0 {
		t.Fatal("no built-in engine")
	}
}

// TestCloudBudgetAndKeys: outside --dev a key is required; a key's budget
// runs out with a 429 in OpenAI's shape and the remaining budget header.
func TestCloudBudgetAndKeys(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(keys, []byte("sk-test-small small 400\nsk-test-big big\nsk-test-view dash role=viewer\n"), 0o600)
	c := startCloud(t, func(cfg *Config) {
		cfg.Dev = false
		cfg.APIKeys = keys
		cfg.BuiltinWorkers = 1
		// A daily refill: a 400-token budget refilled per minute gives back
		// ~7 tokens a second, which a slow (race, loaded) run saw as the
		// second request not having spent anything.
		cfg.BudgetPeriod = 24 * time.Hour
	})
	addr := c.HTTPAddr()
	if r := chat(t, addr, "", "", "hi", 4); r.status != 401 {
		t.Fatalf("no key: %d", r.status)
	}
	if r := chat(t, addr, "sk-test-big", sched.NameRoundRobin, "hi", 4); r.status != 400 {
		t.Fatalf("policy override outside --dev: %d", r.status)
	}
	if r := chat(t, addr, "sk-test-big", "", "hi", 4); r.status != 200 {
		t.Fatalf("good key: %d %s", r.status, r.body)
	}
	// Each request is charged prompt + max_tokens up front; what it did not
	// generate comes back when it ends. So the remaining budget reported by
	// the next request has gone down by at least the first one's prompt.
	first := chat(t, addr, "sk-test-small", "", "hello there", 20)
	second := chat(t, addr, "sk-test-small", "", "hello there", 20)
	r1, err1 := strconv.Atoi(first.header.Get("x-burst-budget-remaining"))
	r2, err2 := strconv.Atoi(second.header.Get("x-burst-budget-remaining"))
	if first.status != 200 || second.status != 200 || err1 != nil || err2 != nil || r2 > r1-20 {
		t.Fatalf("remaining %q then %q (status %d, %d): the first request's prompt was not spent",
			first.header.Get("x-burst-budget-remaining"), second.header.Get("x-burst-budget-remaining"), first.status, second.status)
	}
	// A request that needs more than the whole budget is a 429 in OpenAI's
	// shape, with the remaining budget. (Running a budget down to zero is
	// tested with a fake clock in cloud/admit.)
	over := chat(t, addr, "sk-test-small", "", "hello there", 390)
	if over.status != 429 || over.header.Get("x-burst-budget-remaining") == "" || !strings.Contains(over.body, `"rate_limit_error"`) {
		t.Fatalf("over budget: %d %q %s", over.status, over.header.Get("x-burst-budget-remaining"), over.body)
	}
	if !strings.Contains(scrape(t, addr, "sk-test-view"), "phaseless_admit_budget_rejections_total 1") {
		t.Fatal("budget rejection not counted")
	}
}

// TestCloudRemoteWorker: a coordinator with no engine of its own uses
// another Phaseless coordinator as an OpenAI-compatible worker, reading its
// load from its /metrics.
func TestCloudRemoteWorker(t *testing.T) {
	upstream := startCloud(t, func(cfg *Config) { cfg.BuiltinWorkers = 1 })
	front := startCloud(t, func(cfg *Config) {
		cfg.BuiltinWorkers = 0
		if err := cfg.Workers.Set("http://" + upstream.HTTPAddr() + "#role=decode-heavy"); err != nil {
			t.Fatal(err)
		}
	})
	r := chat(t, front.HTTPAddr(), "", "", "tell me something", 8)
	if r.status != 200 || r.text == "" {
		t.Fatalf("status %d %s", r.status, r.body)
	}
	if route := r.header.Get("x-phaseless-route"); !strings.HasPrefix(route, "cloud/decode-heavy/remote-0-") {
		t.Fatalf("route %q", route)
	}
	w := front.workers.Workers()[0]
	if !w.Healthy() || w.LastLoad().Capacity != 16 {
		t.Fatalf("remote worker health %v load %+v (%s)", w.Healthy(), w.LastLoad(), w.ProbeError())
	}
}

// dialDevice connects to c's QUIC listener as device, with a certificate
// from c's dev PKI; the context bounds the test's requests.
func dialDevice(t *testing.T, c *Cloud, device string) (context.Context, *quic.Client) {
	t.Helper()
	dir := c.PKIDir()
	if err := pki.EnsureDev(dir, device); err != nil {
		t.Fatal(err)
	}
	tc, err := pki.DeviceTLS(dir, device)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cl, err := quic.Dial(ctx, c.QUICAddr(), quic.ClientConfig{TLS: tc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return ctx, cl
}

// TestCloudQUIC: an agent with a device certificate from the dev PKI
// streams a request over QUIC; its device id is the tenant.
func TestCloudQUIC(t *testing.T) {
	c := startCloud(t, func(cfg *Config) { cfg.QUIC = "127.0.0.1:0"; cfg.BuiltinWorkers = 1 })
	ctx, cl := dialDevice(t, c, "car-7")
	var sb strings.Builder
	var begin *llm.Meta
	fin, err := cl.Generate(ctx, &llm.Request{ID: "q1", Model: "auto", MaxTokens: 8, Messages: []llm.Message{{Role: "user", Content: "status of the car"}}},
		func(tk llm.Token) error {
			if tk.Meta != nil {
				begin = tk.Meta
			} else if begin == nil {
				t.Errorf("token %q before the begin event", tk.Text)
			}
			sb.WriteString(tk.Text)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if fin.CompletionTokens == 0 || sb.Len() == 0 {
		t.Fatalf("final %+v text %q", fin, sb.String())
	}
	if begin == nil || begin.Route != llm.RouteCloud || begin.Pool == "" || begin.Worker == "" {
		t.Fatalf("begin event over QUIC: %+v", begin)
	}
	if h, err := schedhint.Parse(begin.SchedulerHint); err != nil || h.Pool.String() != begin.Pool {
		t.Fatalf("hint over QUIC: %q %+v %v", begin.SchedulerHint, h, err)
	}
}

func TestConfigValidate(t *testing.T) {
	base := func() Config {
		return Config{HTTP: ":8080", QUIC: ":4433", MQTT: "", DataDir: "d", Dev: true, BuiltinWorkers: 1, Budget: 1, BatchMax: 16, SLATTFT: time.Second, SLAITL: time.Second}
	}
	cases := map[string]func(*Config){
		"builtin-workers":     func(c *Config) { c.BuiltinWorkers = -1 },
		"budget":              func(c *Config) { c.Budget = 0 },
		"budget-period":       func(c *Config) { c.BudgetPeriod = time.Millisecond },
		"batch-max":           func(c *Config) { c.BatchMax = 0 },
		"api-keys":            func(c *Config) { c.Dev = false },
		"redis":               func(c *Config) { c.Redis.Set("http://x") },
		"resume-window":       func(c *Config) { c.ResumeWindow = time.Millisecond },
		"resume-buffer-bytes": func(c *Config) { c.ResumeBufferBytes = -1 },
		"fleet-db":            func(c *Config) { c.FleetDB = "mysql://h/db" },
		"fleet-db standby":    func(c *Config) { c.FleetDB, c.FleetStandby = "postgres://h/db", true },
		"fleet-db archive":    func(c *Config) { c.FleetDB, c.FleetArchiveDir = "postgres://h/db", "a" },
	}
	for field, mutate := range cases {
		c := base()
		mutate(&c)
		err := c.Fields().Rename(c.Validate()) // Validate names Go fields; the table, flags
		if err == nil || !strings.Contains(err.Error(), `"`+strings.Fields(field)[0]+`"`) {
			t.Errorf("%s: %v", field, err)
		}
	}
	// A Config that says only how clients authenticate works once its
	// defaults are filled, and those are the flags' defaults.
	zero := Config{Dev: true}
	zero.FillDefaults()
	if err := zero.Validate(); err != nil {
		t.Errorf("zero Config (Dev): %v", err)
	}
	flagged := Config{Dev: true}
	fs := flag.NewFlagSet("cloud", flag.ContinueOnError)
	flagged.RegisterFlags(fs)
	zero.QUIC, zero.MQTT, zero.MQTTTLS, zero.BatchWindow = ":4433", ":1883", ":8883", 150*time.Millisecond // flag-only defaults
	if !reflect.DeepEqual(flagged, zero) || fs.Lookup("http").DefValue != ":8080" || fs.Lookup("budget").DefValue != "200000" {
		t.Errorf("flag defaults %+v differ from FillDefaults %+v", flagged, zero)
	}
	// --worker values are parsed once, when set: a bad one fails there.
	for _, bad := range []string{"ftp://x", "http://x:1#role=gpu", "http://x:1#colour=red", "http://x:1#capacity=0", "http://x:1#gpu=h900"} {
		var c Config
		fs := flag.NewFlagSet("cloud", flag.ContinueOnError)
		c.RegisterFlags(fs)
		if err := cli.Parse(fs, []string{"--worker", bad}, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "worker") {
			t.Errorf("--worker %s: %v", bad, err)
		}
	}
	c := base()
	if err := c.Workers.Set("http://gpu:8000#role=prefill-heavy&model=llama&capacity=64"); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	wu := c.Workers[0]
	if wu.base != "http://gpu:8000" || wu.role != sched.RolePrefill || wu.model != "llama" || wu.capacity != 64 {
		t.Fatalf("parsed %+v", wu)
	}
	if cl := wu.class(); cl.Known() {
		t.Fatalf("no #gpu, yet a class: %+v", cl)
	}
	// #key= is the bearer token for a worker that wants one (another cloud's
	// role=worker key); the flag's printed value never shows it.
	var keyed WorkerURLs
	if err := keyed.Set("http://peer:8080#key=sk-work-1&role=decode-heavy"); err != nil {
		t.Fatal(err)
	}
	if keyed[0].key != "sk-work-1" || keyed[0].base != "http://peer:8080" || strings.Contains(keyed.String(), "sk-work-1") {
		t.Fatalf("keyed worker %+v, printed %q", keyed[0], keyed.String())
	}
	// --aging-rate and --host-kv act on the built-in engines: refused
	// where none runs, or when out of range.
	noBuiltin := func(c *Config) {
		c.BuiltinWorkers = 0
		c.Workers = WorkerURLs{{raw: "http://gpu:8000"}}
	}
	for _, tc := range []struct {
		field string
		bad   func(*Config)
	}{
		{"AgingRate", func(c *Config) { c.AgingRate = -1 }},
		{"AgingRate", func(c *Config) { c.AgingRate = 1000; noBuiltin(c) }},
		{"HostKV", func(c *Config) { c.HostKV = -1 }},
		{"HostKV", func(c *Config) { c.HostKV = 1000 }},
		{"HostKV", func(c *Config) { c.HostKV = 2; noBuiltin(c) }},
	} {
		cfg := Config{HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Dev: true, Budget: 1, BatchMax: 1}
		tc.bad(&cfg)
		var fe *cli.FieldError
		if err := cfg.Validate(); !errors.As(err, &fe) || fe.Field != tc.field {
			t.Fatalf("aging rate %v, host KV %v with %d built-in workers: %v, want an error naming %s", cfg.AgingRate, cfg.HostKV, cfg.nBuiltins(), err, tc.field)
		}
	}
	// A key spelt with percent-encoding is a key too: the options are read
	// decoded, and so is what is redacted.
	for _, enc := range []string{"http://peer:8080#%6Bey=sk-work-1", "http://peer:8080#role=decode%26key=sk-work-1", "http://peer:8080#k%65y=%73k-work-1&role=decode"} {
		var l WorkerURLs
		if err := l.Set(enc); err != nil || l[0].key == "" || strings.Contains(l.String(), "sk-work-1") || strings.Contains(l.String(), "%73k-work-1") {
			t.Fatalf("worker %q: err %v, key %q, printed %q", enc, err, l[0].key, l.String())
		}
	}
	// ...nor does an error about the same URL.
	for _, bad := range []string{"http://peer:8080#key=sk-work-1&capacity=x", "http://peer:8080#role=nope&key=sk-work-1", "http://peer:8080#key=sk-work-1&colour=red",
		"http://peer:8080#%6Bey=sk-work-1&colour=red", "http://peer:8080#role=decode%26key=sk-work-1&capacity=0", "http://[bad#key=sk-work-1",
		// A key with a separator or an escape in it falls apart into pieces
		// that are not options; none of them is shown either.
		"http://peer:8080#role=decode;key=sk-work-1", "http://peer:8080#key=sk-wo%26rk-1", "http://peer:8080#key=sk-wo%25zzrk-1",
		"http://peer:8080#key=sk-wo,rk-1"} {
		if err := keyed.Set(bad); err == nil || strings.Contains(err.Error(), "sk-work-1") || strings.Contains(err.Error(), "rk-1") || !strings.Contains(err.Error(), "REDACTED") && !strings.Contains(err.Error(), "not shown") {
			t.Fatalf("worker %q: error %v shows the key or no sign of it", bad, err)
		}
	}
	// #gpu= prices the worker by the simulator's profile of that GPU.
	if err := c.Workers.Set("http://l4:8000#gpu=l4,http://h100:8000#gpu=h100&model=llama3.1-8b"); err != nil {
		t.Fatal(err)
	}
	l4, h100 := c.Workers[1].class(), c.Workers[2].class()
	if l4.ID != sched.ClassL4 || h100.ID != sched.ClassH100 || !(h100.PrefillTokensPerSec > 4*l4.PrefillTokensPerSec) || !(h100.PricePerHour > l4.PricePerHour) {
		t.Fatalf("classes: l4 %+v, h100 %+v", l4, h100)
	}
}

// TestCloudFleetAdmin: the embedded broker and the fleet manager run, and
// the fleet admin routes sit behind the API keys when keys are configured.
func TestCloudFleetAdmin(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(keys, []byte("sk-operator-1 ops role=operator\n"), 0o600)
	c := startCloud(t, func(cfg *Config) {
		cfg.MQTT, cfg.MQTTTLS, cfg.APIKeys, cfg.BuiltinWorkers = "127.0.0.1:0", "", keys, 1
	})
	if c.MQTTAddr() == "" {
		t.Fatal("no embedded broker")
	}
	get := func(key string) int {
		req, _ := http.NewRequest("GET", "http://"+c.HTTPAddr()+"/v1/fleet/devices", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := get(""); s != 401 {
		t.Fatalf("fleet admin without a key: %d", s)
	}
	if s := get("sk-operator-1"); s != 200 {
		t.Fatalf("fleet admin with a key: %d", s)
	}
	resp, err := http.Get("http://" + c.HTTPAddr() + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz with fleet: %v %v", resp, err)
	}
	resp.Body.Close()
}

// pprof is off by default and, with --admin-listen, served with /metrics on
// its own listener, never on the public HTTP API.
func TestCloudAdminListener(t *testing.T) {
	off := startCloud(t, nil)
	if off.AdminAddr() != "" {
		t.Fatalf("admin listener on by default: %s", off.AdminAddr())
	}
	if resp, err := http.Get("http://" + off.HTTPAddr() + "/debug/pprof/"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("public listener serves pprof: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	c := startCloud(t, func(cfg *Config) { cfg.AdminListen = "127.0.0.1:0" })
	metricstest.CheckPprof(t, c.AdminAddr())
	metricstest.CheckConventions(t, metricstest.Scrape(t, "http://"+c.AdminAddr()+"/metrics"))
}
