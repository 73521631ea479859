package fleetwire

import (
	"errors"
	"fmt"
)

// Quality signals for answers a device gave locally, kept with the
// telemetry (each is a Record of its own kind, joined to its request by
// TraceID) so the router's retraining can label a local answer by whether
// it was any good, not by whether it merely returned.
const (
	// KindRequest is a RequestRecord.
	KindRequest = "request"
	// KindFeedback is a FeedbackRecord: an app's verdict (POST /v1/feedback).
	KindFeedback = "feedback"
	// KindShadow is a ShadowRecord: a locally answered request the device
	// sampled for shadow evaluation, with its text and the local answer.
	KindShadow = "shadow"
	// KindShadowGrade is a ShadowGrade: the cloud's grade of a shadow
	// record, stored by the cloud beside the device's records.
	KindShadowGrade = "shadow-grade"
)

// Feedback ratings.
const (
	RatingGood = "good"
	RatingBad  = "bad"
)

// FeedbackRecord is an app's verdict on one answer, by its request id
// (the x-request-id response header).
type FeedbackRecord struct {
	TraceID string `json:"trace_id"`
	Rating  string `json:"rating"` // good | bad
	Note    string `json:"note,omitempty"`
}

// MaxFeedbackNote bounds a feedback note.
const MaxFeedbackNote = 1024

// Validate names the first bad field.
func (f FeedbackRecord) Validate() error {
	switch {
	case f.TraceID == "" || len(f.TraceID) > 128:
		return errors.New("request_id: the x-request-id of the answer, 1..128 characters")
	case f.Rating != RatingGood && f.Rating != RatingBad:
		return fmt.Errorf("rating: %q, want good or bad", f.Rating)
	case len(f.Note) > MaxFeedbackNote:
		return fmt.Errorf("note: %d bytes, at most %d", len(f.Note), MaxFeedbackNote)
	}
	return nil
}

// ShadowRecord is a locally answered request sampled for shadow
// evaluation. Unlike a RequestRecord it carries text off the device,
// which is why sampling is off unless the fleet config turns it on.
type ShadowRecord struct {
	TraceID string `json:"trace_id"`
	// Prompt is the conversation as the router saw it (role: content).
	Messages []ShadowMessage `json:"messages"`
	Answer   string          `json:"answer"` // the local engine's answer
	// MaxTokens is the request's, so the cloud answers under the same bound.
	MaxTokens int `json:"max_tokens"`
	// CloudProb is the router's score for the request and Path where it
	// was answered for the user (local, or cloud: then the device ran its
	// engine on the side for the sample alone). The fleet calibrates the
	// device's threshold on them (models/riskcontrol); nil from an agent
	// that predates them.
	CloudProb *float64 `json:"cloud_prob,omitempty"`
	Path      string   `json:"path,omitempty"`
	// Router is the router model whose score CloudProb is: the predictor
	// version in force (Status.Artifacts), or RouterBuiltin. The fleet
	// calibrates a device on the scores of the router it runs now only,
	// so a sample scored by the one before a rollout, graded after it,
	// is left out. Empty from an agent that predates it.
	Router string `json:"router,omitempty"`
}

// RouterBuiltin is ShadowRecord.Router for the router an agent is built
// with (no predictor artifact installed: Status.Artifacts has none).
const RouterBuiltin = "builtin"

// ShadowMessage is one message of a shadowed request.
type ShadowMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ShadowGrade is the cloud's verdict on a shadowed local answer: its own
// answer to the same request is the reference (models/grade.Against).
type ShadowGrade struct {
	TraceID string  `json:"trace_id"`
	OK      bool    `json:"ok"`
	Score   float64 `json:"score"`
	Why     string  `json:"why,omitempty"`
	Cloud   string  `json:"cloud_answer,omitempty"`
	Error   string  `json:"error,omitempty"` // the cloud could not answer: no verdict
	// CloudProb, Path and Router are the sample's (ShadowRecord).
	CloudProb *float64 `json:"cloud_prob,omitempty"`
	Path      string   `json:"path,omitempty"`
	Router    string   `json:"router,omitempty"`
}
