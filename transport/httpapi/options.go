package httpapi

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
)

// Limits from DESIGN.md §4.
const (
	// DefaultMaxOutputTokens is the largest max_tokens accepted unless configured.
	DefaultMaxOutputTokens = 4096
	// DefaultOutputTokens is used when an OpenAI request gives no max_tokens
	// (Anthropic requires it). It is small on purpose: the API's "until the
	// context is full" default would tie up an edge engine for minutes.
	DefaultOutputTokens = 512
	// MaxHeaderBytes is the largest request header block accepted; larger
	// blocks get a 431 in the API's own error shape.
	MaxHeaderBytes = 8 << 10
	// ServerMaxHeaderBytes is what http.Server.MaxHeaderBytes should be set to
	// when it serves a Handler: larger than MaxHeaderBytes so that blocks just
	// over the limit reach the handler and are refused with a JSON error
	// instead of net/http's bare-text 431.
	ServerMaxHeaderBytes = 64 << 10
	// DefaultMaxBodyBytes bounds a request body.
	DefaultMaxBodyBytes = 4 << 20
)

// Model is one entry of GET /v1/models.
type Model struct {
	ID      string
	OwnedBy string
	Created time.Time
	// Sampling is what the model declares for the sampling fields a request
	// omits (llm/sampling.go), listed as "sampling"; zero lists none.
	Sampling llm.Sampling
}

// Options configures a Handler. The zero value is valid: open access, the
// default limits, only the "auto" model.
type Options struct {
	// MaxOutputTokens is the largest max_tokens accepted (default 4096).
	MaxOutputTokens int
	// DefaultOutputTokens applies when an OpenAI request omits max_tokens
	// (default min(512, MaxOutputTokens)).
	DefaultOutputTokens int
	// MaxHeaderBytes is the largest header block accepted (default 8 KiB).
	MaxHeaderBytes int
	// MaxBodyBytes bounds the request body (default 4 MiB).
	MaxBodyBytes int64
	// Models lists the models a request may pin besides "auto". Nil accepts
	// any model name and lists only "auto".
	Models func() []Model
	// Authenticate returns the caller's tenant (stored in llm.Request.Tenant)
	// or an error, which becomes a 401 (or the code of an *llm.Error). Nil
	// means open access, as on the agent's loopback listener.
	Authenticate func(*http.Request) (tenant string, err error)
	// AllowPolicyHint honours the x-phaseless-policy header (cloud --dev only).
	AllowPolicyHint bool
	// AllowKVHandoff honours KVHandoffHeader (the cloud, which serves as
	// another coordinator's decode worker); elsewhere it is refused.
	AllowKVHandoff bool
	// Cloud marks the cloud's handler: x-phaseless-route: local, which asks
	// for a device's own engine, is refused there (the request has left
	// the device already; answering it would ignore the header).
	Cloud bool
	// Logger receives one line per failed request; nil discards.
	Logger *slog.Logger
	// Metrics, when set, receives request counts, TTFT and inter-token latency.
	Metrics *metrics.Registry
	// Now is the clock for response timestamps; nil means time.Now.
	Now func() time.Time
}

func (o *Options) fill() {
	if o.MaxOutputTokens == 0 {
		o.MaxOutputTokens = DefaultMaxOutputTokens
	}
	if o.DefaultOutputTokens == 0 {
		o.DefaultOutputTokens = min(DefaultOutputTokens, o.MaxOutputTokens)
	}
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = MaxHeaderBytes
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate reports the first bad field.
func (o *Options) Validate() error {
	switch {
	case o.MaxOutputTokens < 0:
		return fmt.Errorf("httpapi: MaxOutputTokens %d must be positive", o.MaxOutputTokens)
	case o.DefaultOutputTokens < 0 || (o.MaxOutputTokens > 0 && o.DefaultOutputTokens > o.MaxOutputTokens):
		return fmt.Errorf("httpapi: DefaultOutputTokens %d must be in 1..MaxOutputTokens", o.DefaultOutputTokens)
	case o.MaxHeaderBytes < 0 || o.MaxHeaderBytes >= ServerMaxHeaderBytes:
		return fmt.Errorf("httpapi: MaxHeaderBytes %d must be in 1..%d", o.MaxHeaderBytes, ServerMaxHeaderBytes-1)
	case o.MaxBodyBytes < 0:
		return fmt.Errorf("httpapi: MaxBodyBytes %d must be positive", o.MaxBodyBytes)
	}
	return nil
}

// KVHandoffHeader carries llm.Request.KVHandoff: the id of a KV handoff
// parked at the receiving cloud worker, whose decode this request is.
const KVHandoffHeader = "x-phaseless-kv-handoff"
