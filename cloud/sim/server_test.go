package sim

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/llm"
	"go.uber.org/goleak"
)

// TestFleetAsRemote drives a simulated worker with the coordinator's own
// remote-engine client: the stream arrives token by token and the probe
// reads vLLM's metric names.
func TestFleetAsRemote(t *testing.T) {
	f, err := StartFleet("sim://l4?model=qwen2.5-7b&n=1&role=decode")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Spec().Role.String() != "decode-heavy" || len(f.URLs()) != 1 {
		t.Fatalf("spec %+v urls %v", f.Spec(), f.URLs())
	}
	r, err := worker.NewRemote(worker.RemoteConfig{URL: f.URLs()[0], Model: "qwen2.5-7b"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	n := 0
	prompt := strings.Repeat("the same long prompt ", 40)
	for range 2 {
		fin, err := r.Generate(ctx, &llm.Request{Model: "auto", MaxTokens: 5, Messages: []llm.Message{{Role: "user", Content: prompt}}},
			func(llm.Token) error { n++; return nil })
		if err != nil {
			t.Fatal(err)
		}
		if fin.CompletionTokens != 5 {
			t.Fatalf("final %+v", fin)
		}
	}
	if n != 10 {
		t.Fatalf("%d tokens streamed, want 10", n)
	}
	l, err := r.Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The second identical prompt hit the prefix cache.
	if l.Capacity != 256 || l.Running != 0 || l.PromptTokens == 0 || l.PrefixHitTokens == 0 {
		t.Fatalf("probe %+v", l)
	}
	// Over the model length: vLLM's 400, the client's invalid error.
	_, err = r.Generate(ctx, &llm.Request{Model: "auto", MaxTokens: 4096, Messages: []llm.Message{{Role: "user", Content: strings.Repeat("x", 200000)}}}, func(llm.Token) error { return nil })
	if llm.CodeOf(err) != llm.CodeInvalid {
		t.Fatalf("over-length request: %v", err)
	}
}

func TestParseURL(t *testing.T) {
	s, err := ParseURL("sim://h100?model=llama3.1-70b&n=2&tp=4")
	if err != nil || s.N != 2 || s.TP != 4 || s.Model.Name != "llama3.1-70b" || s.GPU.Name != "h100" {
		t.Fatalf("%+v %v", s, err)
	}
	for _, bad := range []string{"http://h100", "sim://", "sim://h100?n=0", "sim://h100?model=gpt5", "sim://h100?speed=2", "sim://t4?model=llama3.1-70b&tp=1", "sim://h100?role=gpu"} {
		if _, err := ParseURL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestServerCancel: a client that goes away frees its sequence and blocks.
// It runs in a synctest bubble: the engine loop's step timers fire in fake
// time, so the roofline's step lengths hold exactly however loaded the host.
func TestServerCancel(t *testing.T) { synctest.Test(t, testServerCancel) }

func testServerCancel(t *testing.T) {
	s := NewServer(mustDeployment(t, "h100", "llama3.1-8b", 1))
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := s.Generate(ctx, &llm.Request{MaxTokens: 4000, Messages: []llm.Message{{Role: "user", Content: strings.Repeat("x", 4000)}}},
		func(llm.Token) error {
			if n++; n == 3 {
				cancel()
			}
			return nil
		})
	if err == nil || n < 3 || n > 100 {
		t.Fatalf("err %v after %d tokens", err, n)
	}
	// The engine drops it at its next step boundary: sleeping lets the
	// bubble's clock run to the step timer; a second is far more than one
	// step of an 8B model on an H100.
	time.Sleep(time.Second)
	synctest.Wait()
	s.mu.Lock()
	idle, usage := s.eng.Idle(), s.eng.KVUsage()
	s.mu.Unlock()
	if !idle || usage != 0 {
		t.Fatalf("cancelled sequence still held: idle %v, KV usage %v", idle, usage)
	}
}
