package llm

import (
	"fmt"
	"time"
)

// Meta is a stream's begin event: what the generators decided before the
// first token — where the request runs, the scheduler's hint, why a
// fallback happened, the caller's remaining budget. It travels one way, up
// the stream, ahead of the first Token; the layer that owns the response
// writes it as response headers (HTTP) or a meta frame (QUIC).
type Meta struct {
	Route string // where it runs: RouteLocal or RouteCloud
	// RouteReason is why the agent's router chose Route
	// (x-phaseless-route-reason); "" where no router decided.
	RouteReason   string
	Pool          string // the cloud pool it was placed on (prefill-heavy, ...); "" when local
	Worker        string // the cloud worker it was placed on
	SchedulerHint string // base32 scheduler vector (transport/schedhint)
	Fallback      Fallback
	// Split, when set, names the worker that decoded after another ran
	// the prefill (Pool, Worker).
	Split Split
	// BudgetRemaining is the caller's remaining burst budget in tokens,
	// valid when HasBudget.
	BudgetRemaining int64
	HasBudget       bool

	// Load measurement (issue 21). EngineTTFT is the engine's own time to
	// the first token, as the generator that placed the request saw it
	// (for a remote engine, its HTTP round trip included); 0 when unknown.
	// The HTTP API sends it as `Server-Timing: engine;dur=MS`, so a client
	// (phaselessctl load) can tell what the serving path added.
	EngineTTFT time.Duration
}

// Routes a Meta names.
const (
	RouteLocal = "local"
	RouteCloud = "cloud"
)

// RouteHeader is Route as the x-phaseless-route response header writes it:
// "local", "cloud", or "cloud/<pool>/<worker>" once the cloud placed it.
func (m *Meta) RouteHeader() string {
	if m.Pool == "" && m.Worker == "" {
		return m.Route
	}
	return m.Route + "/" + m.Pool + "/" + m.Worker
}

// merge fills what m leaves unset from a nested generator's begin event: the
// agent's dispatcher learns the pool, worker, hint and budget from the
// cloud's. m's own route and fallback win, being the outer decision.
func (m *Meta) merge(in *Meta) {
	if m.Route == "" {
		m.Route = in.Route
	}
	if m.Pool == "" && m.Worker == "" {
		m.Pool, m.Worker, m.Split = in.Pool, in.Worker, in.Split
	}
	if m.SchedulerHint == "" {
		m.SchedulerHint = in.SchedulerHint
	}
	if m.Fallback.Cause == FallbackNone {
		m.Fallback = in.Fallback
	}
	if !m.HasBudget {
		m.BudgetRemaining, m.HasBudget = in.BudgetRemaining, in.HasBudget
	}
	if m.EngineTTFT == 0 {
		m.EngineTTFT = in.EngineTTFT
	}
}

// FallbackCause says, as a type, why a request did not run where it was
// first placed. Code that branches on a fallback (metrics labels, telemetry,
// tests) reads the cause, never the text.
type FallbackCause uint8

// Fallback causes.
const (
	FallbackNone FallbackCause = iota
	// FallbackNoCloud: the router chose the cloud on a device with none
	// configured; it ran locally.
	FallbackNoCloud
	// FallbackCloudTimeout: the cloud sent no token in time; it ran locally.
	FallbackCloudTimeout
	// FallbackCloudError: the cloud failed before its first token; it ran
	// locally.
	FallbackCloudError
	// FallbackLocalRefused: the device's engine refused before its first
	// token (prompt over its context, queue full); it ran on the cloud.
	FallbackLocalRefused
	// FallbackPoolOverloaded: the cloud worker first chosen answered
	// overloaded/unavailable; it ran on the conservative pool.
	FallbackPoolOverloaded
	// FallbackHandoffFailed: a prefill/decode split failed before its
	// first token (the prefill, the KV transfer or the decode worker's
	// import); it ran on one worker.
	FallbackHandoffFailed
	numFallbackCauses
)

var fallbackCauseNames = [numFallbackCauses]string{"", "no_cloud", "cloud_timeout", "cloud_error", "local_refused", "pool_overloaded", "handoff_failed"}

// String is the cause's stable name, used as a metrics label.
func (c FallbackCause) String() string {
	if c < numFallbackCauses {
		return fallbackCauseNames[c]
	}
	return fmt.Sprintf("fallback(%d)", uint8(c))
}

// Valid reports whether c is a known cause (a decoder of outside bytes
// checks it).
func (c FallbackCause) Valid() bool { return c < numFallbackCauses }

// Fallback is why and from where a request moved before its first token.
// The zero Fallback means none happened.
type Fallback struct {
	Cause FallbackCause
	From  string // what was first chosen: "cloud", "local", or a cloud worker's name
	Code  Code   // the classification of the failure behind it, when there was one
	// Detail is the human-readable account written to x-fallback-reason and
	// logs ("cloud failed before first token: unavailable: ...").
	Detail string
}

// String is the x-fallback-reason text.
func (f Fallback) String() string {
	if f.Detail != "" || f.Cause == FallbackNone {
		return f.Detail
	}
	return f.Cause.String()
}

// Continuation says that a reply changed engine mid-answer: the agent's
// engine took over a cloud answer whose link did not come back, from the
// text already delivered. Unlike a Fallback it comes after tokens, so it
// rides on the first token of the rest instead of the begin event.
type Continuation struct {
	Route string // where the rest runs: RouteLocal
	// Reason is a stable name for metrics and telemetry:
	// ContinueCloudLost or ContinueCloudError.
	Reason string
	Detail string // the failure behind it, for logs and telemetry
}

// Continuation reasons.
const (
	// ContinueCloudLost: the link to the cloud dropped and did not return
	// within the agent's resume deadline (or the cloud had nothing left
	// to resume).
	ContinueCloudLost = "cloud_lost"
	// ContinueCloudError: the cloud failed mid-answer for another reason.
	ContinueCloudError = "cloud_error"
)

// Stream is a generator's side of its output: it sends the begin event
// (Meta) ahead of the first token, so whoever reads the stream learns the
// route before any text. A generator that decides metadata (the agent's
// dispatcher, the coordinator) wraps the emit it was given in a Stream,
// fills Meta while it decides, and passes every token through Emit. Engines
// that decide nothing emit tokens directly and send no begin event.
//
// A Stream belongs to one Generate call and is not safe for concurrent use.
type Stream struct {
	// Meta is the begin event's content. It may change until the begin
	// event is sent (a fallback rewrites it); after that, changes are not seen.
	Meta  Meta
	emit  Emit
	begun bool
}

// NewStream returns a Stream writing to emit.
func NewStream(emit Emit) *Stream { return &Stream{emit: emit} }

// Emit passes t on, sending the begin event first. A nested generator's
// begin event (t.Meta set) is merged into s.Meta instead of being passed on,
// so the reader sees exactly one begin event.
func (s *Stream) Emit(t Token) error {
	if t.Meta != nil {
		if !s.begun {
			s.Meta.merge(t.Meta)
		}
		return nil
	}
	if !s.begun {
		if err := s.Begin(); err != nil {
			return err
		}
	}
	return s.emit(t)
}

// Begin sends the begin event now if it has not been sent. A generator
// calls it before returning a Final without having emitted a token, so a
// response always starts with its metadata.
func (s *Stream) Begin() error {
	if s.begun {
		return nil
	}
	s.begun = true
	m := s.Meta // a copy: the reader may keep it
	return s.emit(Token{Meta: &m})
}

// Begun reports whether the begin event was sent, i.e. the response started.
func (s *Stream) Begun() bool { return s.begun }
