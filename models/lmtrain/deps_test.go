package lmtrain

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentDoesNotLinkTrainer keeps training code off devices: the agent
// binary must not depend on this package (DESIGN.md §3), nor on the models'
// corpora.
func TestAgentDoesNotLinkTrainer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "github.com/phaseless/phaseless/agent/cmd/phaseless-agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list gave %d packages; cannot judge", len(deps))
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/phaseless/phaseless/models/lmtrain") {
			t.Errorf("the agent links %s", d)
		}
	}
}
