package coordinator

import (
	"strings"
	"testing"

	"github.com/phaseless/phaseless/cloud/sched"
)

// TestCharsPerTokenEstimate: with CharsPerToken set (remote engines only,
// prompts counted byte-wise) the scheduler's prompt length is the bytes
// over it, while the block hashes and the budget's charge stay byte-wise.
func TestCharsPerTokenEstimate(t *testing.T) {
	w, _ := builtinWorker(t, "b0", sched.RoleStream)
	c, _ := newCoordinator(t, &clock{}, w)
	req := request("t", strings.Repeat("abcd", 100), 4)
	bytes := c.measure(req)
	c.cfg.CharsPerToken = 4
	m := c.measure(req)
	if want := (bytes.sig.InputTokens + 3) / 4; m.sig.InputTokens != want {
		t.Fatalf("estimate %d tokens from %d bytes, want %d", m.sig.InputTokens, bytes.sig.InputTokens, want)
	}
	if m.cost != bytes.cost || len(m.sig.BlockHashes) != len(bytes.sig.BlockHashes) {
		t.Fatalf("charge %d and %d hashes, byte-wise %d and %d", m.cost, len(m.sig.BlockHashes), bytes.cost, len(bytes.sig.BlockHashes))
	}
}
