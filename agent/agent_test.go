package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/internal/metrics/metricstest"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/transport/fleetwire"
	"github.com/phaseless/phaseless/transport/pki"
	"github.com/phaseless/phaseless/transport/quic"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(cleanupAfter{m}) }

// cleanupAfter removes what the tests built once for all of them (the
// phaseless-cloud binary) after they ran.
type cleanupAfter struct{ m *testing.M }

func (c cleanupAfter) Run() int {
	code := c.m.Run()
	removeBuiltCloud()
	return code
}

// testConfig is an offline agent on a random loopback port with its own data
// directory, routing by the entropy rule unless a test says otherwise.
func testConfig(t testing.TB) Config {
	t.Helper()
	return testConfigIn(t.TempDir())
}

// testConfigIn is testConfig on the data directory dir.
func testConfigIn(dir string) Config {
	return Config{
		Listen: "127.0.0.1:0", DataDir: dir, Predictor: "entropy",
		LocalConcurrency: 4, LocalQueue: 256, RouteThreshold: 0.5, RouteHysteresis: 0.1, MaxOutputTokens: 4096,
		CloudRetryMax: 300 * time.Millisecond, CloudFirstToken: 3 * time.Second, ResumeDeadline: DefaultResumeDeadline,
		TelemetryRate: 500, TelemetryMax: 200_000, UpdateOnMetered: "defer",
	}
}

// startAgent runs an agent until the test ends and returns its base URL.
func startAgent(t *testing.T, cfg Config) (*Agent, string) {
	t.Helper()
	a, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a, runAgent(t, a)
}

// runAgent runs a built agent until the test ends and returns its base URL.
func runAgent(t *testing.T, a *Agent) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent Run: %v", err)
		}
	})
	return "http://" + a.Addr().String()
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

func post(t *testing.T, url, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// postJSON posts a JSON body; safe off the test goroutine.
func postJSON(url, body string) (*http.Response, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return client.Do(req)
}

type chatResp struct {
	Choices []struct {
		Message struct{ Content string }
	}
	Usage struct {
		CompletionTokens int `json:"completion_tokens"`
	}
	Error *struct{ Message, Type string }
}

func readJSON[T any](t *testing.T, r io.Reader) T {
	t.Helper()
	var v T
	if err := json.NewDecoder(r).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// pendingRecords returns the request records in the agent's telemetry store.
func pendingRecords(t *testing.T, a *Agent, want int) []fleetwire.RequestRecord {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // hang guard: a shadow sample is stored off the request path
	for {
		recs, err := a.Telemetry().Pending(10000)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) >= want || time.Now().After(deadline) {
			out := make([]fleetwire.RequestRecord, 0, len(recs))
			for _, r := range recs {
				var rr fleetwire.RequestRecord
				if err := json.Unmarshal(r.Data, &rr); err != nil {
					t.Fatal(err)
				}
				out = append(out, rr)
			}
			return out
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLocalPathEndToEnd(t *testing.T) {
	cfg := testConfig(t)
	cfg.Socket = filepath.Join(t.TempDir(), "agent.sock")
	a, url := startAgent(t, cfg)

	resp := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"turn on the air conditioning"}],"max_tokens":8,"temperature":0}`)
	if resp.StatusCode != 200 || resp.Header.Get("x-phaseless-route") != "local" {
		t.Fatalf("status %d route %q", resp.StatusCode, resp.Header.Get("x-phaseless-route"))
	}
	if st := resp.Header.Get("Server-Timing"); !strings.HasPrefix(st, "engine;dur=") {
		t.Fatalf("Server-Timing %q: the local engine's TTFT is not reported", st)
	}
	c := readJSON[chatResp](t, resp.Body)
	if len(c.Choices) != 1 || c.Usage.CompletionTokens < 1 || c.Usage.CompletionTokens > 8 {
		t.Fatalf("completion %+v", c)
	}

	// The same API over the Unix socket.
	uc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", cfg.Socket)
	}}}
	defer uc.CloseIdleConnections()
	uresp, err := uc.Post("http://agent/v1/messages", "application/json", strings.NewReader(`{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer uresp.Body.Close()
	if uresp.StatusCode != 200 || uresp.Header.Get("x-phaseless-route") != "local" {
		t.Fatalf("unix socket: %d", uresp.StatusCode)
	}

	recs := pendingRecords(t, a, 2)
	if len(recs) != 2 {
		t.Fatalf("%d telemetry records, want 2", len(recs))
	}
	// The chat request is the one with the longer prompt.
	r := recs[0]
	if recs[1].PromptTokens > r.PromptTokens {
		r = recs[1]
	}
	if r.Decision != "local" || r.Path != "local" || r.Outcome != "ok" || r.FeatureVersion == 0 || len(r.Features) == 0 || r.CompletionTokens != c.Usage.CompletionTokens || r.TTFTMillis <= 0 || !strings.Contains(r.Reason, "offline-only") {
		t.Errorf("record %+v", r)
	}

	mresp, err := client.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer mresp.Body.Close()
	m, _ := io.ReadAll(mresp.Body)
	fams := metricstest.Parse(t, string(m))
	metricstest.CheckConventions(t, fams)
	for _, want := range []struct {
		name   string
		labels []string
	}{
		{"phaseless_route_decisions_total", []string{"path=local"}},
		{"phaseless_api_requests_total", []string{"status=200"}},
		{"phaseless_api_ttft_seconds", nil},
		{"phaseless_route_ttft_seconds", []string{"path=local"}},
	} {
		if v, ok := metricstest.Value(fams, want.name, want.labels...); v != 2 {
			t.Errorf("%s%v = %v (found %v), want 2", want.name, want.labels, v, ok)
		}
	}
	for _, name := range []string{"phaseless_agent_local_refused_total", "phaseless_agent_local_kv_faults_total", "phaseless_agent_telemetry_pending"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("metrics lack %s", name)
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		hr, err := client.Get(url + p)
		if err != nil {
			t.Fatal(err)
		}
		hr.Body.Close()
		if hr.StatusCode != 200 {
			t.Errorf("%s: %d", p, hr.StatusCode)
		}
	}
}

// Two hundred clients (fifty under -race) streaming at once through the
// local path: every one gets a complete, well-formed stream and the agent
// keeps no goroutine.
func TestTwoHundredConcurrentLocalClients(t *testing.T) {
	cfg := testConfig(t)
	a, url := startAgent(t, cfg)
	n := 200
	if raceEnabled {
		n = 50 // 200 generations under the race detector take a minute; make test also runs 200 without it
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"messages":[{"role":"user","content":"request %d: what is the tyre pressure?"}],"max_tokens":6,"stream":true}`, i)
			resp, err := postJSON(url+"/v1/chat/completions", body)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				b, _ := io.ReadAll(resp.Body)
				errs <- fmt.Errorf("client %d: status %d: %s", i, resp.StatusCode, b)
				return
			}
			sc := bufio.NewScanner(resp.Body)
			last := ""
			for sc.Scan() {
				if l := sc.Text(); l != "" {
					last = l
				}
			}
			if last != "data: [DONE]" {
				errs <- fmt.Errorf("client %d: stream ended with %q", i, last)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if recs := pendingRecords(t, a, n); len(recs) != n {
		t.Errorf("%d telemetry records, want %d", len(recs), n)
	}
}

// A full local queue answers 503 in each API's own error shape at once.
func TestLocalQueueFullIs503(t *testing.T) {
	cfg := testConfig(t)
	cfg.LocalConcurrency, cfg.LocalQueue = 1, 1
	_, url := startAgent(t, cfg)
	const n = 24
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	var overloaded string
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":64}`))
			req.Header.Set("Content-Type", "application/json") // the local API takes JSON only
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			mu.Lock()
			defer mu.Unlock()
			statuses[resp.StatusCode]++
			if resp.StatusCode == 503 {
				overloaded = string(b)
			}
		})
	}
	wg.Wait()
	if statuses[200] < 1 || statuses[503] < 1 || statuses[200]+statuses[503] != n {
		t.Fatalf("statuses %v", statuses)
	}
	if !strings.Contains(overloaded, `"code":"overloaded"`) || !strings.Contains(overloaded, "queue depth 1") {
		t.Errorf("503 body %s", overloaded)
	}
}

// gatedEngine passes a real engine's tokens through and, once armed, holds
// the stream after `after` tokens until the test has killed the cloud.
type gatedEngine struct {
	inner llm.Generator
	after int
	armed atomic.Bool
	held  chan struct{} // closed when a stream is being held
	once  sync.Once
}

func (g *gatedEngine) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	n := 0
	return g.inner.Generate(ctx, req, func(tok llm.Token) error {
		if err := emit(tok); err != nil {
			return err
		}
		if n++; g.armed.Load() && n == g.after {
			g.once.Do(func() { close(g.held) })
			<-ctx.Done() // the server is being closed under us
			return ctx.Err()
		}
		return nil
	})
}

// cloudServer is a real phaseless/1 QUIC server with the built-in engine.
type cloudServer struct {
	srv  *quic.Server
	done chan error
	eng  *lm.Engine
}

// builtinEngine is the built-in engine on the shipped edge model; the
// caller closes it.
func builtinEngine(t *testing.T) *lm.Engine {
	t.Helper()
	m, err := defaultModel()
	if err != nil {
		t.Fatal(err)
	}
	return modelEngine(t, m)
}

// modelEngine is the built-in engine on m; the caller closes it.
func modelEngine(t *testing.T, m *lm.Model) *lm.Engine {
	t.Helper()
	eng, err := lm.NewEngine(m, lm.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func startCloud(t *testing.T, pkiDir, addr string, gate *gatedEngine) *cloudServer {
	t.Helper()
	m, err := defaultModel()
	if err != nil {
		t.Fatal(err)
	}
	return startCloudModel(t, pkiDir, addr, gate, m)
}

// startCloudModel is startCloud with the built-in engine running m.
func startCloudModel(t *testing.T, pkiDir, addr string, gate *gatedEngine, m *lm.Model) *cloudServer {
	t.Helper()
	tc, err := pki.ServerTLS(pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	eng := modelEngine(t, m)
	gate.inner = eng
	srv, err := quic.NewServer(quic.ServerConfig{Addr: addr, TLS: tc, Handler: gate})
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	c := &cloudServer{srv: srv, done: make(chan error, 1), eng: eng}
	go func() { c.done <- srv.Serve(context.Background()) }()
	return c
}

func (c *cloudServer) stop(t *testing.T) {
	t.Helper()
	c.srv.Close()
	if err := <-c.done; err != nil {
		t.Errorf("cloud Serve: %v", err)
	}
	c.eng.Close()
}

// freeUDPAddr returns a loopback UDP address nobody listens on (yet).
func freeUDPAddr(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

type sseLine struct{ event, data string }

func readSSE(t *testing.T, r io.Reader) []sseLine {
	t.Helper()
	var out []sseLine
	sc := bufio.NewScanner(r)
	ev := ""
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "event: "):
			ev = l[7:]
		case strings.HasPrefix(l, "data: "):
			out = append(out, sseLine{ev, l[6:]})
			ev = ""
		}
	}
	return out
}

// TestCloudFallbacks walks the uplink through its life on real components —
// the agent's QUIC client against a real phaseless/1 server running the
// built-in engine:
//  1. the agent starts while the cloud is down: requests run locally, and a
//     request forced to the cloud says why it did not get there;
//  2. the cloud comes up on that address: the agent connects by itself and
//     cloud-bound requests run there;
//  3. the cloud dies mid-stream: the stream ends with an error event after
//     the tokens already sent, never silently and never restarted locally;
//  4. afterwards, with the cloud gone, requests fall back to local again.
func TestCloudFallbacks(t *testing.T) {
	pkiDir := t.TempDir()
	if err := pki.EnsureDev(pkiDir, "car-1"); err != nil {
		t.Fatal(err)
	}
	cloudAddr := freeUDPAddr(t)
	cfg := testConfig(t)
	cfg.Cloud, cfg.DeviceID, cfg.PKIDir = cloudAddr, "car-1", pkiDir
	a, url := startAgent(t, cfg)
	const chat = `{"messages":[{"role":"user","content":"Zx9#qL@2vR!m8$Kp^3&Wn*7(Yb)5_Tc+1=Hd{6}Je[4]Gf|0;Ua:Os"}],"max_tokens":6,"temperature":0}`

	// 1. Cloud down at start.
	resp := post(t, url+"/v1/chat/completions", chat, "x-phaseless-route", "cloud")
	if resp.StatusCode != 200 || resp.Header.Get("x-phaseless-route") != "local" || resp.Header.Get("x-fallback-reason") == "" {
		t.Fatalf("forced cloud while down: %d route %q fallback %q", resp.StatusCode, resp.Header.Get("x-phaseless-route"), resp.Header.Get("x-fallback-reason"))
	}
	resp = post(t, url+"/v1/chat/completions", chat) // high entropy: the router wants the cloud
	if resp.StatusCode != 200 || resp.Header.Get("x-phaseless-route") != "local" {
		t.Fatalf("auto while down: %d route %q", resp.StatusCode, resp.Header.Get("x-phaseless-route"))
	}
	recs := pendingRecords(t, a, 2)
	if len(recs) != 2 || recs[0].FallbackReason == "" || recs[0].Decision != "cloud" || recs[0].Path != "local" || !strings.Contains(recs[1].Reason, "cloud unreachable") {
		t.Fatalf("records while down: %+v", recs)
	}

	// 2. The cloud comes back.
	gate := &gatedEngine{after: 2, held: make(chan struct{})}
	cloud := startCloud(t, pkiDir, cloudAddr, gate)
	waitUntil(t, "the agent to reconnect", func() bool { return a.cloud.Link().Connected })
	resp = post(t, url+"/v1/chat/completions", chat)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("x-phaseless-route"), "cloud") || resp.Header.Get("x-fallback-reason") != "" {
		t.Fatalf("after the cloud came back: %d route %q fallback %q", resp.StatusCode, resp.Header.Get("x-phaseless-route"), resp.Header.Get("x-fallback-reason"))
	}
	if c := readJSON[chatResp](t, resp.Body); c.Usage.CompletionTokens < 1 {
		t.Fatalf("cloud completion %+v", c)
	}

	// 3. Stop the cloud mid-stream (both APIs share the path; OpenAI here).
	// Its generations go with it, so there is nothing to resume: the
	// device's engine finishes the answer from the text delivered, the
	// stream ends whole, and says so in its stats field and telemetry.
	gate.armed.Store(true)
	resp = post(t, url+"/v1/chat/completions", strings.Replace(chat, `"max_tokens":6`, `"max_tokens":64,"stream":true`, 1), "x-phaseless-route", "cloud")
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	go func() { <-gate.held; cloud.stop(t) }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	evs := readSSE(t, bytes.NewReader(body))
	if len(evs) < 3 || evs[len(evs)-1].data != "[DONE]" || strings.Count(string(body), `"continued":{"route":"local","reason":"cloud_lost"}`) != 1 {
		t.Fatalf("want cloud chunks, local chunks marked continued once, and [DONE]:\n%s", body)
	}
	recs = pendingRecords(t, a, 4)
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4", len(recs))
	}
	if r := recs[3]; r.Outcome != "ok" || r.ContinuedOn != "local" || r.ContinueReason != "cloud_lost" || r.FallbackReason != "" || !strings.HasPrefix(r.Path, "cloud") {
		t.Errorf("record of the continued stream %+v", r)
	}

	// 4. With the cloud gone again, the fallback works again.
	resp = post(t, url+"/v1/messages", `{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, "x-phaseless-route", "cloud")
	if resp.StatusCode != 200 || resp.Header.Get("x-phaseless-route") != "local" || resp.Header.Get("x-fallback-reason") == "" {
		t.Fatalf("after the cloud died: %d route %q fallback %q", resp.StatusCode, resp.Header.Get("x-phaseless-route"), resp.Header.Get("x-fallback-reason"))
	}
}

func TestConfigValidate(t *testing.T) {
	base := testConfig(t)
	tests := []struct {
		field string
		mod   func(*Config)
	}{
		{"listen", func(c *Config) { c.Listen = "7070" }},
		{"cloud", func(c *Config) { c.Cloud = "nohost" }},
		{"device-id", func(c *Config) { c.Cloud = "127.0.0.1:4433" }},
		{"pki-dir", func(c *Config) { c.Cloud, c.DeviceID = "127.0.0.1:4433", "car-1" }},
		{"local-url", func(c *Config) { c.Model, c.LocalURL = "m.gguf", "http://127.0.0.1:8081" }},
		{"data-dir", func(c *Config) { c.DataDir = "" }},
		{"local-concurrency", func(c *Config) { c.LocalConcurrency = 0 }},
		{"local-queue", func(c *Config) { c.LocalQueue = -1 }},
		{"threads", func(c *Config) { c.Threads = -1 }},
		{"route-threshold", func(c *Config) { c.RouteThreshold = 1.5 }},
		{"route-hysteresis", func(c *Config) { c.RouteHysteresis = 1.2 }},
		{"max-output-tokens", func(c *Config) { c.MaxOutputTokens = 0 }},
		{"cloud-retry-max", func(c *Config) { c.CloudRetryMax = time.Millisecond }},
		{"cloud-first-token-timeout", func(c *Config) { c.CloudFirstToken = 0 }},
		{"resume-deadline", func(c *Config) { c.ResumeDeadline = time.Millisecond }},
		{"telemetry-rate", func(c *Config) { c.TelemetryRate = -1 }},
		{"telemetry-max-records", func(c *Config) { c.TelemetryMax = 10 }},
	}
	for _, tt := range tests {
		c := base
		tt.mod(&c)
		err := c.Fields().Rename(c.Validate()) // Validate names Go fields; the table, flags
		if err == nil || !strings.Contains(err.Error(), `"`+tt.field+`"`) {
			t.Errorf("%s: %v", tt.field, err)
		}
	}
	if err := base.Validate(); err != nil {
		t.Error(err)
	}
	// The zero Config works once its defaults are filled, and the defaults
	// are the flags' defaults.
	var zero Config
	zero.FillDefaults()
	if err := zero.Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	var flagged Config
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	flagged.RegisterFlags(fs)
	zero.LocalQueue, zero.RouteHysteresis = 64, 0.1 // the flag-only defaults
	if !reflect.DeepEqual(flagged, zero) || fs.Lookup("listen").DefValue != "127.0.0.1:7070" || fs.Lookup("cloud-retry-max").DefValue != "30s" {
		t.Errorf("flag defaults %+v differ from FillDefaults %+v", flagged, zero)
	}
	for _, f := range zero.Fields() {
		if fs.Lookup(f.Flag) == nil {
			t.Errorf("field %s: no flag --%s", f.Go, f.Flag)
		}
	}
}

// A start-up failure after New has opened things must come back as an error
// naming the field, with everything opened so far released — not a crash.
func TestNewFailureReleasesAndNamesField(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := testConfig(t)
	cfg.Listen = busy.Addr().String()
	a, err := New(cfg, nil)
	var fe *cli.FieldError
	if a != nil || !errors.As(err, &fe) || fe.Field != "Listen" || cfg.Fields().Flag(fe.Field) != "listen" {
		t.Fatalf("New on a busy port = %v, %v; want a FieldError for listen", a, err)
	}
	// The telemetry store was opened and must have been closed: it opens again.
	cfg.Listen = "127.0.0.1:0"
	a, err = New(cfg, nil)
	if err != nil {
		t.Fatalf("reopen after a failed New: %v", err)
	}
	a.Close()
}

// TestReloadPredictorFromEntropyRule: the entropy rule is a predictor behind
// the same Swappable as a learned model, so the fleet's reload-predictor
// command swaps it for a model file and back, and the router's decisions say
// which one decided.
func TestReloadPredictorFromEntropyRule(t *testing.T) {
	a, err := New(testConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	source := func() string {
		t.Helper()
		return a.pred.Source()
	}
	if s := source(); s != "entropy-rule" {
		t.Fatalf("started with %q", s)
	}
	reload := func(path string) error {
		_, err := a.reloadPredictor(context.Background(), fleetwire.Command{ID: "c1", Name: "reload-predictor", Args: map[string]string{"path": path}})
		return err
	}
	if err := reload("../models/predictor/predictor.onnx"); err != nil || source() != "predictor" {
		t.Fatalf("swap to the shipped model: %v, now %q", err, source())
	}
	if err := reload(filepath.Join(t.TempDir(), "missing.onnx")); err == nil || source() != "predictor" {
		t.Fatalf("a missing file was accepted or replaced the model: %v, now %q", err, source())
	}
	if err := reload("entropy"); err != nil || source() != "entropy-rule" {
		t.Fatalf("swap back to the rule: %v, now %q", err, source())
	}
	if err := reload(""); err == nil {
		t.Fatal("an empty path was accepted")
	}
}

// TestThreadsFlag: the built-in engine computes on every core the process
// may use unless --threads says how many.
func TestThreadsFlag(t *testing.T) {
	for _, c := range []struct{ flag, want int }{{0, runtime.GOMAXPROCS(0)}, {3, 3}} {
		cfg := Config{DataDir: t.TempDir(), Threads: c.flag}
		cfg.FillDefaults()
		le, err := openEngine(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		eng, _ := le.swap.Current()
		if got := eng.(*lm.Engine).Config().Threads; got != c.want {
			t.Errorf("--threads %d: engine runs %d threads, want %d", c.flag, got, c.want)
		}
		if err := le.close(); err != nil {
			t.Fatal(err)
		}
	}
}
