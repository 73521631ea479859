package shadow

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/phaseless/phaseless/agent/internal/bolttest"
	"github.com/phaseless/phaseless/agent/telemetry"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/fleetwire"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo answers each request with its id, and nothing for id "silent".
type echo struct{}

func (echo) Generate(_ context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	if req.ID == "silent" {
		return llm.Final{FinishReason: "stop"}, nil
	}
	if err := emit(llm.Token{Text: "answer " + req.ID}); err != nil {
		return llm.Final{}, err
	}
	return llm.Final{FinishReason: "stop", CompletionTokens: 1}, nil
}

// TestTapSamplesItsShare runs requests through a Tap at the largest share:
// the answers pass unchanged, exactly the requests whose id falls in the
// share (the same ones every time) land in the store as shadow records with
// their messages and answer, an empty answer is not sampled, a share of 0
// samples nothing, and after Close requests still run but nothing is kept.
func TestTapSamplesItsShare(t *testing.T) {
	path := filepath.Join(t.TempDir(), "telemetry.db")
	store, err := telemetry.Open(path, telemetry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := store.Close(); err != nil {
			t.Error(err)
		}
		bolttest.Check(t, path)
	})
	reg := metrics.NewRegistry()
	tap := NewTap(echo{}, store, reg, slog.New(slog.DiscardHandler), MaxShare, func() string { return "1.1" })
	defer tap.Close()
	ask := func(id string) {
		t.Helper()
		var got string
		_, err := tap.Generate(context.Background(), &llm.Request{ID: id, MaxTokens: 8, Messages: []llm.Message{{Role: "user", Content: "question " + id}}}, func(tk llm.Token) error { got += tk.Text; return nil })
		if err != nil {
			t.Fatal(err)
		}
		if want := "answer " + id; id != "silent" && got != want {
			t.Fatalf("answer %q through the tap, want %q", got, want)
		}
	}
	const n = 200
	want := map[string]bool{}
	for i := range n {
		id := fmt.Sprintf("req-%d", i)
		if sampledID(id, MaxShare) {
			want[id] = true
		}
		ask(id)
	}
	if len(want) == 0 || len(want) > n/2 {
		t.Fatalf("%d of %d ids fall in a share of %g", len(want), n, MaxShare)
	}
	for range 20 { // whatever its hash, an empty answer is no sample
		ask("silent")
	}
	tap.SetShare(0)
	for id := range want { // sampled above; not again at a share of 0
		ask(id)
	}
	tap.Close()
	ask("req-after-close")
	tap.Close() // safe twice

	recs, err := store.Pending(10 * n)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range recs {
		if r.Kind != fleetwire.KindShadow {
			t.Fatalf("record kind %q", r.Kind)
		}
		var sr fleetwire.ShadowRecord
		if err := json.Unmarshal(r.Data, &sr); err != nil {
			t.Fatal(err)
		}
		if got[sr.TraceID] {
			t.Fatalf("%s sampled twice", sr.TraceID)
		}
		got[sr.TraceID] = true
		if !want[sr.TraceID] || sr.Answer != "answer "+sr.TraceID || sr.MaxTokens != 8 || len(sr.Messages) != 1 || sr.Messages[0].Content != "question "+sr.TraceID || sr.Router != "1.1" {
			t.Errorf("shadow record %s", r.Data)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d shadow records, want the %d sampled ids", len(got), len(want))
	}
	if v := tap.sampled.Value(); v != float64(len(want)) {
		t.Fatalf("sampled counter %g, want %d", v, len(want))
	}
}

// TestTapSamplesCloudAnswers: a sampled request the cloud answered runs on
// the local engine off the request's path and is kept with its route and
// the router's score; an unsampled one is not run; a local sample outside
// a Dispatcher carries no score.
func TestTapSamplesCloudAnswers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "telemetry.db")
	store, err := telemetry.Open(path, telemetry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tap := NewTap(echo{}, store, metrics.NewRegistry(), slog.New(slog.DiscardHandler), MaxShare, nil)
	var in, out string
	for i := 0; in == "" || out == ""; i++ {
		id := fmt.Sprintf("c-%d", i)
		if sampledID(id, MaxShare) {
			in = id
		} else {
			out = id
		}
	}
	req := func(id string) *llm.Request {
		return &llm.Request{ID: id, Messages: []llm.Message{{Role: "user", Content: "q " + id}}}
	}
	tap.ShadowCloud(req(out), 0.9)
	tap.ShadowCloud(req(in), 0.75)
	tap.side.Wait()
	if _, err := tap.Generate(context.Background(), req(in+"-local"), func(llm.Token) error { return nil }); err != nil {
		t.Fatal(err)
	}
	tap.Close()
	recs, err := store.Pending(10)
	if err != nil {
		t.Fatal(err)
	}
	var got []fleetwire.ShadowRecord
	for _, r := range recs {
		var sr fleetwire.ShadowRecord
		if err := json.Unmarshal(r.Data, &sr); err != nil {
			t.Fatal(err)
		}
		got = append(got, sr)
	}
	if len(got) == 0 || got[0].TraceID != in || got[0].Path != "cloud" || got[0].CloudProb == nil || *got[0].CloudProb != 0.75 || got[0].Answer != "answer "+in {
		t.Fatalf("cloud-answered samples %+v, want %s alone first, path cloud, score 0.75", got, in)
	}
	for _, sr := range got[1:] {
		if sr.TraceID == out || sr.CloudProb != nil || sr.Path != "local" {
			t.Errorf("sample %+v", sr)
		}
	}
}
