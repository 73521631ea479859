package llm

// Trace is a request's W3C trace context (https://www.w3.org/TR/trace-context/):
// the traceparent and tracestate an app sent, or the ones a hop rewrote to
// name its own span as the parent of the next hop's. It rides every hop —
// HTTP headers, the QUIC request frame, a remote engine's HTTP request —
// so one trace spans the device, the cloud and its workers.
type Trace struct {
	Parent string // traceparent: version-traceid-spanid-flags; "" = none
	State  string // tracestate, vendor entries passed through unread
}
