package route

import (
	"context"
	"testing"

	"github.com/phaseless/phaseless/llm"
)

// TestRawCompletionStaysOnDevice: a raw completion (llm.Request.Raw, from
// POST /v1/completions) runs on the device's engine whatever its score or
// the route mode, is never offloaded to the cloud when that engine refuses
// it, and asking for the cloud by header is a clear 400.
func TestRawCompletionStaysOnDevice(t *testing.T) {
	for _, tc := range []struct {
		name, mode, header string
		local              *engine
		wantCode           llm.Code
		wantText           string
	}{
		{name: "high entropy", local: &engine{tokens: []string{"Once"}, failAt: -1}, wantText: "Once"},
		{name: "route mode cloud", mode: PathCloud, local: &engine{tokens: []string{"Once"}, failAt: -1}, wantText: "Once"},
		{name: "local refuses: no offload", local: &engine{failAt: 0, err: llm.Errorf(llm.CodeContextLength, "too long")}, wantCode: llm.CodeContextLength},
		{name: "header cloud", header: PathCloud, local: &engine{tokens: []string{"Once"}, failAt: -1}, wantCode: llm.CodeInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewRouter(Config{Mode: tc.mode}, nil)
			if err != nil {
				t.Fatal(err)
			}
			cloud := &engine{tokens: []string{"cloud"}, failAt: -1}
			d, err := NewDispatcher(DispatcherConfig{Router: r, Local: tc.local, Cloud: cloud, Link: func() Link { return up }})
			if err != nil {
				t.Fatal(err)
			}
			req := &llm.Request{Raw: true, Prompt: highEntropy, MaxTokens: 4, Hints: llm.Hints{Route: tc.header}}
			if dec := r.Decide(req, up, Load{}); dec.Path != PathLocal {
				t.Errorf("decision %+v", dec)
			}
			var text string
			_, err = d.Generate(context.Background(), req, func(tok llm.Token) error { text += tok.Text; return nil })
			if llm.CodeOf(err) != tc.wantCode || text != tc.wantText {
				t.Errorf("text %q err %v, want %q and code %q", text, err, tc.wantText, tc.wantCode)
			}
			if cloud.calls != 0 {
				t.Errorf("the cloud ran a raw completion %d times", cloud.calls)
			}
		})
	}
}
