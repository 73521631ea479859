package agent

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/phaseless/phaseless/agent/route"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// deviceSetting is one setting the fleet may change on a device through
// its desired config (fleetwire.DesiredConfig.Values). The key is the
// agent's own flag name; a value is parsed exactly as that flag parses it
// and the whole result is validated as a Config before anything changes.
// Live settings apply at once; the others at the next start, from the
// values kept in DATA_DIR/device-config.json.
type deviceSetting struct {
	key  string
	live bool
}

// deviceSettings is the documented set (docs/fleet-device.md).
var deviceSettings = []deviceSetting{
	{"route-threshold", true},
	{"route-hysteresis", true},
	{"route-mode", true},
	{"shadow-share", true},
	{"router-alpha", true},
	{"router-delta", true},
	{"probe-margin", true},
	{"probe-set", true},
	{"log-level", true},
	{"update-bandwidth", true},
	{"update-on-metered", true},
	{"metered", true},
	{"cloud", false},
	{"cloud-first-token-timeout", false},
	{"cloud-retry-max", false},
	{"resume-deadline", false},
	{"local-concurrency", false},
	{"local-queue", false},
	{"max-output-tokens", false},
	{"telemetry-rate", false},
	{"telemetry-max-records", false},
}

func settingByKey(k string) (deviceSetting, bool) {
	for _, s := range deviceSettings {
		if s.key == k {
			return s, true
		}
	}
	return deviceSetting{}, false
}

// deviceConfigFile keeps the last applied desired config on the device.
const deviceConfigFile = "device-config.json"

// storedConfig is deviceConfigFile's content.
type storedConfig struct {
	Version uint64            `json:"version"`
	Values  map[string]string `json:"values"`
}

// overlay returns base with the fleet's values applied and validated. The
// log level is not a Config field: it comes back on its own ("" if unset).
func overlay(base Config, values map[string]string) (Config, string, error) {
	cfg := base
	fs := flag.NewFlagSet("fleet config", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fields := cfg.Fields()
	fields.Register(fs)
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad key is the same every time
	var level string
	for _, k := range keys {
		if _, ok := settingByKey(k); !ok {
			return base, "", fmt.Errorf("%q is not a device setting (settable: %s)", k, settableKeys())
		}
		v := values[k]
		if k == "log-level" {
			var l slog.Level
			if err := l.UnmarshalText([]byte(v)); err != nil {
				return base, "", fmt.Errorf("log-level: %q is not one of debug, info, warn, error", v)
			}
			level = v
			continue
		}
		if err := fs.Set(k, v); err != nil {
			return base, "", fmt.Errorf("%s: %w", k, err)
		}
	}
	if err := cfg.Validate(); err != nil {
		var fe *cli.FieldError
		if errors.As(err, &fe) {
			if f := fields.Flag(fe.Field); f != "" {
				return base, "", fmt.Errorf("%s: %w", f, fe.Err)
			}
		}
		return base, "", err
	}
	return cfg, level, nil
}

func settableKeys() string {
	ks := make([]string, len(deviceSettings))
	for i, s := range deviceSettings {
		ks[i] = s.key
	}
	return strings.Join(ks, ", ")
}

// loadDeviceConfig applies the desired config kept from the last run to
// cfg, so settings that need a restart take effect now. A file that no
// longer applies (a flag changed under it) is ignored with a warning: the
// cloud re-sends the desired config and the agent reports the problem then.
func loadDeviceConfig(cfg Config, log *slog.Logger) Config {
	raw, err := os.ReadFile(filepath.Join(cfg.DataDir, deviceConfigFile))
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			log.Warn("device config not read", "err", err)
		}
		return cfg
	}
	var sc storedConfig
	if err := json.Unmarshal(raw, &sc); err != nil {
		log.Warn("device config file is corrupt; ignored", "err", err)
		return cfg
	}
	next, level, err := overlay(cfg, sc.Values)
	if err != nil {
		log.Warn("device config no longer applies; ignored", "version", sc.Version, "err", err)
		return cfg
	}
	if level != "" {
		setLogLevel(level)
	}
	log.Info("device config from the fleet applied", "version", sc.Version)
	return next
}

func setLogLevel(v string) {
	var l slog.Level
	if l.UnmarshalText([]byte(v)) == nil {
		cli.LogLevel.Set(l)
	}
}

// applyDesired is the fleet client's OnConfig: it validates the whole
// desired config, keeps it for the next start, applies the live settings
// and reports which changed settings wait for a restart. An invalid config
// changes nothing and its error names the setting.
func (a *Agent) applyDesired(_ context.Context, dc fleetwire.DesiredConfig) ([]string, error) {
	a.cfgMu.Lock()
	defer a.cfgMu.Unlock()
	next, level, err := overlay(a.baseCfg, dc.Values)
	if err != nil {
		return nil, err
	}
	raw, _ := json.Marshal(storedConfig{Version: dc.Version, Values: dc.Values})
	if err := firmware.WriteAtomic(a.cfg.DataDir, deviceConfigFile, raw); err != nil {
		return nil, fmt.Errorf("keep the device config: %w", err)
	}
	if next.RouteThreshold != a.running.RouteThreshold || next.RouteHysteresis != a.running.RouteHysteresis || next.RouteMode != a.running.RouteMode {
		r, err := route.NewRouter(a.routeConfig(next), a.pred)
		if err != nil {
			return nil, err // Validate passed, so this is a bug; nothing has changed
		}
		a.disp.SetRouter(r)
		a.running.RouteThreshold, a.running.RouteHysteresis, a.running.RouteMode = next.RouteThreshold, next.RouteHysteresis, next.RouteMode
	}
	a.running.RouterAlpha, a.running.RouterDelta = next.RouterAlpha, next.RouterDelta
	a.running.ProbeMargin, a.running.ProbeSet = next.ProbeMargin, next.ProbeSet
	if next.ShadowShare != a.running.ShadowShare {
		a.shadow.SetShare(next.ShadowShare)
		a.running.ShadowShare = next.ShadowShare
	}
	if l := next.linkPolicy(); l != a.running.linkPolicy() {
		a.ota.SetLink(l)
		a.running.UpdateBandwidth, a.running.UpdateOnMetered, a.running.Metered = next.UpdateBandwidth, next.UpdateOnMetered, next.Metered
	}
	if level == "" {
		level = a.startLevel
	}
	setLogLevel(level)
	// What differs from the running process and is not live waits for a
	// restart.
	var restart []string
	cur, nxt := fieldValues(a.running), fieldValues(next)
	for _, s := range deviceSettings {
		if !s.live && cur[s.key] != nxt[s.key] {
			restart = append(restart, s.key)
		}
	}
	a.log.Info("fleet config applied", "version", dc.Version, "restart_pending", restart)
	return restart, nil
}

// routeConfig is the router's configuration from c: the settings the
// fleet may change live, and the local engine's probe.
func (a *Agent) routeConfig(c Config) route.Config {
	return route.Config{Threshold: c.RouteThreshold, Hysteresis: c.RouteHysteresis, Mode: c.RouteMode, Probe: a.engine.probe,
		LocalNoPins: c.LocalURL != "", CloudTools: c.CloudTools, LocalTools: a.engine.servesTools} // a local server pins nothing (docs/cloud.md, "Prompt caching")
}

// fieldValues is each flag's value in c, as text.
func fieldValues(c Config) map[string]string {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	c.Fields().Register(fs)
	out := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { out[f.Name] = f.Value.String() })
	return out
}

// probeMargin is the fleet's probe-margin setting in force, read by each
// probe gate of a model or router update.
func (a *Agent) probeMargin() float64 {
	a.cfgMu.Lock()
	defer a.cfgMu.Unlock()
	return a.running.ProbeMargin
}

// probeSet is the fleet's probe-set setting in force, read at each model,
// router or agent update.
func (a *Agent) probeSet() string {
	a.cfgMu.Lock()
	defer a.cfgMu.Unlock()
	return a.running.ProbeSet
}

// routerVersion names the router model in force for shadow samples
// (fleetwire.ShadowRecord.Router): the predictor version the status
// reports, or RouterBuiltin. The OTA install activates a version just
// before it swaps the model in, so a request scored in between is named
// for the new one: a window of microseconds per rollout.
func (a *Agent) routerVersion() string {
	running, _ := a.ota.Artifacts()
	if v := running[firmware.KindPredictor]; v != "" {
		return v
	}
	return fleetwire.RouterBuiltin
}

// routerBound is the state of the device's bound on wrong local answers
// for its status: none without router-alpha; suspended while the cloud is
// unreachable, because every request then runs locally whatever its score
// and no sample is graded, so the calibrated threshold bounds nothing.
func (a *Agent) routerBound() string {
	a.cfgMu.Lock()
	alpha := a.running.RouterAlpha
	a.cfgMu.Unlock()
	switch {
	case alpha == 0:
		return ""
	case !a.disp.Link().Connected:
		return fleetwire.RouterBoundSuspended
	}
	return fleetwire.RouterBoundInForce
}

// routerBoundWatch is how often the agent looks at its router bound's
// state: the uplink has no change callback, and reading its link state is
// a few loads, so a second's poll reports a lost cloud within a second.
const routerBoundWatch = time.Second

// watchRouterBound publishes the status again whenever the router bound's
// state changes (the cloud went or came back, router-alpha was set), so
// the fleet never shows a bound in force that the device has suspended.
// A publish that fails is tried at the next tick; a reconnect publishes a
// fresh status anyway.
func (a *Agent) watchRouterBound(ctx context.Context, every time.Duration, publish func(context.Context) error) {
	t := time.NewTicker(every)
	defer t.Stop()
	sent := a.routerBound() // the status of the connect carries it
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if now := a.routerBound(); now != sent && publish(ctx) == nil {
			sent = now
		}
	}
}
