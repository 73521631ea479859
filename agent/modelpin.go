package agent

import (
	"context"

	"github.com/phaseless/phaseless/agent/route"
	"github.com/phaseless/phaseless/llm"
)

// modelPin makes a listed model name mean what it says: a request that
// names the local engine's model (GET /v1/models lists it) runs on the
// device, as x-phaseless-route: local would make it, with no fallback to a
// cloud that serves another model. "auto" leaves the choice to the router.
type modelPin struct {
	next  llm.Generator
	local string // the local engine's model name
}

var _ llm.Generator = modelPin{}

func (p modelPin) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	if req.Model == p.local && p.local != "" {
		switch req.Hints.Route {
		case "", "auto":
			req.Hints.Route = route.PathLocal
		case route.PathCloud:
			return llm.Final{}, llm.Errorf(llm.CodeInvalid, "model %q runs on this device; x-phaseless-route: cloud asks for the cloud (use model \"auto\")", req.Model)
		}
	}
	return p.next.Generate(ctx, req, emit)
}
