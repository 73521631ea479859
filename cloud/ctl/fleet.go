package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// `fleet` drives the cloud's fleet admin API (served by cloud/fleet under
// /v1/fleet/) through the cloud/fleetapi client: the registry, desired config, commands, and the
// telemetry store. Every verb takes --cloud URL and --api-key (also
// PHASELESS_CLOUD and PHASELESS_API_KEY).
func init() {
	register(&cli.Command{Name: "fleet", Summary: "fleet operations over the cloud's HTTP API: devices, status, config, commands, telemetry", Subcommands: []*cli.Command{
		{Name: "devices", Summary: "list devices: state, version, slot, last seen, config versions, telemetry", Run: fleetDevices},
		{Name: "status", Summary: "one device in detail (fleet status ID)", Run: fleetStatus},
		{Name: "config", Summary: "desired config in layers (fleet defaults < label groups < device): set | unset | show", Subcommands: []*cli.Command{
			{Name: "set", Summary: "set keys: fleet config set ID|--fleet|--group LABEL=VALUE key=value ...", Run: fleetConfigSet},
			{Name: "unset", Summary: "remove keys: fleet config unset ID|--fleet|--group LABEL=VALUE key ...", Run: fleetConfigUnset},
			{Name: "show", Summary: "the layers (fleet config show), or one device's merged config with each key's layer (fleet config show ID)", Run: fleetConfigShow},
		}},
		{Name: "label", Summary: "set or remove (key=) a device's labels, which rollouts select by: fleet label ID region=eu cohort=", Run: fleetLabel},
		rolloutCommand,
		{Name: "load", Summary: "load test the fleet plane: N simulated MQTT v5 devices send telemetry batches to the cloud's broker; prints ack latencies and the cloud's RSS", Run: fleetLoad},
		{Name: "cmd", Summary: "send a command: fleet cmd ID NAME [key=value ...] [--wait 30s]", Run: fleetCmd},
		{Name: "telemetry", Summary: "the telemetry store: count | export [--device ID] [--since T] [-o FILE]", Subcommands: []*cli.Command{
			{Name: "count", Summary: "stored, ingested, duplicate and deleted record counts (fleet-wide or --device ID)", Run: fleetTelemetryCount},
			{Name: "export", Summary: "stream stored telemetry as JSON lines (training data)", Run: fleetTelemetryExport},
		}},
	}})
}

func fleetFlags(name string) (*flag.FlagSet, *string, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cloud := fs.String("cloud", "http://127.0.0.1:8080", "cloud HTTP API base URL")
	key := fs.String("api-key", "", "operator API key (role=operator in the cloud's --api-keys; role=viewer for reads) for the cloud's admin API (not needed with phaseless-cloud --dev)")
	return fs, cloud, key
}

// parseFleet parses flags anywhere among the arguments (`fleet status ID
// --cloud URL` as well as `fleet status --cloud URL ID`), then fills unset
// flags from PHASELESS_* like every other verb.
func parseFleet(fs *flag.FlagSet, cio cli.IO, args []string, usage string, nPos int, atLeast bool) (pos []string, done bool, err error) {
	var rest []string
	fs.SetOutput(io.Discard)
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				cli.PrintUsage(cio.Stdout, fs, usage)
				return nil, true, nil
			}
			return nil, false, fmt.Errorf("%w: %v (usage: %s)", cli.ErrUsage, err, usage)
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v := cio.Getenv(cli.EnvName(f.Name)); v != "" && !set[f.Name] && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = &cli.FieldError{Field: f.Name, Source: "env " + cli.EnvName(f.Name), Err: err}
			}
		}
	})
	if envErr != nil {
		return nil, false, envErr
	}
	if len(rest) < nPos || (!atLeast && len(rest) > nPos) {
		return nil, false, fmt.Errorf("%w: usage: %s", cli.ErrUsage, usage)
	}
	return rest, false, nil
}

func newFleetClient(cloud, key string) (*fleetapi.Client, error) {
	c, err := fleetapi.NewClient(cloud, key, nil)
	if err != nil {
		return nil, &cli.FieldError{Field: "cloud", Err: err}
	}
	return c, nil
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return time.Since(t).Round(time.Second).String() + " ago"
}

func fleetDevices(ctx context.Context, cio cli.IO, args []string) error {
	fs, cloud, key := fleetFlags("fleet devices")
	asJSON := fs.Bool("json", false, "print the API's JSON instead of a table")
	if _, done, err := parseFleet(fs, cio, args, "fleet devices [--json]", 0, false); done || err != nil {
		return err
	}
	c, err := newFleetClient(*cloud, *key)
	if err != nil {
		return err
	}
	devs, err := c.Devices(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(cio.Stdout, devs)
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].ID < devs[j].ID })
	tw := tabwriter.NewWriter(cio.Stdout, 0, 4, 2, ' ', 0)
	// Short headings keep the table within 100 columns (the demo prints
	// it): SEEN is when the device was last seen, CONFIG the desired and
	// reported config versions, CMDS its commands without a result yet.
	fmt.Fprintln(tw, "DEVICE\tSTATE\tVERSION\tARTIFACTS\tSLOT\tSEEN\tCONFIG\tRECORDS\tCMDS")
	for _, d := range devs {
		slot := "-"
		if d.Status != nil {
			slot = orDash(d.Status.Slot)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", d.ID, d.State(), orDash(d.Status.AgentVersion()), orDash(d.Status.Installed()), slot,
			ago(d.LastSeen), configVersions(&d, tableConfigError), d.Telemetry.Stored, d.PendingCommands)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// tableConfigError is how many characters of a device's config error the
// devices table shows: a whole error (a YAML parse error can run to
// hundreds) would stretch every row of the table. fleet status and --json
// print all of it.
const tableConfigError = 40

// configVersions is "desired/reported", with why the reported version was
// not applied, cut to at most max characters when max > 0.
func configVersions(d *fleetapi.Device, max int) string {
	des, rep := "-", "-"
	if d.Desired != nil {
		des = fmt.Sprint(d.Desired.Version)
	}
	if d.Reported != nil {
		rep = fmt.Sprint(d.Reported.Version)
		if !d.Reported.Applied {
			rep += " (not applied: " + ellipsis(d.Reported.Error, max) + ")"
		}
	}
	return des + "/" + rep
}

// ellipsis cuts s to at most max characters (runes), ending in "…" when it
// cut; max <= 0 keeps all of s. Line breaks become spaces, so a table row
// stays one line.
func ellipsis(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if max <= 0 || utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func fleetStatus(ctx context.Context, cio cli.IO, args []string) error {
	fs, cloud, key := fleetFlags("fleet status")
	asJSON := fs.Bool("json", false, "print the API's JSON")
	pos, done, err := parseFleet(fs, cio, args, "fleet status ID [--json]", 1, false)
	if done || err != nil {
		return err
	}
	c, err := newFleetClient(*cloud, *key)
	if err != nil {
		return err
	}
	d, err := c.Device(ctx, pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(cio.Stdout, d)
	}
	w := cio.Stdout
	fmt.Fprintf(w, "device:     %s\nstate:      %s\n", d.ID, d.State())
	if d.Status != nil {
		fmt.Fprintf(w, "version:    %s\nartifacts:  %s\nslot:       %s\nboard:      %s\nstatus at:  %s\n", orDash(d.Status.AgentVersion()), orDash(d.Status.Installed()),
			orDash(d.Status.Slot), orDash(d.Status.Board), d.Status.Time.Format(time.RFC3339))
		if u := d.Status.Update; u != nil {
			fmt.Fprintf(w, "update:     %s\n", updateLine(u))
		}
	}
	fmt.Fprintf(w, "first seen: %s\nlast seen:  %s\nconfig:     %s (desired/reported)\n", d.FirstSeen.Format(time.RFC3339), ago(d.LastSeen), configVersions(d, 0))
	if d.Desired != nil {
		for _, k := range sortedKeys(d.Desired.Values) {
			fmt.Fprintf(w, "  %s=%s (from %s)\n", k, d.Desired.Values[k], orDash(d.ConfigSources[k]))
		}
	}
	fmt.Fprintf(w, "shadow:     %s\n", shadowLine(d))
	fmt.Fprintf(w, "router:     %s\n", routerLine(d))
	t := d.Telemetry
	fmt.Fprintf(w, "telemetry:  %d stored, %d ingested, %d duplicates, %d batches, last seq %d, %d dropped on device\n", t.Stored, t.Ingested, t.Duplicates, t.Batches, t.LastSeq, t.DroppedOnDevice)
	fmt.Fprintf(w, "commands:   %d pending\n", d.PendingCommands)
	for _, cs := range d.Commands {
		line := fmt.Sprintf("  %s %-14s %-8s issued %s", cs.ID, cs.Name, cs.State, cs.IssuedAt.Format(time.RFC3339))
		if cs.Result != nil {
			line += " → " + strings.TrimSpace(cs.Result.Output+" "+cs.Result.Error)
		}
		fmt.Fprintln(w, line)
	}
	return nil
}

func parseKV(args []string) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: %q is not key=value", cli.ErrUsage, a)
		}
		out[k] = v
	}
	return out, nil
}

func fleetCmd(ctx context.Context, cio cli.IO, args []string) error {
	fs, cloud, key := fleetFlags("fleet cmd")
	wait := fs.Duration("wait", 0, "wait this long for the device's result (0: do not wait)")
	pos, done, err := parseFleet(fs, cio, args, "fleet cmd ID NAME [key=value ...] [--wait 30s]", 2, true)
	if done || err != nil {
		return err
	}
	kv, err := parseKV(pos[2:])
	if err != nil {
		return err
	}
	c, err := newFleetClient(*cloud, *key)
	if err != nil {
		return err
	}
	req := fleetapi.CommandRequest{Name: pos[1]}
	if len(kv) > 0 {
		req.Args = kv
	}
	cs, err := c.SendCommand(ctx, pos[0], req)
	if err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "%s: command %s (%s) %s\n", pos[0], cs.ID, cs.Name, cs.State)
	if *wait <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("no result from %s for command %s within %v (still pending; see fleet status %s)", pos[0], cs.ID, *wait, pos[0])
		case <-time.After(250 * time.Millisecond):
		}
		now, err := c.Command(ctx, pos[0], cs.ID)
		if err != nil {
			return err
		}
		if now.State != fleetapi.CommandPending && now.Result != nil {
			fmt.Fprintf(cio.Stdout, "%s: %s %s\n", pos[0], now.State, strings.TrimSpace(now.Result.Output+" "+now.Result.Error))
			if now.State == fleetapi.CommandFailed {
				return fmt.Errorf("command %s failed on %s: %s", cs.ID, pos[0], now.Result.Error)
			}
			return nil
		}
	}
}

func fleetTelemetryCount(ctx context.Context, cio cli.IO, args []string) error {
	fs, cloud, key := fleetFlags("fleet telemetry count")
	device := fs.String("device", "", "count one device's records")
	if _, done, err := parseFleet(fs, cio, args, "fleet telemetry count [--device ID]", 0, false); done || err != nil {
		return err
	}
	c, err := newFleetClient(*cloud, *key)
	if err != nil {
		return err
	}
	if *device != "" {
		t, err := c.DeviceTelemetry(ctx, *device)
		if err != nil {
			return err
		}
		fmt.Fprintf(cio.Stdout, "%s: %d stored, %d ingested, %d duplicates, last seq %d, %d dropped on device\n", *device, t.Stored, t.Ingested, t.Duplicates, t.LastSeq, t.DroppedOnDevice)
		return nil
	}
	n, err := c.Counts(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "%d stored, %d ingested, %d duplicates, %d deleted by retention, %d devices\n", n.Stored, n.Ingested, n.Duplicates, n.Deleted, n.Devices)
	return nil
}

func fleetTelemetryExport(ctx context.Context, cio cli.IO, args []string) error {
	fs, cloud, key := fleetFlags("fleet telemetry export")
	device := fs.String("device", "", "export one device's records")
	since := fs.String("since", "", "only records ingested at or after this RFC 3339 time")
	out := fs.String("o", "", "write to this file instead of stdout")
	if _, done, err := parseFleet(fs, cio, args, "fleet telemetry export [--device ID] [--since T] [-o FILE]", 0, false); done || err != nil {
		return err
	}
	c, err := newFleetClient(*cloud, *key)
	if err != nil {
		return err
	}
	var from time.Time
	if *since != "" {
		if from, err = time.Parse(time.RFC3339Nano, *since); err != nil {
			return &cli.FieldError{Field: "since", Err: err}
		}
	}
	body, err := c.Export(ctx, *device, from)
	if err != nil {
		return err
	}
	defer body.Close()
	if *out == "" {
		if _, err := io.Copy(cio.Stdout, body); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		return nil
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("export to %s: %w", *out, err)
	}
	fmt.Fprintf(cio.Stderr, "wrote %d bytes to %s\n", n, *out)
	return nil
}

// updateLine is a device's update download in one line.
func updateLine(u *fleetwire.UpdateStatus) string {
	out := "none"
	if u.State != "" {
		out = fmt.Sprintf("%s %s %s: %s planned of %s, %s transferred", u.Kind, u.Version, u.State, byteCount(u.PlannedBytes), byteCount(u.FullBytes), byteCount(u.TransferredBytes))
		if u.Error != "" {
			out += " (" + u.Error + ")"
		}
	}
	policy := "no bandwidth cap"
	if u.Bandwidth > 0 {
		policy = byteCount(u.Bandwidth) + "/s cap"
	}
	metered := "not metered"
	if u.Metered {
		metered = "metered"
	}
	return fmt.Sprintf("%s; link %s, %s, on metered: %s", out, metered, policy, orDash(u.OnMetered))
}
