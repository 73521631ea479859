package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// StatsField is the SSE field name that carries Phaseless' own per-event
// numbers. The SSE format lets a stream carry fields besides event, data,
// id and retry, and tells parsers to ignore the ones they do not know
// (WHATWG HTML §9.2.6): the official OpenAI and Anthropic SDKs, browsers'
// EventSource and every SSE library we tried skip it, so apps that want
// the numbers read them and the rest see the stream unchanged. Its value
// is one JSON object:
//
//	on each token event:  {"gen_us":812}  the engine's time for this token
//	on the first token another engine produced after the first was cut
//	off mid-answer (the agent's local continuation of a cloud answer):
//	                      {"gen_us":812,"continued":{"route":"local",
//	                       "reason":"cloud_lost"}}
//	on the final event:   {"prompt_tokens":300,"prefix_hit_tokens":120,
//	                       "prefix_cache_efficiency":0.4}
//
// The final event is OpenAI's `data: [DONE]` and Anthropic's message_stop.
const StatsField = "phaseless"

// Response headers of a non-streamed answer that carry the same numbers.
const (
	// HeaderGenMeanUS and HeaderGenMaxUS summarise the engine's per-token
	// generation latency in microseconds.
	HeaderGenMeanUS = "x-phaseless-gen-us-mean"
	HeaderGenMaxUS  = "x-phaseless-gen-us-max"
	// HeaderPrefixHitTokens is how many prompt tokens came from a cached
	// prefix; HeaderPrefixCacheEfficiency is that over the prompt tokens.
	HeaderPrefixHitTokens       = "x-phaseless-prefix-hit-tokens"
	HeaderPrefixCacheEfficiency = "x-phaseless-prefix-cache-efficiency"
	// HeaderContinued says the answer changed engine mid-way, as
	// "local; reason=cloud_lost" (the stats field's "continued").
	HeaderContinued = "x-phaseless-continued"
)

// tokenStats is the StatsField value of a token event.
func tokenStats(t llm.Token) []byte {
	b := append([]byte(`{"gen_us":`), strconv.FormatInt(t.EngineLatency.Microseconds(), 10)...)
	if c := t.Continued; c != nil {
		b = append(b, `,"continued":{"route":`...)
		b = strconv.AppendQuote(b, c.Route)
		b = append(b, `,"reason":`...)
		b = strconv.AppendQuote(b, c.Reason)
		b = append(b, '}')
	}
	return append(b, '}')
}

// prefixEfficiency is the share of the prompt served from a cached prefix;
// 0 when nothing is known about the prompt.
func prefixEfficiency(fin llm.Final) float64 {
	if fin.PromptTokens <= 0 {
		return 0
	}
	return float64(min(fin.PrefixHitTokens, fin.PromptTokens)) / float64(fin.PromptTokens)
}

// endStats is the StatsField value of a stream's final event.
func endStats(fin llm.Final) []byte {
	b := append([]byte(`{"prompt_tokens":`), strconv.Itoa(fin.PromptTokens)...)
	b = append(b, `,"prefix_hit_tokens":`...)
	b = strconv.AppendInt(b, int64(fin.PrefixHitTokens), 10)
	b = append(b, `,"prefix_cache_efficiency":`...)
	b = strconv.AppendFloat(b, prefixEfficiency(fin), 'g', 4, 64)
	return append(b, '}')
}

// genLatency accumulates a non-streamed answer's per-token latencies for
// its response headers.
type genLatency struct {
	n        int
	sum, max time.Duration
	cont     *llm.Continuation
}

func (g *genLatency) add(t llm.Token) {
	if t.Continued != nil {
		g.cont = t.Continued
	}
	g.n++
	g.sum += t.EngineLatency
	g.max = max(g.max, t.EngineLatency)
}

// writeHeaders sets the non-streamed answer's stats headers; it runs
// before the body is written.
func (g *genLatency) writeHeaders(hdr http.Header, fin llm.Final) {
	if g.n > 0 {
		hdr.Set(HeaderGenMeanUS, strconv.FormatInt((g.sum/time.Duration(g.n)).Microseconds(), 10))
		hdr.Set(HeaderGenMaxUS, strconv.FormatInt(g.max.Microseconds(), 10))
	}
	if g.cont != nil {
		hdr.Set(HeaderContinued, g.cont.Route+"; reason="+g.cont.Reason)
	}
	hdr.Set(HeaderPrefixHitTokens, strconv.Itoa(fin.PrefixHitTokens))
	hdr.Set(HeaderPrefixCacheEfficiency, strconv.FormatFloat(prefixEfficiency(fin), 'g', 4, 64))
}
