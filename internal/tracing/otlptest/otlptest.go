// Package otlptest is a real OTLP/HTTP trace receiver for tests: an HTTP
// server that decodes the protobuf export requests the OpenTelemetry
// exporter sends (opentelemetry-proto's ExportTraceServiceRequest) and
// keeps the spans, so tests check what a collector would get.
package otlptest

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span.
type Span struct {
	Name                          string
	TraceID, SpanID, ParentSpanID string // hex
	Service                       string // the resource's service.name
	Attributes                    map[string]string
}

// Receiver collects exported spans.
type Receiver struct {
	srv *httptest.Server

	mu    sync.Mutex // guards spans
	spans []Span
}

// New starts a receiver that stops when t ends. Its URL takes exports at
// /v1/traces, the OTLP/HTTP default path.
func New(t testing.TB) *Receiver {
	r := &Receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.export))
	t.Cleanup(r.srv.Close)
	return r
}

// URL is the receiver's base URL (the exporter adds /v1/traces).
func (r *Receiver) URL() string { return r.srv.URL }

func (r *Receiver) export(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces with application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var ex coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &ex); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range ex.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				attrs := map[string]string{}
				for _, a := range s.GetAttributes() {
					switch v := a.GetValue().GetValue().(type) {
					case *common.AnyValue_StringValue:
						attrs[a.GetKey()] = v.StringValue
					case *common.AnyValue_IntValue:
						attrs[a.GetKey()] = strconv.FormatInt(v.IntValue, 10)
					}
				}
				got = append(got, Span{
					Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Service: service, Attributes: attrs,
				})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Write(b)
}

// Spans returns what was received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Trace returns the received spans of one trace, by name (the last one of
// each name wins).
func (r *Receiver) Trace(traceID string) map[string]Span {
	out := map[string]Span{}
	for _, s := range r.Spans() {
		if s.TraceID == traceID {
			out[s.Name] = s
		}
	}
	return out
}
