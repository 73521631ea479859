package client

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Error is a failed request: an HTTP error answer in either API's shape,
// an error event in the middle of a stream, or a transport failure.
type Error struct {
	Status  int    // HTTP status; 0 for a transport failure or a stream's error event
	Type    string // the API's error.type (rate_limit_error, overloaded_error, ...)
	Code    string // OpenAI's error.code, when the server sent one
	Message string
	// RetryAfter is the server's Retry-After.
	RetryAfter time.Duration
	// Budget is x-burst-budget-remaining on the refusal, valid when HasBudget.
	Budget    int64
	HasBudget bool
	// Transport is true when no HTTP answer came (refused, reset, timed out).
	Transport bool
	// MidStream is true when the stream failed after text was delivered.
	MidStream bool
	URL       string // the base URL that failed
	err       error
}

func (e *Error) Error() string {
	switch {
	case e.Status != 0:
		return fmt.Sprintf("%s: %d %s: %s", e.URL, e.Status, e.Type, e.Message)
	case e.URL != "":
		return e.URL + ": " + e.Message
	}
	return e.Message
}

// Unwrap returns the transport's or the context's error, if any.
func (e *Error) Unwrap() error { return e.err }

// retryable: failures that a later try of the same server may not have.
// Transport failures and stream cuts before any text, 429, 502, 503, 504.
func (e *Error) retryable() bool {
	switch e.Status {
	case 0:
		return e.Transport || e.Type == "overloaded_error" || e.Type == "rate_limit_error" || e.Code == "overloaded"
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// fallbackable: failures another server may not have: this one is
// unreachable or broken. A 4xx is the request's own fault (or the
// caller's budget, which every Phaseless server shares) and is not.
func (e *Error) fallbackable() bool {
	return e != nil && !e.MidStream && (e.Transport || e.Status >= 500 || (e.Status == 0 && e.retryable()))
}

// outcome is the metrics label of a failure.
func (e *Error) outcome() string {
	switch {
	case e.MidStream:
		return "mid_stream"
	case e.Transport:
		return "transport"
	case e.Status == 0:
		return "stream_error"
	}
	return strconv.Itoa(e.Status)
}
