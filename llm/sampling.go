package llm

// Sampling defaults. A model file may declare the sampling its authors
// recommend (GGUF general.sampling.temp, .top_k and .top_p, the keys
// llama.cpp reads); a request that leaves a sampling field out gets the
// model's value, and a field the request sets is obeyed. The HTTP APIs mark
// what the caller left out in Request.Omitted; the engine that runs the
// request, which is the one that knows its model, fills those fields
// (Request.SamplingFor). Where the model declares nothing, an omitted
// temperature is 1.0 (both official APIs' default) and top_p and top_k are
// off.

// Sampling is the sampling a model declares; a nil field is one it leaves
// to the server. It is what GET /v1/models shows under "sampling".
type Sampling struct {
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	TopK        *int     `json:"top_k,omitempty"`
}

// IsZero reports whether s declares nothing.
func (s Sampling) IsZero() bool {
	return s.Temperature == nil && s.TopP == nil && s.TopK == nil
}

// SamplingFields is a set of a request's sampling fields.
type SamplingFields uint8

// The sampling fields a request may leave to the model.
const (
	FieldTemperature SamplingFields = 1 << iota
	FieldTopP
	FieldTopK
)

// DefaultTemperature is an omitted temperature where the model declares
// none: 1.0, the OpenAI and Anthropic APIs' own default.
const DefaultTemperature = 1.0

// SamplingFor returns the temperature, top_p and top_k that r runs with on
// a model declaring s: each field r omitted takes s's value, or the
// server's default when s has none; each field r set is r's.
func (r *Request) SamplingFor(s Sampling) (temperature, topP float64, topK int) {
	temperature, topP, topK = r.Temperature, r.TopP, r.TopK
	if r.Omitted&FieldTemperature != 0 {
		temperature = DefaultTemperature
		if s.Temperature != nil {
			temperature = *s.Temperature
		}
	}
	if r.Omitted&FieldTopP != 0 {
		topP = 0
		if s.TopP != nil {
			topP = *s.TopP
		}
	}
	if r.Omitted&FieldTopK != 0 {
		topK = 0
		if s.TopK != nil {
			topK = *s.TopK
		}
	}
	return temperature, topP, topK
}
