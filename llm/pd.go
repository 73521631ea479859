package llm

// Split is the decode half of a request whose prefill and decode ran on
// different workers (prefill/decode disaggregation): Meta.Pool and
// Meta.Worker name where the prompt's prefill ran, Split where its KV
// blocks were handed and the tokens came from. The zero Split means the
// request ran on one worker.
type Split struct {
	DecodePool   string
	DecodeWorker string
	// KVBytes is the size of the handed-off keys and values as they
	// travelled (the encoded handoff between processes).
	KVBytes int64
}

// IsSet reports whether the request was split.
func (s Split) IsSet() bool { return s.DecodeWorker != "" }

// String is the decode half as the x-phaseless-decode response header
// writes it: "<pool>/<worker>".
func (s Split) String() string {
	if !s.IsSet() {
		return ""
	}
	return s.DecodePool + "/" + s.DecodeWorker
}
