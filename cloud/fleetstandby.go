package cloud

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/cloud/ui"
)

// Several replicas, one fleet writer (cloud/fleet/lease.go): with
// --fleet-standby a replica whose Redis lease is held by another waits as
// a standby (fleet.Standby) instead of refusing to start. It serves
// inference meanwhile and answers the fleet API with 503 naming the
// writer; when the writer stops or dies it opens the shared
// --fleet-data-dir and carries the fleet on, rollouts included. The
// broker must be one every replica reaches (--mqtt-url): an embedded
// broker's sessions and retained messages die with its replica.

func (c *Cloud) fleetDataDir() string {
	if c.cfg.FleetDataDir != "" {
		return c.cfg.FleetDataDir
	}
	return filepath.Join(c.cfg.DataDir, "fleet")
}

func (c *Cloud) startStandby(fc fleet.Config) error {
	s, err := fleet.OpenStandby(fc, 0)
	if err != nil {
		return err
	}
	if err := s.Writer(); err != nil {
		c.log.Info("fleet standby: waiting for the fleet lease", "reason", err)
	}
	c.standby = s
	return nil
}

// fleetHTTP is the fleet's HTTP surface, from the Manager or the Standby.
type fleetHTTP interface {
	Handler() http.Handler
	ArtifactHandler() http.Handler
}

// fleetAPI returns the fleet's handlers and readiness; nil without a fleet.
func (c *Cloud) fleetAPI() (fleetHTTP, func() error) {
	switch {
	case c.fleet != nil:
		return c.fleet, c.fleet.Ready
	case c.standby != nil:
		return c.standby, c.standby.Ready
	}
	return nil, nil
}

// fleetWriter is the Manager steering the fleet from this process now,
// nil when there is none (no fleet, or standing by).
func (c *Cloud) fleetWriter() *fleet.Manager {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fleet != nil {
		return c.fleet
	}
	if c.standby != nil {
		return c.standby.Manager()
	}
	return nil
}

// standbyFleet is the dashboard's view of a Standby: the writer's Manager,
// or ErrStandby while another replica is the writer.
type standbyFleet struct{ s *fleet.Standby }

var _ ui.Fleet = standbyFleet{}

func (f standbyFleet) manager() (*fleet.Manager, error) {
	if m := f.s.Manager(); m != nil {
		return m, nil
	}
	return nil, f.s.Writer()
}

func (f standbyFleet) Devices() ([]*fleet.Device, error) {
	m, err := f.manager()
	if err != nil {
		return nil, err
	}
	return m.Devices()
}

func (f standbyFleet) Device(id string) (*fleet.Device, error) {
	m, err := f.manager()
	if err != nil {
		return nil, err
	}
	return m.Device(id)
}

func (f standbyFleet) StatusHistory(id string) []fleet.StatusEvent {
	m, err := f.manager()
	if err != nil {
		return nil
	}
	return m.StatusHistory(id)
}

func (f standbyFleet) SendCommand(ctx context.Context, id, name string, args map[string]string) (*fleet.CommandState, error) {
	m, err := f.manager()
	if err != nil {
		return nil, err
	}
	return m.SendCommand(ctx, id, name, args)
}

func (f standbyFleet) Export(ctx context.Context, w io.Writer, since time.Time, device string) (int, error) {
	m, err := f.manager()
	if err != nil {
		return 0, err
	}
	return m.Export(ctx, w, since, device)
}
