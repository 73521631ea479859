package route

import (
	"context"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/transport/llm"
)

// TestCloudOnlyHintsRefusedWhereTheCloudCannotBeReached: x-prefetch-hint,
// x-batch-threshold and x-semantic-mode act in the cloud's coordinator; a
// request forced local, or on a device without a cloud, is refused naming
// the header instead of ignoring it. One that may go to the cloud runs.
func TestCloudOnlyHintsRefusedWhereTheCloudCannotBeReached(t *testing.T) {
	r, _ := NewRouter(Config{}, nil)
	withCloud, _ := NewDispatcher(DispatcherConfig{Router: r, Local: &engine{tokens: []string{"l"}, failAt: -1}, Cloud: &engine{tokens: []string{"c"}, failAt: -1}})
	noCloud, _ := NewDispatcher(DispatcherConfig{Router: r, Local: &engine{tokens: []string{"l"}, failAt: -1}})
	for _, tc := range []struct {
		name   string
		d      *Dispatcher
		hints  llm.Hints
		header string // "" = runs
	}{
		{"prefetch forced local", withCloud, llm.Hints{Route: PathLocal, Prefetch: "high"}, "x-prefetch-hint"},
		{"threshold without a cloud", noCloud, llm.Hints{BatchThreshold: 0.5}, "x-batch-threshold"},
		{"mode without a cloud", noCloud, llm.Hints{SemanticMode: "intent"}, "x-semantic-mode"},
		{"may go to the cloud", withCloud, llm.Hints{SemanticMode: "intent"}, ""},
		{"forced to the cloud", withCloud, llm.Hints{Route: PathCloud, Prefetch: "low"}, ""},
		{"none set, local", noCloud, llm.Hints{Route: PathLocal}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := userReq("turn on the heated seats")
			req.Hints = tc.hints
			_, err := tc.d.Generate(context.Background(), req, func(llm.Token) error { return nil })
			if tc.header == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if llm.CodeOf(err) != llm.CodeInvalid || !strings.Contains(err.Error(), tc.header) {
				t.Fatalf("err %v, want invalid naming %s", err, tc.header)
			}
		})
	}
}
