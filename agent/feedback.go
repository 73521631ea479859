package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// feedback is POST /v1/feedback: an app says whether an answer was good,
// by the answer's request id (its x-request-id header). The verdict is
// kept in the telemetry store as a record of its own (fleetwire.KindFeedback)
// and reaches the cloud with the rest, where retraining joins it to the
// request's record: a bad local answer teaches the router that such a
// request needs the cloud.
//
//	{"request_id": "…", "rating": "good"|"bad", "note": "optional"} → 202 {"status":"recorded"}
//
// A request id this agent did not answer (among its latest servedIDs) is
// refused with 404: a verdict the cloud cannot join to a request's record
// would be kept, shipped and dropped, while the app believed it counted.
func (a *Agent) feedback(w http.ResponseWriter, r *http.Request) {
	var body struct {
		RequestID string `json:"request_id"`
		Rating    string `json:"rating"`
		Note      string `json:"note,omitempty"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		feedbackError(w, http.StatusBadRequest, errors.New("body: "+err.Error()))
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		feedbackError(w, http.StatusBadRequest, errors.New("body: data after the JSON object"))
		return
	}
	rec := fleetwire.FeedbackRecord{TraceID: body.RequestID, Rating: body.Rating, Note: body.Note}
	if err := rec.Validate(); err != nil {
		feedbackError(w, http.StatusBadRequest, err)
		return
	}
	if !a.rec.answered(rec.TraceID) {
		feedbackError(w, http.StatusNotFound, fmt.Errorf("request_id %q: no answer of this agent has that id (only its latest %d can be rated)", rec.TraceID, servedIDs))
		return
	}
	data, _ := json.Marshal(rec)
	if _, err := a.store.Append(r.Context(), fleetwire.KindFeedback, data); err != nil {
		a.log.Error("feedback not stored", "err", err)
		feedbackError(w, http.StatusServiceUnavailable, errors.New("the telemetry store did not take the feedback: "+err.Error()))
		return
	}
	a.mFeedback.With(rec.Rating).Inc()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"status":"recorded"}` + "\n"))
}

// feedbackError answers in the OpenAI error shape the rest of /v1/ uses.
func feedbackError(w http.ResponseWriter, status int, err error) {
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code,omitempty"`
		} `json:"error"`
	}
	e.Error.Message, e.Error.Type = err.Error(), "invalid_request_error"
	switch {
	case status == http.StatusNotFound:
		e.Error.Code = "not_found" // as the API's other 404s (transport/httpapi)
	case status >= 500:
		e.Error.Type = "api_error"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(e)
}
