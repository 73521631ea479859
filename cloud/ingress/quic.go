package ingress

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/phaseless/phaseless/transport/llm"
	"github.com/phaseless/phaseless/transport/pki"
	"github.com/phaseless/phaseless/transport/quic"
)

// QUICConfig configures the agents' listener.
type QUICConfig struct {
	Addr string
	// PKIDir holds the fleet CA and the server certificate (phaselessctl pki
	// init). Empty in dev mode means DataDir/pki, created when absent.
	PKIDir  string
	Dev     bool
	DataDir string
	Handler llm.Generator
	Logger  *slog.Logger
}

// PKIDir is the directory the QUIC listener takes its certificates from.
func (c QUICConfig) pkiDir() (string, error) {
	if c.PKIDir != "" {
		return c.PKIDir, nil
	}
	if !c.Dev {
		return "", errors.New("ingress: --pki-dir is required outside --dev (phaselessctl pki init --dir D)")
	}
	return filepath.Join(c.DataDir, "pki"), nil
}

// NewQUIC binds the agents' listener: mutual TLS against the fleet CA, the
// device id (the client certificate's CN) as each request's tenant.
func NewQUIC(cfg QUICConfig) (*quic.Server, string, error) {
	dir, err := cfg.pkiDir()
	if err != nil {
		return nil, "", err
	}
	if cfg.Dev && cfg.PKIDir == "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, "", fmt.Errorf("dev pki: %w", err)
		}
		if err := pki.EnsureDev(dir); err != nil {
			return nil, "", fmt.Errorf("dev pki: %w", err)
		}
	}
	tc, err := pki.ServerTLS(dir)
	if err != nil {
		return nil, "", err
	}
	s, err := quic.NewServer(quic.ServerConfig{Addr: cfg.Addr, TLS: tc, Handler: cfg.Handler, Logger: cfg.Logger})
	if err != nil {
		return nil, "", err
	}
	return s, dir, nil
}
