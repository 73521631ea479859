package ingress

import (
	"fmt"
	"net/http"
)

// Role is what an API key may reach. Keys are separated by duty: an
// application's inference key leaking must not hand out the fleet (issue
// 21 found any tenant key could queue an update command on every car).
type Role string

const (
	// RoleInference reaches only the OpenAI/Anthropic surface
	// (/v1/chat/completions, /v1/messages, /v1/models). The default.
	RoleInference Role = "inference"
	// RoleOperator reaches only the fleet admin routes (/v1/fleet/...),
	// reading and changing.
	RoleOperator Role = "operator"
	// RoleViewer is a read-only operator (dashboards): GET and HEAD on the
	// fleet admin routes.
	RoleViewer Role = "viewer"
	// RoleWorker is another coordinator using this cloud as its worker: the
	// inference surface and the KV handoff endpoints (/v1/kv/), which run
	// prefills outside the budgets and push handoffs to a URL the caller
	// names, so a tenant's inference key must not reach them.
	RoleWorker Role = "worker"
)

// ParseRole reads a role name from the keys file.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleInference, RoleOperator, RoleViewer, RoleWorker:
		return r, nil
	}
	return "", fmt.Errorf("role %q: want inference, operator, viewer or worker", s)
}

// mayInfer reports whether r reaches the inference surface.
func (r Role) mayInfer() bool { return r == RoleInference || r == RoleWorker }

// mayAdmin reports whether r may make this request on the admin routes.
func (r Role) mayAdmin(method string) bool {
	switch r {
	case RoleOperator:
		return true
	case RoleViewer:
		return method == http.MethodGet || method == http.MethodHead
	}
	return false
}
