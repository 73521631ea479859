package worker

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/transport/httpapi"
)

func TestHandoffStoreExpiresAndBounds(t *testing.T) {
	now := time.Unix(1e9, 0) // one goroutine: a plain variable is the clock
	s := NewHandoffStore(HandoffStoreConfig{MaxBytes: 100, TTL: time.Second, Now: func() time.Time { return now }})
	h := &lm.Handoff{}
	a, err := s.Put(h, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(h, 60); llm.CodeOf(err) != llm.CodeOverloaded {
		t.Fatalf("over the byte bound: %v", err)
	}
	now = now.Add(time.Second)
	if _, ok := s.Take(a); ok {
		t.Fatal("an expired handoff was taken")
	}
	b, err := s.Put(h, 60) // the expired one no longer counts
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Take(b); !ok || got != h {
		t.Fatal("a fresh handoff was not found")
	}
	if _, ok := s.Take(b); ok {
		t.Fatal("a handoff was taken twice")
	}
	if n, bytes := s.Parked(); n != 0 || bytes != 0 {
		t.Fatalf("parked %d (%d bytes) after every take", n, bytes)
	}
}

// kvWorkerServer is a Phaseless cloud's worker surface over one built-in
// engine: chat completions that resume parked handoffs, and /v1/kv/.
func kvWorkerServer(t *testing.T, seed uint64) (*httptest.Server, *Builtin, *HandoffStore) {
	t.Helper()
	m, err := DevModel(tinyConfig, seed)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := lm.NewEngine(m, lm.EngineConfig{MaxBatch: 4, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	store := NewHandoffStore(HandoffStoreConfig{})
	b := NewBuiltinWithHandoffs(eng, store)
	w, err := New(Config{Name: "w", Role: sched.RoleDecode}, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	kv, err := NewKVServer(KVServerConfig{Workers: []*Worker{w}, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.NewHandler(b, httpapi.Options{AllowKVHandoff: true})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/kv/", kv)
	mux.Handle("/v1/", api)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, b, store
}

func remoteOf(t *testing.T, url string) *Remote {
	t.Helper()
	r, err := NewRemote(RemoteConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func textOf(t *testing.T, gen func(llm.Emit) (llm.Final, error)) string {
	t.Helper()
	var sb strings.Builder
	if _, err := gen(func(tk llm.Token) error { sb.WriteString(tk.Text); return nil }); err != nil {
		t.Fatal(err)
	}
	return sb.String()
}

// TestHandoffOverHTTP: every pairing of built-in and remote engines hands
// the KV over and decodes the tokens one engine would; between two servers
// the prefill server pushes to the decode server directly.
func TestHandoffOverHTTP(t *testing.T) {
	req := &llm.Request{Messages: []llm.Message{{Role: "user", Content: "split me between two servers, please"}}, MaxTokens: 16, Seed: 9, Temperature: 0.7}
	ref := NewBuiltin(engineOf(t, tinyConfig))
	defer ref.Close()
	want := textOf(t, func(e llm.Emit) (llm.Final, error) { return ref.Generate(context.Background(), req, e) })

	pSrv, pB, _ := kvWorkerServer(t, 7)
	dSrv, dB, dStore := kvWorkerServer(t, 7)
	local := NewBuiltin(engineOf(t, tinyConfig))
	defer local.Close()
	pR, dR := remoteOf(t, pSrv.URL), remoteOf(t, dSrv.URL)
	for _, tc := range []struct {
		name string
		p, d Splitter
	}{
		{"remote to remote", pR, dR},
		{"built-in to remote", local, dR},
		{"remote to built-in", pR, local},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := tc.p.PrefillTo(context.Background(), req, tc.d.(Engine))
			if err != nil {
				t.Fatal(err)
			}
			if h.Bytes <= 0 || h.PromptTokens <= 0 {
				t.Fatalf("handoff %+v", h)
			}
			if _, ok := tc.d.(*Remote); ok {
				if n, _ := dStore.Parked(); n != 1 {
					t.Fatalf("%d handoffs parked at the decode server", n)
				}
			}
			got := textOf(t, func(e llm.Emit) (llm.Final, error) { return tc.d.Resume(context.Background(), req, h, e) })
			if got != want {
				t.Fatalf("split %q, one engine %q", got, want)
			}
		})
	}
	if pB.LM().Stats().HandoffsOut != 2 || dB.LM().Stats().HandoffsIn != 2 {
		t.Fatalf("prefill server %+v\ndecode server %+v", pB.LM().Stats(), dB.LM().Stats())
	}
}

func TestKVServerRefusesBadHandoffs(t *testing.T) {
	srv, _, store := kvWorkerServer(t, 7)
	foreign := NewBuiltin(engineOf(t, lm.Config{Vocab: 258, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 64, ContextLen: 256}))
	defer foreign.Close()
	h, _, err := foreign.LM().PrefillChat(context.Background(), &llm.Request{Messages: []llm.Message{{Role: "user", Content: "x"}}, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := h.MarshalBinary()
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"not a handoff", []byte("hello")},
		{"another model", other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+KVHandoffsPath, HandoffContentType, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if err := ReadKVError(resp); llm.CodeOf(err) != llm.CodeInvalid {
				t.Fatalf("error %v", err)
			}
		})
	}
	if n, _ := store.Parked(); n != 0 {
		t.Fatalf("%d refused handoffs parked", n)
	}
	// A decode request naming no parked handoff is refused, not run from scratch.
	r := remoteOf(t, srv.URL)
	_, err = r.Resume(context.Background(), &llm.Request{Messages: []llm.Message{{Role: "user", Content: "x"}}, MaxTokens: 2}, Handoff{id: "0123"}, nil)
	if llm.CodeOf(err) != llm.CodeInvalid {
		t.Fatalf("resume of an unknown handoff: %v", err)
	}
}
