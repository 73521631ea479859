package ctl

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/internal/cli"
)

// rolloutCommand is `fleet rollout ...`: staged rollouts of signed
// artifacts (cloud/fleet rollout.go says how stages advance).
var rolloutCommand = &cli.Command{Name: "rollout", Summary: "staged rollouts of a signed bundle: create | list | status | pause | resume | abort", Subcommands: []*cli.Command{
	{Name: "create", Summary: "upload a bundle and roll it out: --artifact F --stages 1%,10%,50%,100% [--select board=B] [--max-failures 5%] [--soak 10m]", Run: rolloutCreate},
	{Name: "list", Summary: "every rollout with its state and progress", Run: rolloutList},
	{Name: "status", Summary: "one rollout: stages, progress, failed devices (rollout status ID)", Run: rolloutStatus},
	{Name: "pause", Summary: "stop sending the update and advancing stages (rollout pause ID)", Run: rolloutAction("pause")},
	{Name: "resume", Summary: "resume a paused or halted rollout (rollout resume ID)", Run: rolloutAction("resume")},
	{Name: "abort", Summary: "end a rollout for good (rollout abort ID)", Run: rolloutAction("abort")},
}}

func rolloutCreate(ctx context.Context, cio cli.IO, args []string) error {
	fs, cloud, key := fleetFlags("fleet rollout create")
	artifact := fs.String("artifact", "", "signed bundle file (phaselessctl ota sign)")
	stages := fs.String("stages", "1%,10%,50%,100%", "cumulative shares of the selected devices per stage")
	sel := fs.String("select", "", "label selector, e.g. board=rk3588,region=eu (default: every device)")
	maxFail := fs.String("max-failures", "5%", "share of a stage's devices that may fail before the rollout halts")
	soak := fs.Duration("soak", 10*time.Minute, "how long a settled stage is watched before the next starts")
	timeout := fs.Duration("update-timeout", 30*time.Minute, "a device with no outcome by then counts as failed")
	_, done, err := parseFleet(fs, cio, args, "fleet rollout create --artifact F [--stages S] [--select k=v,...] [--max-failures P] [--soak D]", 0, false)
	if done || err != nil {
		return err
	}
	if *artifact == "" {
		return fmt.Errorf("%w: --artifact is required", cli.ErrUsage)
	}
	spec := fleetapi.RolloutSpec{Soak: fleetapi.Duration(*soak), UpdateTimeout: fleetapi.Duration(*timeout)}
	if spec.Stages, err = fleetapi.ParseStages(*stages); err != nil {
		return &cli.FieldError{Field: "stages", Err: err}
	}
	limit, err := parseShare(*maxFail)
	if err != nil {
		return &cli.FieldError{Field: "max-failures", Err: err}
	}
	spec.MaxFailures = &limit
	if *sel != "" {
		if spec.Select, err = parseKV(strings.Split(*sel, ",")); err != nil {
			return &cli.FieldError{Field: "select", Err: err}
		}
	}
	c, err := newFleetClient(*cloud, *key)
	if err != nil {
		return err
	}
	f, err := os.Open(*artifact)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := c.UploadArtifact(ctx, f)
	if err != nil {
		return err
	}
	spec.Artifact = info.ID
	r, err := c.CreateRollout(ctx, spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "rollout %s: %s %s for %s, %d devices selected, stage 1 of %d started\n",
		r.ID, r.Kind, r.Version, orDash(r.Board), r.Selected, len(r.Spec.Stages))
	return nil
}

// parseShare reads "5%" or "0.05".
func parseShare(s string) (float64, error) {
	div := 1.0
	if strings.HasSuffix(s, "%") {
		s, div = strings.TrimSuffix(s, "%"), 100
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || v/div > 1 {
		return 0, fmt.Errorf("%q: want a percentage like 5%% or a share like 0.05", s)
	}
	return v / div, nil
}

func rolloutList(ctx context.Context, cio cli.IO, args []string) error {
	fs, cloud, key := fleetFlags("fleet rollout list")
	_, done, err := parseFleet(fs, cio, args, "fleet rollout list", 0, false)
	if done || err != nil {
		return err
	}
	c, err := newFleetClient(*cloud, *key)
	if err != nil {
		return err
	}
	rs, err := c.Rollouts(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(cio.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tARTIFACT\tSTATE\tSTAGE\tSUCCEEDED\tFAILED\tUPDATING\tCREATED")
	for _, r := range rs {
		p := r.Progress()
		fmt.Fprintf(tw, "%s\t%s %s\t%s\t%d/%d (%s)\t%d\t%d\t%d\t%s\n", r.ID, r.Kind, r.Version, r.State,
			r.Stage+1, len(r.Spec.Stages), pct(r.Spec.Stages[r.Stage]), p.Succeeded, p.Failed, p.Updating, ago(r.Created))
	}
	return tw.Flush()
}

// byteCount is n in the largest unit that keeps it at least 1.
func byteCount(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64) + " " + string("KMGTPE"[exp]) + "iB"
}

func pct(f float64) string { return strconv.FormatFloat(f*100, 'g', 4, 64) + "%" }

func rolloutStatus(ctx context.Context, cio cli.IO, args []string) error {
	fs, cloud, key := fleetFlags("fleet rollout status")
	asJSON := fs.Bool("json", false, "print the rollout as JSON")
	pos, done, err := parseFleet(fs, cio, args, "fleet rollout status ID [--json]", 1, false)
	if done || err != nil {
		return err
	}
	c, err := newFleetClient(*cloud, *key)
	if err != nil {
		return err
	}
	r, err := c.Rollout(ctx, pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(cio.Stdout, r)
	}
	p := r.Progress()
	w := cio.Stdout
	fmt.Fprintf(w, "rollout %s: %s %s (board %s), %s\n", r.ID, r.Kind, r.Version, orDash(r.Board), r.State)
	if r.Reason != "" {
		fmt.Fprintf(w, "  reason: %s\n", r.Reason)
	}
	stages := make([]string, len(r.Spec.Stages))
	for i, s := range r.Spec.Stages {
		stages[i] = pct(s)
		if i == r.Stage {
			stages[i] = "[" + stages[i] + "]"
		}
	}
	fmt.Fprintf(w, "  stages: %s  soak %s  max failures %s  selected %d devices\n",
		strings.Join(stages, " → "), time.Duration(r.Spec.Soak), pct(r.Spec.FailureLimit()), r.Selected)
	fmt.Fprintf(w, "  this stage: %d devices, %d succeeded, %d failed, %d updating\n", p.StageDevices, p.StageSucceeded, p.StageFailed, p.StageUpdating)
	fmt.Fprintf(w, "  overall: %d succeeded, %d failed, %d updating\n", p.Succeeded, p.Failed, p.Updating)
	for i, b := range r.Bytes() {
		if i > r.Stage && b == (fleetapi.StageBytes{}) {
			break
		}
		fmt.Fprintf(w, "  stage %d bytes: %s planned of %s whole bundles, %s transferred\n", i+1, byteCount(b.Planned), byteCount(b.Full), byteCount(b.Transferred))
	}
	var failed []string
	for id, d := range r.Devices {
		if d.State == fleetapi.DeviceFailed {
			failed = append(failed, fmt.Sprintf("    %s (stage %d): %s", id, d.Stage+1, d.Error))
		}
	}
	sort.Strings(failed)
	if len(failed) > 0 {
		fmt.Fprintln(w, "  failed devices:")
		fmt.Fprintln(w, strings.Join(failed, "\n"))
	}
	return nil
}

func rolloutAction(action string) func(context.Context, cli.IO, []string) error {
	return func(ctx context.Context, cio cli.IO, args []string) error {
		fs, cloud, key := fleetFlags("fleet rollout " + action)
		reason := fs.String("reason", "", "why, kept with the rollout")
		pos, done, err := parseFleet(fs, cio, args, "fleet rollout "+action+" ID [--reason TEXT]", 1, false)
		if done || err != nil {
			return err
		}
		c, err := newFleetClient(*cloud, *key)
		if err != nil {
			return err
		}
		r, err := c.ActOnRollout(ctx, pos[0], action, *reason)
		if err != nil {
			return err
		}
		fmt.Fprintf(cio.Stdout, "rollout %s is %s\n", r.ID, r.State)
		return nil
	}
}

func fleetLabel(ctx context.Context, cio cli.IO, args []string) error {
	fs, cloud, key := fleetFlags("fleet label")
	pos, done, err := parseFleet(fs, cio, args, "fleet label ID key=value [key= ...] (an empty value removes the label)", 2, true)
	if done || err != nil {
		return err
	}
	kv, err := parseKV(pos[1:])
	if err != nil {
		return err
	}
	labels := map[string]*string{}
	for k, v := range kv {
		if v == "" {
			labels[k] = nil
		} else {
			labels[k] = &v
		}
	}
	c, err := newFleetClient(*cloud, *key)
	if err != nil {
		return err
	}
	d, err := c.SetLabels(ctx, pos[0], labels)
	if err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "%s: labels %s\n", d.ID, orDash(joinKV(d.Labels)))
	return nil
}
