package cloud

import (
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/internal/httplimit"
	"github.com/phaseless/phaseless/internal/httplimit/limittest"
)

// TestIdleAndTricklingConnectionsClosed is issue 27's finding 5 on the
// cloud's real public listener: idle keep-alive connections and bodies
// trickling to the chat endpoint are closed within the configured limits
// (short here, so the test waits for the server's EOF, not for a clock).
func TestIdleAndTricklingConnectionsClosed(t *testing.T) {
	c := startCloud(t, func(cfg *Config) {
		cfg.HTTPLimits = httplimit.Config{HeaderTimeout: 300 * time.Millisecond, BodyTimeout: 300 * time.Millisecond,
			WriteTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}
	})
	limittest.Attack(t, c.HTTPAddr(), "/healthz", nil, 2000, 200)
	limittest.Attack(t, c.HTTPAddr(), "/v1/chat/completions", nil, 0, 200)
}

func TestHTTPLimitsFlags(t *testing.T) {
	var cfg Config
	cfg.FillDefaults()
	if cfg.HTTPLimits.MaxConns != DefaultHTTPMaxConns || cfg.HTTPLimits.IdleTimeout != 75*time.Second {
		t.Fatalf("defaults %+v", cfg.HTTPLimits)
	}
	cfg.Dev = true
	cfg.HTTPLimits.BodyTimeout = -time.Second
	if err := cfg.Validate(); err == nil || cfg.Fields().Flag("HTTPLimits.BodyTimeout") != "http-body-timeout" {
		t.Fatalf("negative body timeout: %v", err)
	}
	if err := cfg.Fields().Rename(cfg.Validate()); err == nil || !strings.Contains(err.Error(), "http-body-timeout") {
		t.Fatalf("error does not name the flag: %v", err)
	}
}
