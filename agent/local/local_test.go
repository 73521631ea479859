package local

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/httpapi"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// blockingEngine holds every generation until release is closed or ctx ends.
type blockingEngine struct {
	started chan struct{}
	release chan struct{}
}

func (b *blockingEngine) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	b.started <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
		return llm.Final{}, ctx.Err()
	}
	if err := emit(llm.Token{Text: "ok"}); err != nil {
		return llm.Final{}, err
	}
	return llm.Final{CompletionTokens: 1, FinishReason: "stop"}, nil
}

// The Runner tests run in a synctest bubble: synctest.Wait returns once
// every request is parked in the queue or the engine, so the queue is read
// in the state the test built, not polled on the wall clock.

func TestRunnerBoundsQueue(t *testing.T) { synctest.Test(t, testRunnerBoundsQueue) }

func testRunnerBoundsQueue(t *testing.T) {
	eng := &blockingEngine{started: make(chan struct{}, 16), release: make(chan struct{})}
	r, err := NewRunner(eng, Config{Concurrency: 2, QueueDepth: 3})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 5 { // 2 run, 3 wait
		wg.Go(func() {
			_, err := r.Generate(context.Background(), &llm.Request{}, func(llm.Token) error { return nil })
			errs <- err
		})
	}
	<-eng.started
	<-eng.started
	synctest.Wait()
	if l := r.Load(); l.Running != 2 || l.Waiting != 3 {
		t.Fatalf("load %+v", l)
	}
	_, err = r.Generate(context.Background(), &llm.Request{}, func(llm.Token) error { return nil })
	if llm.CodeOf(err) != llm.CodeOverloaded || !strings.Contains(err.Error(), "queue depth 3") {
		t.Fatalf("6th request: %v", err)
	}
	if r.Load().Refused != 1 {
		t.Errorf("refused %d", r.Load().Refused)
	}
	close(eng.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if l := r.Load(); l.Running != 0 || l.Waiting != 0 {
		t.Errorf("after drain %+v", l)
	}
}

func TestRunnerCancelWhileWaiting(t *testing.T) { synctest.Test(t, testRunnerCancelWhileWaiting) }

func testRunnerCancelWhileWaiting(t *testing.T) {
	eng := &blockingEngine{started: make(chan struct{}, 4), release: make(chan struct{})}
	defer close(eng.release)
	r, _ := NewRunner(eng, Config{Concurrency: 1, QueueDepth: 4})
	go r.Generate(context.Background(), &llm.Request{}, func(llm.Token) error { return nil })
	<-eng.started
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := r.Generate(ctx, &llm.Request{}, func(llm.Token) error { return nil })
		done <- err
	}()
	synctest.Wait()
	if w := r.Load().Waiting; w != 1 {
		t.Fatalf("waiting %d, want 1", w)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("waiting request ended with %v", err)
	}
	if r.Load().Waiting != 0 {
		t.Error("cancelled request still counted as waiting")
	}
}

// serverGen is the engine behind a real OpenAI-compatible server (the
// project's own httpapi handler on loopback) standing in for llama-server.
type serverGen struct {
	mu        sync.Mutex
	got       *llm.Request
	cancelled chan struct{}
	err       error
}

func (g *serverGen) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	g.mu.Lock()
	g.got = req
	g.mu.Unlock()
	if g.err != nil {
		return llm.Final{}, g.err
	}
	words := strings.Fields(req.Messages[len(req.Messages)-1].Content)
	for i, w := range words {
		if i > 0 {
			w = " " + w
		}
		if w == " HANG" {
			<-ctx.Done()
			close(g.cancelled)
			return llm.Final{}, ctx.Err()
		}
		if err := emit(llm.Token{Text: w}); err != nil {
			return llm.Final{}, err
		}
	}
	return llm.Final{PromptTokens: 9, CompletionTokens: len(words), FinishReason: "length"}, nil
}

func startServer(t *testing.T, gen llm.Generator) string {
	t.Helper()
	h, err := httpapi.NewHandler(gen, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func TestOpenAIEngine(t *testing.T) {
	gen := &serverGen{cancelled: make(chan struct{})}
	base := startServer(t, gen)
	eng, err := NewOpenAI(base+"/v1/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.client.CloseIdleConnections()
	if err := eng.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	var toks []string
	req := &llm.Request{Model: "auto", MaxTokens: 3, Temperature: 0.2, Stop: []string{"\n"}, Messages: []llm.Message{{Role: "user", Content: "one two three"}}}
	fin, err := eng.Generate(context.Background(), req, func(tok llm.Token) error { toks = append(toks, tok.Text); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(toks, "|") != "one| two| three" || fin.CompletionTokens != 3 || fin.PromptTokens != 9 || fin.FinishReason != "length" || fin.TTFT <= 0 {
		t.Errorf("tokens %q final %+v", toks, fin)
	}
	if got := gen.got; got.MaxTokens != 3 || got.Temperature != 0.2 || len(got.Stop) != 1 {
		t.Errorf("server saw %+v", got)
	}

	// The client going away stops the generation on the server.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := eng.Generate(ctx, &llm.Request{MaxTokens: 5, Messages: []llm.Message{{Role: "user", Content: "wait HANG"}}}, func(llm.Token) error { cancel(); return nil })
		done <- err
	}()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled generation ended with %v", err)
	}
	select {
	case <-gen.cancelled:
	case <-time.After(10 * time.Second): // hang guard only
		t.Fatal("server-side generation not cancelled")
	}
}

func TestOpenAIEngineErrors(t *testing.T) {
	base := startServer(t, &serverGen{err: llm.Errorf(llm.CodeOverloaded, "busy")})
	eng, _ := NewOpenAI(base, "tiny", nil)
	defer eng.client.CloseIdleConnections()
	_, err := eng.Generate(context.Background(), &llm.Request{MaxTokens: 1, Messages: []llm.Message{{Role: "user", Content: "x"}}}, func(llm.Token) error { return nil })
	if llm.CodeOf(err) != llm.CodeOverloaded || !strings.Contains(err.Error(), "busy") {
		t.Errorf("503 → %v", err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()
	eng, _ = NewOpenAI(dead, "", nil)
	_, err = eng.Generate(context.Background(), &llm.Request{MaxTokens: 1, Messages: []llm.Message{{Role: "user", Content: "x"}}}, func(llm.Token) error { return nil })
	if llm.CodeOf(err) != llm.CodeUnavailable {
		t.Errorf("dead server → %v", err)
	}
	if err := eng.Ping(context.Background()); !errors.Is(err, ErrNoServer) {
		t.Errorf("ping dead server: %v", err)
	}
	for _, bad := range []string{"", "ftp://x", "127.0.0.1:8080", "http://"} {
		if _, err := NewOpenAI(bad, "", nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
