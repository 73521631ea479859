package llm

import "testing"

// TestSamplingFor: an omitted field takes the model's declared value, or
// the server's default when the model declares none; a set field is the
// request's whatever the model declares.
func TestSamplingFor(t *testing.T) {
	temp, topP, topK := 0.5, 0.9, 40
	model := Sampling{Temperature: &temp, TopP: &topP, TopK: &topK}
	all := FieldTemperature | FieldTopP | FieldTopK
	for _, tc := range []struct {
		name    string
		req     Request
		model   Sampling
		temp, p float64
		k       int
	}{
		{"all omitted, declared", Request{Omitted: all}, model, 0.5, 0.9, 40},
		{"all omitted, none declared", Request{Omitted: all, Temperature: 1}, Sampling{}, DefaultTemperature, 0, 0},
		{"all set", Request{Temperature: 1.2, TopP: 0.3, TopK: 0}, model, 1.2, 0.3, 0},
		{"temperature set to 0", Request{Omitted: FieldTopP | FieldTopK}, model, 0, 0.9, 40},
		{"temperature set, top_k omitted", Request{Temperature: 0.8, Omitted: FieldTopK}, model, 0.8, 0, 40},
		{"only a temperature declared", Request{Omitted: all}, Sampling{Temperature: &temp}, 0.5, 0, 0},
	} {
		temp, p, k := tc.req.SamplingFor(tc.model)
		if temp != tc.temp || p != tc.p || k != tc.k {
			t.Errorf("%s: %g %g %d, want %g %g %d", tc.name, temp, p, k, tc.temp, tc.p, tc.k)
		}
	}
}
