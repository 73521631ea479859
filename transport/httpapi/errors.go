package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// apiError is one failure as both APIs see it. Each API writes it in its own
// JSON shape; the status is the same for both.
type apiError struct {
	status     int
	code       llm.Code // classification, for metrics and logs
	message    string
	param      string // the offending field or header, when there is one
	oaiType    string // OpenAI error.type
	oaiCode    string // OpenAI error.code
	antType    string // Anthropic error.type
	retryAfter time.Duration
}

func (e *apiError) Error() string { return e.message }

func invalid(param, format string, args ...any) *apiError {
	return &apiError{
		status: http.StatusBadRequest, code: llm.CodeInvalid, param: param,
		message: fmt.Sprintf(format, args...),
		oaiType: "invalid_request_error", antType: "invalid_request_error",
	}
}

func notFound(format string, args ...any) *apiError {
	return &apiError{
		status: http.StatusNotFound, code: llm.CodeInvalid, message: fmt.Sprintf(format, args...),
		oaiType: "invalid_request_error", oaiCode: "not_found", antType: "not_found_error",
	}
}

// fromError maps a generator's or authenticator's error to the status and
// error types of DESIGN.md §4.
func fromError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	e := &apiError{code: llm.CodeOf(err), message: err.Error()}
	var le *llm.Error
	if errors.As(err, &le) {
		e.message, e.retryAfter = le.Message, le.RetryAfter
	}
	switch e.code {
	case llm.CodeInvalid:
		e.status, e.oaiType, e.antType = http.StatusBadRequest, "invalid_request_error", "invalid_request_error"
	case llm.CodeContextLength:
		e.status, e.oaiType, e.oaiCode, e.antType = http.StatusBadRequest, "invalid_request_error", "context_length_exceeded", "invalid_request_error"
	case llm.CodeAuth:
		e.status, e.oaiType, e.oaiCode, e.antType = http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "authentication_error"
	case llm.CodePermission:
		e.status, e.oaiType, e.oaiCode, e.antType = http.StatusForbidden, "invalid_request_error", "permission_denied", "permission_error"
	case llm.CodeBudget:
		e.status, e.oaiType, e.oaiCode, e.antType = http.StatusTooManyRequests, "rate_limit_error", "rate_limit_exceeded", "rate_limit_error"
	case llm.CodeOverloaded:
		e.status, e.oaiType, e.oaiCode, e.antType = http.StatusServiceUnavailable, "server_error", "overloaded", "overloaded_error"
	case llm.CodeUnavailable:
		e.status, e.oaiType, e.oaiCode, e.antType = http.StatusServiceUnavailable, "server_error", "unavailable", "api_error"
	case llm.CodeCancelled:
		// Nobody reads this (the client went away) but the status keeps logs honest.
		e.status, e.oaiType, e.oaiCode, e.antType = 499, "invalid_request_error", "cancelled", "api_error"
	case llm.CodeTimeout:
		e.status, e.oaiType, e.oaiCode, e.antType = http.StatusGatewayTimeout, "server_error", "timeout", "api_error"
	default:
		e.status, e.oaiType, e.oaiCode, e.antType = http.StatusInternalServerError, "server_error", "internal_error", "api_error"
	}
	return e
}

// api is which API shape a response takes.
type api int

const (
	apiOpenAI api = iota
	apiAnthropic
)

func (a api) String() string {
	if a == apiAnthropic {
		return "anthropic"
	}
	return "openai"
}

type oaiErrorBody struct {
	Error oaiError `json:"error"`
}

type oaiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

type antErrorBody struct {
	Type  string   `json:"type"` // always "error"
	Error antError `json:"error"`
}

type antError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

func strOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// body returns the error JSON in a's shape.
func (e *apiError) body(a api) []byte {
	var v any
	if a == apiAnthropic {
		v = antErrorBody{Type: "error", Error: antError{Type: e.antType, Message: e.message}}
	} else {
		v = oaiErrorBody{Error: oaiError{Message: e.message, Type: e.oaiType, Param: strOrNil(e.param), Code: strOrNil(e.oaiCode)}}
	}
	b, _ := json.Marshal(v) // plain structs of strings cannot fail
	return b
}

// write sends e as a complete response; headers set earlier (x-phaseless-*)
// are kept.
func (e *apiError) write(w http.ResponseWriter, a api) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((e.retryAfter+time.Second-1)/time.Second)))
	}
	w.WriteHeader(e.status)
	w.Write(e.body(a))
}
