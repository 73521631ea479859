package llm

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestCodeOf(t *testing.T) {
	tests := []struct {
		err  error
		want Code
	}{
		{nil, ""},
		{Errorf(CodeBudget, "over"), CodeBudget},
		{fmt.Errorf("wrapped: %w", Errorf(CodeOverloaded, "full")), CodeOverloaded},
		{context.Canceled, CodeCancelled},
		{context.DeadlineExceeded, CodeTimeout},
		{errors.New("boom"), CodeInternal},
	}
	for _, tt := range tests {
		if got := CodeOf(tt.err); got != tt.want {
			t.Errorf("CodeOf(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
	if !Errorf(CodeOverloaded, "x").Retryable || Errorf(CodeInvalid, "x").Retryable {
		t.Error("retryable classification wrong")
	}
}
