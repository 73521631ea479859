package route

import (
	"context"
	"testing"

	"github.com/phaseless/phaseless/llm"
)

// TestRouteMode checks Config.Mode: it routes requests that pin no route,
// a request's header still wins, and under mode local a refusing local
// engine does not offload to the cloud.
func TestRouteMode(t *testing.T) {
	tests := []struct {
		mode, pin string
		p         float64
		want      string
		reason    string
	}{
		{"", "", 0.9, PathCloud, "p="},
		{ModeAuto, "", 0.1, PathLocal, "p="},
		{PathLocal, "", 0.9, PathLocal, "route-mode: local"},
		{PathLocal, "auto", 0.9, PathLocal, "route-mode: local"},
		{PathCloud, "", 0.1, PathCloud, "route-mode: cloud"},
		{PathCloud, "local", 0.1, PathLocal, "x-phaseless-route: local"},
		{PathLocal, "cloud", 0.1, PathCloud, "x-phaseless-route: cloud"},
	}
	for _, tt := range tests {
		r, err := NewRouter(Config{Mode: tt.mode}, &fixedPredictor{p: tt.p})
		if err != nil {
			t.Fatal(err)
		}
		req := userReq("x")
		req.Hints.Route = tt.pin
		if d := r.Decide(req, up, Load{}); d.Path != tt.want || d.Reason != tt.reason && tt.reason != "p=" {
			t.Errorf("mode %q pin %q: %s (%s), want %s (%s)", tt.mode, tt.pin, d.Path, d.Reason, tt.want, tt.reason)
		}
	}
	if _, err := NewRouter(Config{Mode: "sideways"}, nil); err == nil {
		t.Error("mode sideways accepted")
	}

	// Mode local: a refusal by the local engine is the answer, not an offload.
	for _, mode := range []string{ModeAuto, PathLocal} {
		r, _ := NewRouter(Config{Mode: mode}, &fixedPredictor{p: 0.1})
		cloud := &countingGen{}
		d, err := NewDispatcher(DispatcherConfig{Router: r, Local: refusingGen{}, Cloud: cloud, Link: func() Link { return up }})
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.Generate(context.Background(), userReq("x"), func(llm.Token) error { return nil })
		if offloaded := cloud.n > 0; offloaded != (mode == ModeAuto) {
			t.Errorf("mode %s: offloaded %v (err %v)", mode, offloaded, err)
		}
	}
}

type refusingGen struct{}

func (refusingGen) Generate(context.Context, *llm.Request, llm.Emit) (llm.Final, error) {
	return llm.Final{}, &llm.Error{Code: llm.CodeOverloaded, Message: "queue full"}
}

type countingGen struct{ n int }

func (c *countingGen) Generate(_ context.Context, _ *llm.Request, emit llm.Emit) (llm.Final, error) {
	c.n++
	if err := emit(llm.Token{Text: "ok"}); err != nil {
		return llm.Final{}, err
	}
	return llm.Final{FinishReason: "stop"}, nil
}
