package ota

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
)

// SwapEngine is the built-in local engine behind one llm.Generator that the
// fleet can replace while requests run (the edge-model artifact kind, the
// engine's counterpart of the dispatcher's SetRouter): a new request starts
// on the engine current when it arrives and finishes on it; the replaced
// engine is closed once its last request is done.
type SwapEngine struct {
	cur     atomic.Pointer[engineHolder]
	retired sync.WaitGroup // replaced engines still draining, waited for by Close
}

var _ llm.Generator = (*SwapEngine)(nil)

// Engine is what SwapEngine holds: models/lm's Engine.
type Engine interface {
	llm.Generator
	Stats() lm.Stats
	Close() error
}

var _ Engine = (*lm.Engine)(nil)

// engineHolder is one engine and the requests running on it.
type engineHolder struct {
	eng   Engine
	probe *lm.Model // see NewSwapEngine
	// mu is held shared by each request on eng and exclusively to retire
	// it, so retiring waits for the requests; it guards retired.
	mu      sync.RWMutex
	retired bool
}

// NewSwapEngine serves eng until Replace. probe is the model the router's
// probe measures on; nil for a model the shipped predictor was not trained
// on (textfeat's probe block then stays unmeasured).
func NewSwapEngine(eng Engine, probe *lm.Model) *SwapEngine {
	s := &SwapEngine{}
	s.cur.Store(&engineHolder{eng: eng, probe: probe})
	return s
}

// Generate implements llm.Generator on the engine current now.
func (s *SwapEngine) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	for {
		h := s.cur.Load()
		h.mu.RLock()
		if h.retired { // replaced and closed between Load and RLock: take the new one
			h.mu.RUnlock()
			continue
		}
		fin, err := h.eng.Generate(ctx, req, emit)
		h.mu.RUnlock()
		return fin, err
	}
}

// Current is the engine new requests start on, and its probe model.
func (s *SwapEngine) Current() (eng Engine, probe *lm.Model) {
	h := s.cur.Load()
	return h.eng, h.probe
}

// Replace makes eng current and closes the one it replaces after the
// requests on it finish.
func (s *SwapEngine) Replace(eng Engine, probe *lm.Model) {
	old := s.cur.Swap(&engineHolder{eng: eng, probe: probe})
	s.retired.Go(func() { retire(old) })
}

func retire(h *engineHolder) {
	h.mu.Lock()
	h.retired = true
	h.mu.Unlock()
	h.eng.Close()
}

// Close waits for replaced engines and closes the current one.
func (s *SwapEngine) Close() error {
	s.retired.Wait()
	h := s.cur.Load()
	h.mu.Lock()
	h.retired = true
	h.mu.Unlock()
	return h.eng.Close()
}
