package ota

import (
	"context"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
)

// gateEngine answers one token per request once release is closed, and
// records whether it was closed.
type gateEngine struct {
	name    string
	release chan struct{}
	started chan struct{}

	mu     sync.Mutex // guards closed, calls
	closed bool
	calls  int
}

func newGateEngine(name string) *gateEngine {
	return &gateEngine{name: name, release: make(chan struct{}), started: make(chan struct{}, 16)}
}

func (g *gateEngine) Generate(ctx context.Context, _ *llm.Request, emit llm.Emit) (llm.Final, error) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return llm.Final{}, &llm.Error{Code: llm.CodeUnavailable, Message: g.name + " is closed"}
	}
	g.calls++
	g.mu.Unlock()
	g.started <- struct{}{}
	select {
	case <-g.release:
	case <-ctx.Done():
		return llm.Final{}, ctx.Err()
	}
	if err := emit(llm.Token{Text: g.name}); err != nil {
		return llm.Final{}, err
	}
	return llm.Final{FinishReason: "stop", CompletionTokens: 1}, nil
}

func (g *gateEngine) Stats() lm.Stats { return lm.Stats{} }

func (g *gateEngine) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	return nil
}

func (g *gateEngine) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// TestSwapEngineDrains replaces the engine while a request runs on it: the
// request finishes on the old engine, new requests start on the new one,
// and the old one is closed only after its last request.
func TestSwapEngineDrains(t *testing.T) {
	oldE, newE := newGateEngine("old"), newGateEngine("new")
	s := NewSwapEngine(oldE, nil)
	gen := func(out chan<- string) {
		var got string
		_, err := s.Generate(context.Background(), &llm.Request{}, func(tk llm.Token) error { got += tk.Text; return nil })
		if err != nil {
			got = "error: " + err.Error()
		}
		out <- got
	}
	inflight := make(chan string, 1)
	go gen(inflight)
	<-oldE.started
	s.Replace(newE, nil)
	close(newE.release)
	after := make(chan string, 1)
	go gen(after)
	if got := <-after; got != "new" {
		t.Fatalf("a request after the swap ran on %q", got)
	}
	if oldE.isClosed() {
		t.Fatal("the old engine was closed with a request still on it")
	}
	close(oldE.release)
	if got := <-inflight; got != "old" {
		t.Fatalf("the request in flight at the swap ended %q, want its answer from the old engine", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !oldE.isClosed() || !newE.isClosed() {
		t.Fatalf("closed: old %v new %v", oldE.isClosed(), newE.isClosed())
	}
}
