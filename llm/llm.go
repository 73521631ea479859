package llm

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Message is one chat turn.
type Message struct {
	Role    string // system, user, assistant, tool
	Content string

	ToolTurn // tool calls of an assistant turn, or the call a tool turn answers (tools.go)
}

// Request is a completion request after API-specific decoding and validation.
type Request struct {
	ID             string // trace id, unique per request
	Model          string // "auto" lets Phaseless choose
	Messages       []Message
	MaxTokens      int // 1..limit, validated at the edge
	Temperature    float64
	TopP           float64 // 0 = off
	TopK           int     // 0 = off
	Seed           uint64  // 0 = pick one
	Stop           []string
	IdempotencyKey string // set when a retry or 0-RTT replay must run once
	Tenant         string // API key's tenant or device id; set by the receiver, not the caller
	Hints          Hints

	// Continue is text the reply already began with: the engine generates
	// what follows it, as if it had written it. The agent sets it when its
	// own engine continues a cloud answer the link cut off (device engines
	// only; it does not cross to the cloud). MaxTokens counts what follows.
	Continue string

	// KVHandoff names a KV handoff parked at the worker that receives this
	// request (x-phaseless-kv-handoff, cloud-to-worker only): it decodes
	// from that prefill instead of running the prompt (see Split).
	KVHandoff string

	// Raw marks a raw completion (OpenAI's legacy /v1/completions, for a
	// model without a chat template): Prompt is the whole prompt as plain
	// text, which the engine tokenizes after BOS with no chat template or
	// turn stop, and Messages is empty. Only a device's built-in engine
	// runs it; the QUIC uplink and OpenAI-compatible upstreams carry chat
	// and refuse it as invalid (RawUnsupported).
	Raw    bool
	Prompt string

	ToolRequest // tools, tool_choice and response_format (tools.go)

	// Prompt caching (cache.go).
	CacheRequest

	// Trace is the W3C trace context (trace.go).
	Trace Trace
}

// Hints are the optional x-* request headers of DESIGN.md §4.
type Hints struct {
	Route          string  // auto|local|cloud (agent only)
	Prefetch       string  // high|medium|low|none
	BatchThreshold float64 // 0.1..0.9; 0 = default
	CacheTTL       time.Duration
	SemanticMode   string // intent|topic|hybrid
	Policy         string // scheduler policy override, honoured in --dev only
}

// Token is one event of a generation's stream: a generated piece of text,
// emitted as soon as the engine has it — or, when Meta is set, the stream's
// begin event (see Stream), which carries no text and comes before every
// text token.
type Token struct {
	Text string // valid UTF-8; never splits a character
	ID   int32
	// EngineLatency is how long the engine took to produce this token.
	EngineLatency time.Duration
	// Meta, set only on the begin event, is the response metadata.
	Meta *Meta

	// Tool, when set, makes this token a piece of a tool call instead of
	// reply text (Text is then empty); see tools.go.
	Tool *ToolDelta

	// Continued, set on the first token of a reply's rest that another
	// engine produced after the first one was cut off mid-answer, says
	// where and why (stream.go).
	Continued *Continuation
}

// Final is what is known when a generation ends. Where it ran and why is
// not repeated here: the stream's begin event (Meta) said so.
type Final struct {
	PromptTokens     int
	CompletionTokens int
	FinishReason     string // stop, length, cancelled, tool_calls
	TTFT             time.Duration
	Total            time.Duration
	PrefixHitTokens  int // prompt tokens served from a cached prefix

	// Prompt caching (cache.go).
	CacheUsage
}

// Emit receives each token as it is produced. Returning an error stops the
// generation (the client went away).
type Emit func(Token) error

// Generator runs a request and streams its tokens through emit, without
// holding any back. Engines, the QUIC client, the scheduler and remote
// OpenAI-compatible servers all implement it. A generator that decides where
// the request runs sends a begin event (a Token with Meta) before its first
// text token; see Stream.
type Generator interface {
	Generate(ctx context.Context, req *Request, emit Emit) (Final, error)
}

// Code classifies failures so each API can map them to its own error shape.
type Code string

const (
	CodeInvalid Code = "invalid_request" // 400
	// CodeContextLength: the prompt does not fit this engine's context
	// (400). Another engine, with a longer context, may still run it.
	CodeContextLength Code = "context_length_exceeded"
	CodeAuth          Code = "authentication" // 401
	// CodePermission: the caller is known but its key's role does not
	// reach this surface (an operator key on the inference API) (403).
	CodePermission  Code = "permission"
	CodeBudget      Code = "budget_exceeded" // 429
	CodeOverloaded  Code = "overloaded"      // 503 (429/503-like: eligible for fallback)
	CodeUnavailable Code = "unavailable"     // 503 (no path to an engine)
	CodeCancelled   Code = "cancelled"       // 499
	CodeInternal    Code = "internal"        // 500
	CodeTimeout     Code = "timeout"         // 504
)

// Error is a failure that crosses hops with its classification intact.
type Error struct {
	Code      Code
	Message   string
	Retryable bool
	// RetryAfter, when set, tells the caller when to try again.
	RetryAfter time.Duration
	// BudgetRemaining is the caller's remaining burst budget in tokens, valid
	// when HasBudget: a budget refusal fails before any begin event, so the
	// error itself carries what x-burst-budget-remaining reports.
	BudgetRemaining int64
	HasBudget       bool
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf builds an *Error.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Retryable: code == CodeOverloaded || code == CodeUnavailable || code == CodeTimeout}
}

// CodeOf returns the classification of err: its *Error code, cancelled for
// context cancellation, internal otherwise.
func CodeOf(err error) Code {
	var e *Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, context.Canceled):
		return CodeCancelled
	case errors.Is(err, context.DeadlineExceeded):
		return CodeTimeout
	}
	return CodeInternal
}

// RawUnsupported is the error of a generator that carries chat only and is
// handed a raw completion (Request.Raw): what it is, and where raw prompts
// do run.
func RawUnsupported(where string) *Error {
	return Errorf(CodeInvalid, "%s carries chat only: a raw completion (/v1/completions) runs on the device's built-in engine (--model)", where)
}
