package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/llm"
)

// transfers records the transfer waits a fleet's servers are asked for,
// instead of sleeping them.
type transfers struct {
	mu   sync.Mutex
	seen []time.Duration
}

func (tr *transfers) hook(f *Fleet) {
	for _, s := range f.servers {
		s.kv.sleep = func(_ context.Context, d time.Duration) error {
			tr.mu.Lock()
			tr.seen = append(tr.seen, d)
			tr.mu.Unlock()
			return nil
		}
	}
}

func (tr *transfers) last(t *testing.T) time.Duration {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.seen) == 0 {
		t.Fatal("no transfer")
	}
	return tr.seen[len(tr.seen)-1]
}

func startFleet(t *testing.T, url string, tr *transfers) (*Fleet, []*worker.Remote) {
	t.Helper()
	f, err := StartFleet(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	tr.hook(f)
	var rs []*worker.Remote
	for _, u := range f.URLs() {
		r, err := worker.NewRemote(worker.RemoteConfig{URL: u, Model: f.Spec().Model.Name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		rs = append(rs, r)
	}
	return f, rs
}

// TestServerSplit: the coordinator's remote-to-remote split (worker.Remote's
// PrefillTo with push_to, then Resume) runs on simulated workers: the
// prefill engine computes the prompt and samples one token, the decode
// engine admits the handed-over blocks without computing them and decodes
// the rest; the transfer waits the link's time, picked as the Cluster picks
// it (NVLink inside one 8-GPU H100 fleet, 400 Gb RDMA from another fleet,
// or the URL's link=).
func TestServerSplit(t *testing.T) {
	var tr transfers
	f, rs := startFleet(t, "sim://h100?model=llama3.1-8b&n=2", &tr)
	ctx := context.Background()
	prompt := strings.Repeat("a prompt long enough to fill blocks ", 60)
	req := &llm.Request{MaxTokens: 6, Messages: []llm.Message{{Role: "user", Content: prompt}}}
	h, err := rs[0].PrefillTo(ctx, req, rs[1])
	if err != nil {
		t.Fatal(err)
	}
	d := f.servers[0].eng.d
	n := f.servers[0].promptSeq(req, 1).Prompt
	if h.PromptTokens != n || h.Bytes != int64(float64(n)*d.Model.KVBytesPerToken()) || h.Prefill <= 0 {
		t.Fatalf("handoff %+v; want %d prompt tokens", h, n)
	}
	if got, want := tr.last(t), links["nvlink"].TransferTime(d, n); got != want {
		t.Fatalf("transfer inside the fleet waited %v, want NVLink's %v", got, want)
	}
	toks := 0
	fin, err := rs[1].Resume(ctx, req, h, func(llm.Token) error { toks++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if toks != 6 || fin.CompletionTokens != 6 {
		t.Fatalf("decode streamed %d tokens, final %+v; want 6", toks, fin)
	}
	pre, dec := statsOf(f.servers[0]), statsOf(f.servers[1])
	if pre.PromptTokens != uint64(n) || pre.OutputTokens != 1 || dec.PromptTokens != 0 || dec.OutputTokens != 5 {
		t.Fatalf("prefill engine %+v, decode engine %+v: want the prompt and 1 token there, 5 decoded here", pre, dec)
	}
	// Both engines count their steps, and how late they ran, on /metrics.
	resp, err := http.Get(f.URLs()[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var m bytes.Buffer
	m.ReadFrom(resp.Body)
	resp.Body.Close()
	if !strings.Contains(m.String(), "phaseless_sim_step_late_seconds_total{") || strings.Contains(m.String(), `phaseless_sim_steps_total{model_name="llama3.1-8b"} 0`) {
		t.Fatalf("decode worker's metrics:\n%s", m.String())
	}
	// The handoff was taken: a second decode from it fails.
	if _, err := rs[1].Resume(ctx, req, h, func(llm.Token) error { return nil }); err == nil {
		t.Fatal("a handoff was decoded twice")
	}

	// From another fleet: another machine, 400 Gb RDMA.
	_, other := startFleet(t, "sim://h100?model=llama3.1-8b&n=1", &tr)
	if _, err := other[0].PrefillTo(ctx, req, rs[1]); err != nil {
		t.Fatal(err)
	}
	if got, want := tr.last(t), links["rdma400"].TransferTime(d, n); got != want {
		t.Fatalf("transfer from another fleet waited %v, want RDMA's %v", got, want)
	}
	// The URL's link applies to every handoff its workers receive.
	_, tcp := startFleet(t, "sim://h100?model=llama3.1-8b&n=1&link=tcp", &tr)
	if _, err := rs[0].PrefillTo(ctx, req, tcp[0]); err != nil {
		t.Fatal(err)
	}
	if got, want := tr.last(t), links["tcp"].TransferTime(d, n); got != want || want < 10*links["nvlink"].TransferTime(d, n) {
		t.Fatalf("transfer over tcp waited %v, want %v (over 10× NVLink's)", got, want)
	}
	// Another model's handoff is refused, and the split falls back.
	_, qwen := startFleet(t, "sim://h100?model=qwen2.5-7b&n=1", &tr)
	if _, err := rs[0].PrefillTo(ctx, req, qwen[0]); llm.CodeOf(err) != llm.CodeInvalid {
		t.Fatalf("handoff to another model: %v", err)
	}
}

func statsOf(s *Server) EngineStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eng.Stats()
}

// TestServerSplitRefusals: what a simulated worker cannot do is refused in
// the KV endpoints' error format, so the coordinator runs the request
// colocated (handoff_failed).
func TestServerSplitRefusals(t *testing.T) {
	var tr transfers
	f, rs := startFleet(t, "sim://h100?model=llama3.1-8b&n=1", &tr)
	post := func(path, ctype, body string) error {
		resp, err := http.Post(f.URLs()[0]+path, ctype, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		return worker.ReadKVError(resp)
	}
	// No push_to: the caller wants blocks a simulated worker does not have.
	if err := post(worker.KVPrefillPath, "application/json", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`); llm.CodeOf(err) != llm.CodeInvalid {
		t.Fatalf("prefill without push_to: %v", err)
	}
	// A real engine's handoff (or anything else) is not a SimHandoff.
	if err := post(worker.KVHandoffsPath, worker.HandoffContentType, "PLKV\x01garbage"); llm.CodeOf(err) != llm.CodeInvalid {
		t.Fatalf("foreign handoff: %v", err)
	}
	// A parked handoff must match the decode request's prompt.
	body, _ := json.Marshal(SimHandoff{Version: simHandoffVersion, Model: "llama3.1-8b", PromptTokens: 999, Bytes: 1})
	resp, err := http.Post(f.URLs()[0]+worker.KVHandoffsPath, SimHandoffContentType, bytes.NewReader(body))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("park: %v %v", resp, err)
	}
	var a worker.KVParkAnswer
	json.NewDecoder(resp.Body).Decode(&a)
	resp.Body.Close()
	_, err = rs[0].Generate(context.Background(), &llm.Request{KVHandoff: a.Handoff, MaxTokens: 4, Messages: []llm.Message{{Role: "user", Content: "hi"}}}, func(llm.Token) error { return nil })
	if llm.CodeOf(err) != llm.CodeInvalid || !strings.Contains(err.Error(), "999") {
		t.Fatalf("decode of a mismatched handoff: %v", err)
	}
}

// TestHandoffCannotHoldTheNIC: a handoff claiming a prompt longer than
// the model takes is refused, and a transfer its client gives up returns
// its time on the NIC, so an honest transfer after either does not wait
// behind it.
func TestHandoffCannotHoldTheNIC(t *testing.T) {
	f, err := StartFleet("sim://h100?model=llama3.1-8b&n=1")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var waits []time.Duration
	s := f.servers[0]
	s.kv.sleep = func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		if len(waits) == 1 {
			return context.Canceled // the client hangs up
		}
		return nil
	}
	post := func(tokens int) int {
		body, _ := json.Marshal(SimHandoff{Version: simHandoffVersion, Model: s.model, PromptTokens: tokens, GPU: "H100", Bytes: 1})
		resp, err := http.Post(f.URLs()[0]+worker.KVHandoffsPath, SimHandoffContentType, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(1 << 40); code != http.StatusBadRequest {
		t.Fatalf("a handoff of 2^40 prompt tokens: %d, want 400", code)
	}
	if len(waits) != 0 {
		t.Fatalf("the refused handoff reserved the NIC for %v", waits)
	}
	post(100_000) // given up
	if code := post(100); code != http.StatusOK {
		t.Fatalf("honest handoff: %d", code)
	}
	if len(waits) != 2 || waits[1] >= waits[0] {
		t.Fatalf("waits %v: the honest 100-token transfer waited behind the 100k-token one its client gave up", waits)
	}
}

// FuzzDecodeSimHandoff: what the decoder accepts re-encodes to an equal
// handoff, and it never panics.
func FuzzDecodeSimHandoff(f *testing.F) {
	good, _ := json.Marshal(SimHandoff{Version: 1, Model: "llama3.1-8b", PromptTokens: 300, Fleet: "ab", GPU: "h100", Bytes: 39321600})
	f.Add(good)
	f.Add([]byte(`{"sim_kv":1,"model":"m","prompt_tokens":1,"kv_bytes":0}`))
	f.Add([]byte(`{"sim_kv":2}`))
	f.Add([]byte(`{"sim_kv":1,"model":"m","prompt_tokens":1} {}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		h, err := DecodeSimHandoff(raw)
		if err != nil {
			return
		}
		again, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		h2, err := DecodeSimHandoff(again)
		if err != nil || h2 != h {
			t.Fatalf("%q decoded to %+v, which re-encodes to %q: %+v, %v", raw, h, again, h2, err)
		}
	})
}
