package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/transport/cli"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// ota applies signed updates sent as fleet commands: "update url=U
// [rollback=true]" downloads a bundle, verifies it against the fleet's
// trusted key (--ota-pub), this board and the running version, and installs
// it into the inactive A/B slot on trial; "ota-commit" keeps the trial slot,
// "ota-rollback" abandons it. The device's boot supervisor starts the binary
// of the slot Running names; a trial that never commits rolls back by itself
// after firmware.MaxTrialBoots boots.
type ota struct {
	slots  *firmware.Slots
	key    ed25519.PublicKey // nil: no trusted key, updates refused
	board  string
	client *http.Client
}

// openOTA opens the slots under the data directory and counts this boot.
func openOTA(cfg Config, log *slog.Logger) (*ota, error) {
	o := &ota{board: cfg.Board, client: &http.Client{}}
	if cfg.OTAPub != "" {
		key, err := firmware.ReadPublicKey(cfg.OTAPub)
		if err != nil {
			return nil, &cli.FieldError{Field: "OTAPub", Err: err}
		}
		o.key = key
	}
	slots, err := firmware.OpenSlots(filepath.Join(cfg.DataDir, "ota"), cli.Version)
	if err != nil {
		return nil, err
	}
	slot, rolledBack, err := slots.Boot()
	if err != nil {
		return nil, err
	}
	if rolledBack {
		log.Warn("OTA trial slot never committed: rolled back", "slot", slot)
	}
	o.slots = slots
	return o, nil
}

// slot is the slot this boot runs, for the fleet status.
func (o *ota) slot() string {
	s, _ := o.slots.Running()
	return s
}

// maxBundleBytes bounds a download; the bundle's manifest bounds each file.
const maxBundleBytes = 1 << 30

func (o *ota) update(ctx context.Context, cmd fleetwire.Command) (string, error) {
	if o.key == nil {
		return "", errors.New("no trusted OTA key on this device (--ota-pub): updates are refused")
	}
	u, err := url.Parse(cmd.Args["url"])
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf(`argument "url" must be the bundle's http(s) URL, got %q`, cmd.Args["url"])
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("download bundle: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("download bundle: %s", resp.Status)
	}
	_, running := o.slots.Running()
	v, err := firmware.Open(http.MaxBytesReader(nil, resp.Body, maxBundleBytes), firmware.Policy{
		TrustedKey: o.key, Board: o.board, RunningVersion: running,
		AllowRollback: cmd.Args["rollback"] == "true",
	})
	if err != nil {
		return "", err
	}
	slot, err := o.slots.Install(v)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("installed %s into slot %s on trial; restart into it, then send ota-commit", v.Manifest.Version, slot), nil
}

func (o *ota) commit(context.Context, fleetwire.Command) (string, error) {
	if err := o.slots.Commit(); err != nil {
		return "", err
	}
	slot, version := o.slots.Running()
	return fmt.Sprintf("slot %s (%s) is now the active slot", slot, version), nil
}

func (o *ota) rollback(context.Context, fleetwire.Command) (string, error) {
	if err := o.slots.Rollback(); err != nil {
		return "", err
	}
	slot, version := o.slots.Running()
	return fmt.Sprintf("trial abandoned; slot %s (%s) runs at the next start", slot, version), nil
}
