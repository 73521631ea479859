package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
)

// Prefill/decode disaggregation between workers. The coordinator asks the
// prefill worker to run a request's prompt and deliver its KV blocks to the
// decode worker (Splitter.PrefillTo), then asks the decode worker to stream
// the request from them (Splitter.Resume). Where the blocks travel depends
// on where the engines are:
//
//	built-in → built-in   the lm.Handoff passes in memory
//	built-in → remote     encoded, POSTed to the decode server's /v1/kv/handoffs
//	remote   → remote     the prefill server pushes to the decode server itself
//	                      (POST /v1/kv/prefill with push_to): the blocks never
//	                      pass through this coordinator
//	remote   → built-in   the prefill server answers with the encoded blocks
//
// A remote decode worker parks what it receives in its HandoffStore under a
// random id; the decode request names that id (x-phaseless-kv-handoff).

// Handoff is one prefill's KV on its way to, or parked at, a decode engine.
type Handoff struct {
	local *lm.Handoff // the decode engine is in this process
	id    string      // parked at a remote decode server under this id

	// Bytes is the encoded size of the keys and values (what travels
	// between processes; in one process, what is copied into the decode
	// engine's cache).
	Bytes           int64
	PromptTokens    int
	PrefixHitTokens int           // prompt tokens the prefill engine had cached
	Prefill         time.Duration // the prefill's run on the prefill engine
	Transfer        time.Duration // from the prefill's end until the decode side holds the blocks
}

// Splitter is an engine that can take either half of a split request.
type Splitter interface {
	// PrefillTo runs req's prefill on this engine and delivers the KV to
	// dst, another Splitter's engine.
	PrefillTo(ctx context.Context, req *llm.Request, dst Engine) (Handoff, error)
	// Resume streams req from h, which PrefillTo delivered to this engine.
	Resume(ctx context.Context, req *llm.Request, h Handoff, emit llm.Emit) (llm.Final, error)
}

var (
	_ Splitter = (*Builtin)(nil)
	_ Splitter = (*Remote)(nil)
)

// HandoffStage is where a split failed.
type HandoffStage uint8

// Stages of a split, in order.
const (
	StagePrefill  HandoffStage = iota // the prefill engine's run
	StageTransfer                     // delivering the blocks to the decode engine
	StageResume                       // the decode engine's import and first token
)

var stageNames = [...]string{"prefill", "transfer", "resume"}

func (s HandoffStage) String() string {
	if int(s) < len(stageNames) {
		return stageNames[s]
	}
	return fmt.Sprintf("stage(%d)", uint8(s))
}

// HandoffError is a split that failed at Stage; the coordinator then runs
// the request on one worker.
type HandoffError struct {
	Stage HandoffStage
	Err   error
}

func (e *HandoffError) Error() string { return fmt.Sprintf("kv handoff %s: %v", e.Stage, e.Err) }
func (e *HandoffError) Unwrap() error { return e.Err }

// ErrSplitUnsupported: one of the two engines cannot take its half (an
// OpenAI-compatible server that is not Phaseless answers 404 to /v1/kv/).
var ErrSplitUnsupported = llm.Errorf(llm.CodeUnavailable, "engine cannot split prefill and decode")

func stageErr(stage HandoffStage, err error) error {
	var he *HandoffError
	if errors.As(err, &he) {
		return err
	}
	return &HandoffError{Stage: stage, Err: err}
}

// HandoffStoreConfig sizes a HandoffStore. The zero value means defaults.
type HandoffStoreConfig struct {
	// MaxBytes bounds the parked handoffs' encoded size; a handoff that does
	// not fit is refused as overloaded. Default 512 MiB.
	MaxBytes int64
	// TTL is how long a handoff waits for its decode request. The request
	// follows the prefill's answer at once, so this only covers a decode
	// request queued behind others, or one that never comes. Default 30 s.
	TTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// HandoffStore holds the handoffs a decode server has received until their
// decode requests take them. It is safe for concurrent use.
type HandoffStore struct {
	cfg   HandoffStoreConfig
	mu    sync.Mutex // guards parked, bytes
	m     map[string]parked
	bytes int64
}

type parked struct {
	h       *lm.Handoff
	size    int64
	expires time.Time
}

// NewHandoffStore returns an empty store.
func NewHandoffStore(cfg HandoffStoreConfig) *HandoffStore {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 512 << 20
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &HandoffStore{cfg: cfg, m: map[string]parked{}}
}

// Put parks h (size: its encoded length) and returns its id.
func (s *HandoffStore) Put(h *lm.Handoff, size int64) (string, error) {
	var b [16]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, p := range s.m {
		if !now.Before(p.expires) {
			delete(s.m, k)
			s.bytes -= p.size
		}
	}
	if s.bytes+size > s.cfg.MaxBytes {
		return "", &llm.Error{Code: llm.CodeOverloaded, Retryable: true,
			Message: fmt.Sprintf("kv handoff store full (%d of %d bytes parked)", s.bytes, s.cfg.MaxBytes)}
	}
	s.m[id] = parked{h: h, size: size, expires: now.Add(s.cfg.TTL)}
	s.bytes += size
	return id, nil
}

// Take removes and returns the handoff parked under id; false when there is
// none or it expired.
func (s *HandoffStore) Take(id string) (*lm.Handoff, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.m[id]
	if !ok {
		return nil, false
	}
	delete(s.m, id)
	s.bytes -= p.size
	if !s.cfg.Now().Before(p.expires) {
		return nil, false
	}
	return p.h, true
}

// Parked reports how many handoffs wait and their total size.
func (s *HandoffStore) Parked() (n int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m), s.bytes
}
