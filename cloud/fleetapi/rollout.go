package fleetapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// A rollout takes one signed artifact to the devices a selector picks, in
// stages; cloud/fleet's rollout controller says how stages advance.

// Rollout states.
const (
	RolloutRunning = "running"
	RolloutPaused  = "paused"
	RolloutHalted  = "halted" // a stage failed too often: nothing more is sent
	RolloutAborted = "aborted"
	RolloutDone    = "done"
)

// States of one device in a rollout.
const (
	DeviceUpdating  = "updating"
	DeviceSucceeded = "succeeded"
	DeviceFailed    = "failed"
)

// RolloutSpec is what an operator asks for.
type RolloutSpec struct {
	// Artifact is the id PutArtifact returned (the bundle's sha256).
	Artifact string `json:"artifact"`
	// Stages are cumulative shares of the selected devices, ascending,
	// ending at 1 (e.g. 0.01, 0.1, 0.5, 1). Each stage has at least one
	// device.
	Stages []float64 `json:"stages"`
	// Select picks devices by label; every key must match. "board" and
	// "version" come from the device's status, others from its labels.
	Select map[string]string `json:"select,omitempty"`
	// MaxFailures is the share of a stage's devices that may fail before
	// the rollout halts; nil (absent) is the default, 0.05. A pointer, so
	// that 0 (halt on the first failure) is a limit an operator can ask for.
	MaxFailures *float64 `json:"max_failures,omitempty"`
	// Soak is how long a settled stage is watched before the next starts.
	Soak Duration `json:"soak"`
	// UpdateTimeout fails a device that has neither succeeded nor failed
	// by then (default 30m), so an offline device cannot hold a stage.
	UpdateTimeout Duration `json:"update_timeout,omitzero"`
}

// Rollout is a rollout and where it stands.
type Rollout struct {
	ID   string      `json:"id"`
	Spec RolloutSpec `json:"spec"`
	// From the artifact's manifest.
	Kind    string `json:"kind"`
	Version string `json:"version"`
	Board   string `json:"board"`
	URL     string `json:"url"` // where devices download the artifact

	State  string `json:"state"`
	Reason string `json:"reason,omitempty"` // why it halted, or who paused/aborted it
	// Stage is the index into Spec.Stages being rolled out now.
	Stage          int       `json:"stage"`
	StageStartedAt time.Time `json:"stage_started_at"`
	// StageSettledAt is when every device of the stage had an outcome;
	// the soak counts from it. Zero while some are still updating.
	StageSettledAt time.Time `json:"stage_settled_at,omitzero"`
	// Selected is how many devices the selector matched at the last step.
	Selected int                       `json:"selected"`
	Devices  map[string]*RolloutDevice `json:"devices"`
	Created  time.Time                 `json:"created"`
	Updated  time.Time                 `json:"updated"`
}

// RolloutDevice is one device's part in a rollout.
type RolloutDevice struct {
	Stage     int       `json:"stage"`
	State     string    `json:"state"`
	From      string    `json:"from,omitempty"`    // the version it ran when the update was sent
	Command   string    `json:"command,omitempty"` // the update command's id
	Error     string    `json:"error,omitempty"`
	IssuedAt  time.Time `json:"issued_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// The device's download of the artifact, from its status
	// (fleetwire.UpdateStatus): the whole bundle, what the device had to
	// fetch of it (chunks it held nowhere) and what it fetched so far.
	FullBytes        int64 `json:"full_bytes,omitempty"`
	PlannedBytes     int64 `json:"planned_bytes,omitempty"`
	TransferredBytes int64 `json:"transferred_bytes,omitempty"`
}

// StageBytes sums a stage's downloads (RolloutDevice's byte counts).
type StageBytes struct {
	Full, Planned, Transferred int64
}

// Bytes sums the downloads of r's devices per stage (index = stage).
func (r *Rollout) Bytes() []StageBytes {
	out := make([]StageBytes, len(r.Spec.Stages))
	for _, d := range r.Devices {
		if d.Stage < 0 || d.Stage >= len(out) {
			continue
		}
		b := &out[d.Stage]
		b.Full += d.FullBytes
		b.Planned += d.PlannedBytes
		b.Transferred += d.TransferredBytes
	}
	return out
}

// Progress counts a rollout's devices by state, for its current stage and
// overall.
type Progress struct {
	StageDevices, StageSucceeded, StageFailed, StageUpdating int
	Succeeded, Failed, Updating                              int
}

// Progress summarises r.
func (r *Rollout) Progress() Progress {
	var p Progress
	for _, d := range r.Devices {
		cur := d.Stage == r.Stage
		if cur {
			p.StageDevices++
		}
		switch d.State {
		case DeviceSucceeded:
			p.Succeeded++
			if cur {
				p.StageSucceeded++
			}
		case DeviceFailed:
			p.Failed++
			if cur {
				p.StageFailed++
			}
		default:
			p.Updating++
			if cur {
				p.StageUpdating++
			}
		}
	}
	return p
}

// Duration is a time.Duration that reads and writes JSON as "10m".
type Duration time.Duration

// MarshalJSON writes d as Go duration text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads Go duration text, or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var secs float64
		if err := json.Unmarshal(b, &secs); err != nil {
			return errors.New(`duration: want text like "10m" or seconds`)
		}
		*d = Duration(secs * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// ParseStages reads "1%,10%,50%,100%" (or shares: "0.01,0.1,0.5,1").
func ParseStages(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		div := 1.0
		if strings.HasSuffix(f, "%") {
			f, div = strings.TrimSuffix(f, "%"), 100
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("stage %q: want a percentage like 10%% or a share like 0.1", f)
		}
		out = append(out, v/div)
	}
	return out, nil
}

// DefaultMaxFailures is RolloutSpec.MaxFailures when a spec leaves it out.
const DefaultMaxFailures = 0.05

// FailureLimit is the share of a stage's devices that may fail: MaxFailures,
// or the default when it is unset.
func (s *RolloutSpec) FailureLimit() float64 {
	if s.MaxFailures == nil {
		return DefaultMaxFailures
	}
	return *s.MaxFailures
}

// FillDefaults applies MaxFailures' and UpdateTimeout's defaults.
func (s *RolloutSpec) FillDefaults() {
	if s.MaxFailures == nil {
		s.MaxFailures = new(DefaultMaxFailures)
	}
	if s.UpdateTimeout == 0 {
		s.UpdateTimeout = Duration(30 * time.Minute)
	}
}

// Validate names the first bad field.
func (s *RolloutSpec) Validate() error {
	switch {
	case s.Artifact == "":
		return errors.New("artifact is required")
	case len(s.Stages) == 0:
		return errors.New("stages: at least one is required")
	case s.MaxFailures != nil && !(*s.MaxFailures >= 0 && *s.MaxFailures <= 1):
		return fmt.Errorf("max_failures %g must be a share in [0,1]", *s.MaxFailures)
	case s.Soak < 0:
		return errors.New("soak must not be negative")
	case s.UpdateTimeout <= 0:
		return errors.New("update_timeout must be positive")
	}
	prev := 0.0
	for i, v := range s.Stages {
		if !(v > prev) || v > 1 {
			return fmt.Errorf("stages: stage %d (%g) must be above the previous one and at most 1 (100%%)", i+1, v)
		}
		prev = v
	}
	if prev != 1 {
		return fmt.Errorf("stages: the last stage must be 100%%, got %g", prev*100)
	}
	for k := range s.Select {
		if k == "" {
			return errors.New("select: empty label name")
		}
	}
	return nil
}

// ArtifactInfo is a stored, signed bundle that rollouts hand to devices.
type ArtifactInfo struct {
	ID       string    `json:"id"` // sha256 of the bundle, hex
	Kind     string    `json:"kind"`
	Version  string    `json:"version"`
	Board    string    `json:"board"`
	Size     int64     `json:"size"`
	Verified bool      `json:"verified"` // the signature was checked against the cloud's --ota-pub
	Stored   time.Time `json:"stored"`
}

// RolloutAction is the body of POST .../rollouts/{id}/{action}.
type RolloutAction struct {
	Reason string `json:"reason,omitempty"`
}

// LabelUpdate is the body of PUT .../devices/{id}/labels: a null value
// removes a label.
type LabelUpdate struct {
	Labels map[string]*string `json:"labels"`
}

// UploadArtifact stores a signed bundle in the cloud for rollouts.
func (c *Client) UploadArtifact(ctx context.Context, bundle io.Reader) (*ArtifactInfo, error) {
	var info ArtifactInfo
	return &info, c.do(ctx, http.MethodPost, "artifacts", bundle, &info)
}

// CreateRollout starts a rollout of an uploaded artifact.
func (c *Client) CreateRollout(ctx context.Context, spec RolloutSpec) (*Rollout, error) {
	var r Rollout
	return &r, c.do(ctx, http.MethodPost, "rollouts", spec, &r)
}

// Rollouts lists every rollout, newest first.
func (c *Client) Rollouts(ctx context.Context) ([]*Rollout, error) {
	var rs []*Rollout
	return rs, c.do(ctx, http.MethodGet, "rollouts", nil, &rs)
}

// Rollout returns one rollout with its devices.
func (c *Client) Rollout(ctx context.Context, id string) (*Rollout, error) {
	var r Rollout
	return &r, c.do(ctx, http.MethodGet, "rollouts/"+url.PathEscape(id), nil, &r)
}

// ActOnRollout pauses, resumes or aborts a rollout (action: pause, resume,
// abort).
func (c *Client) ActOnRollout(ctx context.Context, id, action, reason string) (*Rollout, error) {
	var r Rollout
	return &r, c.do(ctx, http.MethodPost, "rollouts/"+url.PathEscape(id)+"/"+url.PathEscape(action), RolloutAction{Reason: reason}, &r)
}

// SetLabels merges labels into a device's (a nil value removes one).
func (c *Client) SetLabels(ctx context.Context, id string, labels map[string]*string) (*Device, error) {
	var d Device
	return &d, c.do(ctx, http.MethodPut, "devices/"+url.PathEscape(id)+"/labels", LabelUpdate{Labels: labels}, &d)
}

// RunningArtifact says which version of an artifact kind the devices in a
// scope run (GET /v1/fleet/running/{kind}), so `model evaluate` can judge a
// candidate against the router the fleet runs rather than the shipped one.
type RunningArtifact struct {
	Kind   string            `json:"kind"`
	Select map[string]string `json:"select,omitempty"`
	// Devices is how many devices the selector picks; Versions counts them
	// by the version of Kind they last reported, "" for those that report
	// none (they run what they were started with: for the router, the
	// shipped model unless their --predictor names another file).
	Devices  int            `json:"devices"`
	Versions map[string]int `json:"versions"`
	// Version is the one most of them run ("" as above); ties go to the
	// newer version.
	Version string `json:"version"`
	// Artifact is the stored bundle of Version (preferring one published
	// by a rollout, then one for the board most of its devices report);
	// nil when Version is "" or the cloud holds no bundle of it.
	Artifact *ArtifactInfo `json:"artifact,omitempty"`
}

// Running asks which version of kind the devices picked by sel run.
func (c *Client) Running(ctx context.Context, kind string, sel map[string]string) (*RunningArtifact, error) {
	q := url.Values{}
	for k, v := range sel {
		q.Add("select", k+"="+v)
	}
	path := "running/" + url.PathEscape(kind)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var r RunningArtifact
	return &r, c.do(ctx, http.MethodGet, path, nil, &r)
}

// DownloadArtifact reads a stored bundle (GET /v1/fleet/artifacts/{id},
// where devices download it too) into memory, at most limit bytes. The
// caller verifies its signature: the cloud's word is not enough.
func (c *Client) DownloadArtifact(ctx context.Context, id string, limit int64) ([]byte, error) {
	resp, err := c.send(ctx, http.MethodGet, "artifacts/"+url.PathEscape(id), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("download artifact %s: %w", id, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("download artifact %s: larger than %d bytes", id, limit)
	}
	return b, nil
}
