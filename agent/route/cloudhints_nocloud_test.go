package route

import (
	"context"
	"testing"

	"github.com/phaseless/phaseless/transport/llm"
)

// x-phaseless-route: cloud with a cloud-only header on a device with no
// cloud configured is a 400 naming the header, not a local run ignoring it.
func TestForcedCloudWithoutCloudRefusesCloudHints(t *testing.T) {
	r, _ := NewRouter(Config{}, nil)
	local := &engine{tokens: []string{"l"}, failAt: -1}
	d, _ := NewDispatcher(DispatcherConfig{Router: r, Local: local})
	req := userReq("turn on the heated seats")
	req.Hints = llm.Hints{Route: PathCloud, Prefetch: "high"}
	_, err := d.Generate(context.Background(), req, func(llm.Token) error { return nil })
	if llm.CodeOf(err) != llm.CodeInvalid {
		t.Fatalf("err %v, local ran %d: x-prefetch-hint accepted and ignored", err, local.calls)
	}
}
