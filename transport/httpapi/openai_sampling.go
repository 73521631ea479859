package httpapi

import (
	"encoding/json"

	"github.com/phaseless/phaseless/llm"
)

// oaiSampling is what OpenAI's chat and legacy completions requests share:
// the sampling settings, stop sequences and streaming. Both request types
// embed it, so both endpoints validate them the same way.
type oaiSampling struct {
	Temperature   json.RawMessage `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	N             *int            `json:"n"`
	Stop          json.RawMessage `json:"stop"` // string or array of strings
	Seed          *int64          `json:"seed"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// decode validates the settings into req and says how to answer.
func (s *oaiSampling) decode(req *llm.Request) (chatStream, *apiError) {
	var e *apiError
	if req.Temperature, e = parseTemperature(s.Temperature); e != nil {
		return chatStream{}, e
	}
	if s.TopP != nil {
		if *s.TopP <= 0 || *s.TopP > 1 {
			return chatStream{}, invalid("top_p", "top_p must be in (0, 1], got %g", *s.TopP)
		}
		req.TopP = *s.TopP
	}
	if s.N != nil && *s.N != 1 {
		return chatStream{}, invalid("n", "n must be 1")
	}
	if s.Seed != nil {
		if *s.Seed < 0 {
			return chatStream{}, invalid("seed", "seed must not be negative")
		}
		req.Seed = uint64(*s.Seed)
	}
	if req.Stop, e = decodeStop(s.Stop); e != nil {
		return chatStream{}, e
	}
	cs := chatStream{stream: s.Stream}
	if s.StreamOptions != nil {
		if !s.Stream {
			return chatStream{}, invalid("stream_options", "stream_options is only allowed when stream is true")
		}
		cs.includeUsage = s.StreamOptions.IncludeUsage
	}
	return cs, nil
}
