package ingress

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/pki"
	"github.com/phaseless/phaseless/transport/quic"
)

// QUICConfig configures the agents' listener.
type QUICConfig struct {
	Addr string
	// PKIDir holds the fleet CA and the server certificate (ResolvePKI).
	PKIDir  string
	Handler llm.Generator
	// Deny, when set, refuses revoked devices at the handshake and on each
	// request (pki.DenyRevoked, quic.ServerConfig.Revoked).
	Deny   *pki.DenyList
	Logger *slog.Logger
	// ResumeWindow and ResumeBufferBytes are quic.ServerConfig's
	// ResumeWindow and MaxReplayBytes (zero: their defaults).
	ResumeWindow      time.Duration
	ResumeBufferBytes int
}

// ResolvePKI returns the directory the cloud's certificates come from:
// pkiDir when given (made by phaselessctl pki init), else in dev mode
// DataDir/pki, created on first use and kept across restarts so agents
// enrolled against it stay valid.
func ResolvePKI(pkiDir string, dev bool, dataDir string) (string, error) {
	if pkiDir != "" {
		return pkiDir, nil
	}
	if !dev {
		return "", errors.New("--pki-dir is required outside --dev (phaselessctl pki init --dir D)")
	}
	dir := filepath.Join(dataDir, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("dev pki: %w", err)
	}
	if err := pki.EnsureDev(dir); err != nil {
		return "", fmt.Errorf("dev pki: %w", err)
	}
	return dir, nil
}

// NewQUIC binds the agents' listener: mutual TLS against the fleet CA, the
// device id (the client certificate's CN) as each request's tenant.
func NewQUIC(cfg QUICConfig) (*quic.Server, error) {
	tc, err := pki.ServerTLS(cfg.PKIDir)
	if err != nil {
		return nil, err
	}
	sc := quic.ServerConfig{Addr: cfg.Addr, TLS: tc, Handler: cfg.Handler, Logger: cfg.Logger,
		ResumeWindow: cfg.ResumeWindow, MaxReplayBytes: cfg.ResumeBufferBytes}
	if cfg.Deny != nil {
		pki.DenyRevoked(tc, cfg.Deny)
		sc.Revoked = cfg.Deny.Revoked
	}
	return quic.NewServer(sc)
}
