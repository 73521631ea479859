package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/internal/httplimit"
	"github.com/phaseless/phaseless/internal/httplimit/limittest"
)

// TestIdleAndTricklingConnectionsClosed is issue 27's finding 5 on the
// agent's real local API: 3,000 bodies trickling one byte every 5 s once
// stayed open. With the limits short here, trickling bodies to the chat
// endpoint and idle keep-alive connections are closed; the test waits for
// the agent's EOF, not for a clock.
func TestIdleAndTricklingConnectionsClosed(t *testing.T) {
	cfg := testConfig(t)
	cfg.HTTPLimits = httplimit.Config{HeaderTimeout: 300 * time.Millisecond, BodyTimeout: 300 * time.Millisecond,
		WriteTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond, MaxConns: 2000}
	a, _ := startAgent(t, cfg)
	limittest.Attack(t, a.Addr().String(), "/v1/chat/completions", nil, 0, 1000)
	limittest.Attack(t, a.Addr().String(), "/healthz", nil, 500, 0)
}

func TestHTTPLimitsFlags(t *testing.T) {
	var cfg Config
	cfg.FillDefaults()
	if cfg.HTTPLimits.MaxConns != DefaultHTTPMaxConns {
		t.Fatalf("MaxConns %d, want %d", cfg.HTTPLimits.MaxConns, DefaultHTTPMaxConns)
	}
	cfg.HTTPLimits.MaxConns = -1
	if err := cfg.Fields().Rename(cfg.Validate()); err == nil || !strings.Contains(err.Error(), "http-max-conns") {
		t.Fatalf("negative cap: %v", err)
	}
}
