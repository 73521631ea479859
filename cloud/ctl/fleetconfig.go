package ctl

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/internal/cli"
)

// `fleet config` edits the layers a device's desired config is merged from
// (fleetapi.MergeConfig): the fleet-wide defaults (--fleet), label groups
// (--group board=rk3588, region=eu, cohort=beta, any label) and one
// device's overrides (a device id).

// configTarget reads where a set/unset goes: --fleet, --group L=V, or the
// first positional argument as a device id. rest is what follows it.
func configTarget(fleetFlag bool, group string, pos []string, usage string) (scope, device string, rest []string, err error) {
	switch {
	case fleetFlag && group != "":
		return "", "", nil, fmt.Errorf("%w: --fleet and --group are exclusive (usage: %s)", cli.ErrUsage, usage)
	case fleetFlag:
		scope = fleetapi.ScopeFleet
	case group != "":
		if _, _, err := fleetapi.ParseScope(group); err != nil || group == fleetapi.ScopeFleet {
			return "", "", nil, &cli.FieldError{Field: "group", Err: fmt.Errorf("%q: want LABEL=VALUE, e.g. region=eu", group)}
		}
		scope = group
	default:
		if len(pos) == 0 {
			return "", "", nil, fmt.Errorf("%w: usage: %s", cli.ErrUsage, usage)
		}
		device, pos = pos[0], pos[1:]
	}
	if len(pos) == 0 {
		return "", "", nil, fmt.Errorf("%w: no keys given (usage: %s)", cli.ErrUsage, usage)
	}
	return scope, device, pos, nil
}

// configEdit is one set or unset: the parsed target and the rest of the
// arguments (key=value pairs or keys).
type configEdit struct {
	cloud, key, scope, device string
	rest                      []string
	replace                   bool
}

// parseConfigEdit reads the flags and target shared by set and unset.
func parseConfigEdit(cio cli.IO, args []string, verb, usage string) (*configEdit, bool, error) {
	fs, cloud, key := fleetFlags("fleet config " + verb)
	var replace *bool
	if verb == "set" {
		replace = fs.Bool("replace", false, "replace the layer's whole config instead of merging the given keys")
	}
	fleetFlag := fs.Bool("fleet", false, verb+" keys of the fleet-wide defaults")
	group := fs.String("group", "", verb+" keys of a label group (LABEL=VALUE: board=B, region=R, cohort=C or any label)")
	pos, done, err := parseFleet(fs, cio, args, usage, 1, true)
	if done || err != nil {
		return nil, done, err
	}
	e := &configEdit{cloud: *cloud, key: *key, replace: replace != nil && *replace}
	if e.scope, e.device, e.rest, err = configTarget(*fleetFlag, *group, pos, usage); err != nil {
		return nil, false, err
	}
	return e, false, nil
}

func fleetConfigSet(ctx context.Context, cio cli.IO, args []string) error {
	e, done, err := parseConfigEdit(cio, args, "set", "fleet config set ID|--fleet|--group LABEL=VALUE key=value [key=value ...] [--replace]")
	if done || err != nil {
		return err
	}
	kv, err := parseKV(e.rest)
	if err != nil {
		return err
	}
	u := fleetapi.ConfigUpdate{Merge: !e.replace, Values: map[string]*string{}}
	for k, v := range kv {
		u.Values[k] = &v
	}
	return putConfig(ctx, cio, e, u)
}

func fleetConfigUnset(ctx context.Context, cio cli.IO, args []string) error {
	e, done, err := parseConfigEdit(cio, args, "unset", "fleet config unset ID|--fleet|--group LABEL=VALUE key [key ...]")
	if done || err != nil {
		return err
	}
	u := fleetapi.ConfigUpdate{Merge: true, Values: map[string]*string{}}
	for _, k := range e.rest {
		u.Values[k] = nil
	}
	return putConfig(ctx, cio, e, u)
}

func putConfig(ctx context.Context, cio cli.IO, e *configEdit, u fleetapi.ConfigUpdate) error {
	scope, device := e.scope, e.device
	c, err := newFleetClient(e.cloud, e.key)
	if err != nil {
		return err
	}
	if device != "" {
		dc, err := c.SetConfig(ctx, device, u)
		if err != nil {
			return err
		}
		fmt.Fprintf(cio.Stdout, "%s: desired config version %d published\n", device, dc.Version)
		return nil
	}
	l, err := c.SetConfigLayer(ctx, scope, u)
	if err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "%s: layer version %d stored; devices whose merged config changed got a new desired version\n", scope, l.Version)
	return nil
}

func fleetConfigShow(ctx context.Context, cio cli.IO, args []string) error {
	fs, cloud, key := fleetFlags("fleet config show")
	pos, done, err := parseFleet(fs, cio, args, "fleet config show [ID]", 0, true)
	if done || err != nil {
		return err
	}
	c, err := newFleetClient(*cloud, *key)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(cio.Stdout, 0, 4, 2, ' ', 0)
	if len(pos) == 0 {
		ls, err := c.ConfigLayers(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintln(tw, "LAYER (lowest precedence first)\tVERSION\tDEVICES\tVALUES")
		for _, l := range ls {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", l.Scope, l.Version, l.Devices, joinKV(l.Values))
		}
		fmt.Fprintln(tw, "(device overrides)\t\t\tfleet config show ID")
		return tw.Flush()
	}
	d, err := c.Device(ctx, pos[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "%s: config %s (desired/reported)\n", d.ID, configVersions(d, 0))
	fmt.Fprintln(tw, "KEY\tVALUE\tFROM")
	if d.Desired != nil {
		for _, k := range sortedKeys(d.Desired.Values) {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", k, d.Desired.Values[k], orDash(d.ConfigSources[k]))
		}
	}
	return tw.Flush()
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func joinKV(m map[string]string) string {
	var b strings.Builder
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k + "=" + m[k])
	}
	return b.String()
}

// routerLine is the device's calibrated routing threshold: its bound α,
// the realised share of wrong local answers among its graded samples, the
// threshold in force and where it came from, and whether the device
// reports the bound suspended (cloud unreachable).
func routerLine(d *fleetapi.Device) string {
	th := "-"
	if d.Desired != nil && d.Desired.Values["route-threshold"] != "" {
		th = d.Desired.Values["route-threshold"] + " from " + orDash(d.ConfigSources["route-threshold"])
	}
	r := d.Router
	if r == nil {
		return "no scored shadow grades; route-threshold " + th
	}
	line := fmt.Sprintf("α %.3g, δ %.3g, realised %.1f%% wrong local over %d graded samples, route-threshold %s", r.Alpha, r.EffectiveDelta(), 100*r.Realised, r.Outcomes, th)
	if r.Router != "" {
		line += ", router " + r.Router
	}
	if !r.Certified {
		line += " (too few samples to certify one: the fleet's)"
	}
	if d.Status != nil && d.Status.RouterBound != "" {
		line += "; bound " + d.Status.RouterBound
	}
	return line
}

// shadowLine says whether the device samples local answers for shadow
// evaluation (its merged shadow-share key, and which layer set it) and how
// the cloud graded them.
func shadowLine(d *fleetapi.Device) string {
	share := ""
	if d.Desired != nil {
		share = d.Desired.Values["shadow-share"]
	}
	t := d.Telemetry
	graded := fmt.Sprintf("%d graded: %d passed, %d failed, %d the cloud could not answer", t.ShadowPassed+t.ShadowFailed, t.ShadowPassed, t.ShadowFailed, t.ShadowErrors)
	v, err := strconv.ParseFloat(share, 64)
	if err != nil || v <= 0 {
		return "off (no shadow-share in its config); " + graded
	}
	return fmt.Sprintf("%.3g%% of local answers (shadow-share from %s, at most 25%%); %s", 100*v, orDash(d.ConfigSources["shadow-share"]), graded)
}
