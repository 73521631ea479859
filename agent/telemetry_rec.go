package agent

import (
	"context"
	"sync"

	"github.com/phaseless/phaseless/agent/telemetry"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// telemetryRecorder stores each request's record on the request path: the
// dispatcher calls record after the engine's answer and before the handler
// writes the response's end (the last SSE event, the JSON body), and record
// returns once the record is committed and fsync'd. An answer a client has
// received therefore has a durable record, also if the agent is killed the
// next moment (issue 27 item 7: an asynchronous queue lost 6–12% of the
// records of the last answers before a kill -9).
//
// The cost is one commit per answer, shared: the store group-commits the
// appends that wait at the same time into one transaction, so many requests
// ending together wait for one fsync between them, not one each.
type telemetryRecorder struct {
	store  *telemetry.Store
	failed *metrics.Counter

	mu     sync.Mutex          // guards served, ring, next
	served map[string]struct{} // the ids in ring
	ring   []string            // the last servedIDs request ids, oldest at next
	next   int
}

// servedIDs is how many of its latest answers an app can rate
// (POST /v1/feedback): thousands of requests back, at ~50 bytes an id. An
// id the agent never answered, or answered before it restarted, is refused
// with 404, as feedback the cloud could not join to a request's record.
const servedIDs = 4096

func newTelemetryRecorder(store *telemetry.Store, reg *metrics.Registry) *telemetryRecorder {
	reg.GaugeFunc("phaseless_agent_telemetry_pending", "records stored and not yet acknowledged by the cloud", func() float64 { return float64(store.Stats().Records) })
	return &telemetryRecorder{
		store:  store,
		failed: reg.Counter("phaseless_agent_telemetry_errors_total", "request records the telemetry store refused"),
		served: make(map[string]struct{}, servedIDs),
		ring:   make([]string, servedIDs),
	}
}

// record stores rec and returns once it is durable; the dispatcher bounds
// the wait with ctx and logs a failure.
func (r *telemetryRecorder) record(ctx context.Context, rec fleetwire.RequestRecord) error {
	r.remember(rec.TraceID)
	if _, err := r.store.AppendRequest(ctx, rec); err != nil {
		r.failed.Inc()
		return err
	}
	return nil
}

// remember adds a request id to the ones feedback may name, forgetting the
// oldest.
func (r *telemetryRecorder) remember(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.served[id]; ok || id == "" {
		return
	}
	delete(r.served, r.ring[r.next])
	r.ring[r.next] = id
	r.served[id] = struct{}{}
	r.next = (r.next + 1) % len(r.ring)
}

// answered reports whether id is one of the latest servedIDs requests.
func (r *telemetryRecorder) answered(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.served[id]
	return ok
}
