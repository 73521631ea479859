// Package fleetwire is the MQTT v5 topic scheme and the JSON payloads that the
// agent and the cloud exchange to manage a fleet (DESIGN.md §4). It has no
// client or broker code: agent/fleetclient and cloud/fleet own those.
package fleetwire

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/phaseless/phaseless/firmware"
)

// DefaultPrefix is the topic prefix unless configured otherwise.
const DefaultPrefix = "phaseless/"

// Per-device topic suffixes, under {prefix}dev/{id}/.
const (
	SuffixStatus         = "status"          // device→cloud, retained, also the last will
	SuffixTelemetry      = "telemetry"       // device→cloud, batches of records
	SuffixTelemetryAck   = "telemetry/ack"   // cloud→device, batch acknowledged (safe to delete)
	SuffixConfigDesired  = "config/desired"  // cloud→device, retained
	SuffixConfigReported = "config/reported" // device→cloud, retained
	SuffixCmd            = "cmd"             // cloud→device
	SuffixCmdResult      = "cmd/result"      // device→cloud
)

// Topics builds and parses topic names under one prefix.
type Topics struct {
	Prefix string // ends with "/"; empty means DefaultPrefix
}

func (t Topics) prefix() string {
	if t.Prefix == "" {
		return DefaultPrefix
	}
	return t.Prefix
}

// Device returns {prefix}dev/{id}/{suffix}.
func (t Topics) Device(id, suffix string) string {
	return t.prefix() + "dev/" + id + "/" + suffix
}

// DeviceFilter returns the subscription filter for one suffix across all
// devices, e.g. phaseless/dev/+/telemetry.
func (t Topics) DeviceFilter(suffix string) string {
	return t.prefix() + "dev/+/" + suffix
}

// Fleet returns {prefix}fleet/{name}, for fleet-wide announcements.
func (t Topics) Fleet(name string) string { return t.prefix() + "fleet/" + name }

// ParseDevice splits a device topic into its device id and suffix.
func (t Topics) ParseDevice(topic string) (id, suffix string, ok bool) {
	rest, found := strings.CutPrefix(topic, t.prefix()+"dev/")
	if !found {
		return "", "", false
	}
	id, suffix, found = strings.Cut(rest, "/")
	if !found || ValidateDeviceID(id) != nil || suffix == "" {
		return "", "", false
	}
	return id, suffix, true
}

// DeviceWrite is what the broker lets a device publish on one of its own
// topics: the protocol's device→cloud topics and nothing else, each with a
// payload limit, retained only where DESIGN.md §4 retains. Anything a device
// may write is stored by the broker at most once per topic when retained, so
// this table bounds what one device certificate can make the broker keep.
type DeviceWrite struct {
	Suffix   string
	Retain   bool // a retained publish is allowed (the protocol retains this topic)
	MaxBytes int  // payload limit in bytes
}

// Payload limits per device topic. Each is the largest payload the agent
// sends there with headroom, and far below the broker's packet limit.
const (
	// MaxStatusBytes: a Status with a board, three artifact versions and
	// a rolled-back entry encodes to about 350 bytes.
	MaxStatusBytes = 8 << 10
	// MaxTelemetryBytes: the agent trims a batch to 256 KiB
	// (agent/fleetclient maxBatchBytes) but always sends at least one
	// record; 10 request records with their 225 features measured
	// 27,539 bytes (about 2.75 KB a record, cloud/fleet/broker
	// TestTelemetryBatchWeight), so a trimmed batch stays under ~260 KiB
	// and 1 MiB leaves 4× headroom.
	MaxTelemetryBytes = 1 << 20
	// MaxConfigReportedBytes: a version, a flag, an error sentence and the
	// names of settings pending a restart.
	MaxConfigReportedBytes = 8 << 10
	// MaxCmdResultBytes: a command's output (install logs, diagnostics);
	// the agent truncates Output to fit (TruncateResult).
	MaxCmdResultBytes = 64 << 10
)

// DeviceWrites is every topic a device may publish to, under its own
// {prefix}dev/{id}/. The broker refuses the rest.
var DeviceWrites = []DeviceWrite{
	{Suffix: SuffixStatus, Retain: true, MaxBytes: MaxStatusBytes},
	{Suffix: SuffixTelemetry, MaxBytes: MaxTelemetryBytes},
	{Suffix: SuffixConfigReported, Retain: true, MaxBytes: MaxConfigReportedBytes},
	{Suffix: SuffixCmdResult, MaxBytes: MaxCmdResultBytes},
}

// DeviceWriteRule returns the rule for device id publishing to topic, and
// false when the device may not publish there at all.
func (t Topics) DeviceWriteRule(id, topic string) (DeviceWrite, bool) {
	if ValidateDeviceID(id) != nil {
		return DeviceWrite{}, false // an empty or odd id would widen "own subtree" (dev//...)
	}
	suffix, ok := strings.CutPrefix(topic, t.prefix()+"dev/"+id+"/")
	if !ok {
		return DeviceWrite{}, false
	}
	for _, w := range DeviceWrites {
		if w.Suffix == suffix {
			return w, true
		}
	}
	return DeviceWrite{}, false
}

// DeviceMay reports whether device id may publish to or subscribe on topic
// (or filter): publish only to the exact topics of DeviceWrites, subscribe
// anywhere under its own dev/{id}/ and to fleet announcements. This is the
// broker ACL; DeviceWriteRule adds the retain and size rules.
func (t Topics) DeviceMay(id, topic string, write bool) bool {
	if write {
		_, ok := t.DeviceWriteRule(id, topic)
		return ok
	}
	if ValidateDeviceID(id) != nil {
		return false
	}
	if strings.HasPrefix(topic, t.prefix()+"dev/"+id+"/") {
		return true // a device may use wildcards inside its own subtree to subscribe
	}
	return strings.HasPrefix(topic, t.prefix()+"fleet/")
}

// TruncateResult shortens r.Output so that r encodes within
// MaxCmdResultBytes, marking the cut, so a command with a long output still
// reports its outcome instead of being refused by the broker.
func TruncateResult(r CommandResult) CommandResult {
	const mark = "\n[output truncated]"
	cut := func(s string, n int) string { return strings.ToValidUTF8(s[:len(s)-n], "") + mark }
	for {
		b, err := json.Marshal(r)
		if err != nil || len(b) <= MaxCmdResultBytes {
			return r
		}
		over := len(b) - MaxCmdResultBytes + len(mark)
		switch {
		case len(r.Output) > over:
			r.Output = cut(r.Output, over)
		case r.Output != "":
			r.Output = ""
		default:
			r.Error = cut(r.Error, min(len(r.Error), max(over, len(r.Error)/2)))
		}
	}
}

// ValidateDeviceID rejects ids that would break the topic scheme or the PKI.
func ValidateDeviceID(id string) error {
	if id == "" || len(id) > 64 {
		return errors.New("device id must be 1..64 characters")
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("device id %q: only letters, digits, '-', '_' and '.' are allowed", id)
		}
	}
	return nil
}

// Status is the retained device status, also set as the MQTT last will with
// State "offline".
type Status struct {
	DeviceID string `json:"device_id"`
	State    string `json:"state"` // online | offline
	Version  string `json:"version"`
	Slot     string `json:"slot,omitempty"` // active OTA slot: a | b
	Board    string `json:"board,omitempty"`
	// Artifacts are the versions of what the device runs, by artifact kind
	// (agent: the slot's bundle version; predictor; model), so a rollout
	// can tell an installed update from one that rolled back.
	Artifacts map[string]string `json:"artifacts,omitempty"`
	// RolledBack names, by kind, an update the device installed and then
	// abandoned because it failed on trial (its boot supervisor rolled
	// back), so a rollout counts it as failed without waiting.
	RolledBack map[string]string `json:"rolled_back,omitempty"`
	// Trial is set while the device runs an agent slot on trial: booted,
	// not yet committed by its supervisor. A rollout waits for it to clear.
	Trial bool `json:"trial,omitempty"`
	// RouterBound is the state of the device's bound on wrong local
	// answers (the fleet's router-alpha): RouterBoundInForce, or
	// RouterBoundSuspended while the cloud is unreachable and every request
	// runs locally whatever its score; empty when the device has no bound.
	RouterBound string `json:"router_bound,omitempty"`
	// Update is the device's last or current update download and the link
	// policy it runs under; nil from devices that predate it.
	Update *UpdateStatus `json:"update,omitempty"`
	// ProbeGates is, by artifact kind, the last probe gate an update of
	// that kind went through on the device (its bundle carried a probe
	// set): a rollout quotes a failed one's scores.
	ProbeGates map[string]ProbeGate `json:"probe_gates,omitempty"`
	Time       time.Time            `json:"time"`
}

// ProbeGate is one quality gate's outcome: the update's version, whether
// it passed, and the scores of both artifacts and the margin, in one line.
type ProbeGate struct {
	Version string `json:"version"`
	Pass    bool   `json:"pass"`
	Result  string `json:"result"`
}

// UpdateStatus is a device's update download (agent/ota): which bundle,
// how far it is and what it cost, and the link policy the device applies
// (fleet config keys update-bandwidth and update-on-metered, flag
// --metered). A rollout sums the bytes of its devices per stage.
type UpdateStatus struct {
	URL     string `json:"url,omitempty"`
	Kind    string `json:"kind,omitempty"`
	Version string `json:"version,omitempty"`
	// State is UpdateDownloading, UpdateDeferred, UpdateRefused,
	// UpdateInstalled or UpdateFailed; "" when no update was asked for.
	State string `json:"state,omitempty"`
	// FullBytes is the whole bundle; PlannedBytes what this device had to
	// fetch of it (its header and the chunks it held nowhere);
	// TransferredBytes what it fetched so far, resumed downloads included.
	FullBytes        int64  `json:"full_bytes,omitempty"`
	PlannedBytes     int64  `json:"planned_bytes,omitempty"`
	TransferredBytes int64  `json:"transferred_bytes,omitempty"`
	Error            string `json:"error,omitempty"`
	// Bandwidth is the cap on update downloads in bytes/s (0: none).
	Bandwidth int64 `json:"bandwidth,omitempty"`
	// OnMetered is "defer" or "allow"; Metered whether the device's link
	// is metered now.
	OnMetered string `json:"on_metered,omitempty"`
	Metered   bool   `json:"metered,omitempty"`
}

// UpdateOf is the device's download of the bundle at url, nil when its
// status reports another or none (or s is nil).
func (s *Status) UpdateOf(url string) *UpdateStatus {
	if s == nil || s.Update == nil || s.Update.URL != url {
		return nil
	}
	return s.Update
}

// UpdateStatus.State's values.
const (
	UpdateDownloading = "downloading"
	UpdateDeferred    = "deferred"
	UpdateRefused     = "refused"
	UpdateInstalled   = "installed"
	UpdateFailed      = "failed"
)

// Status.RouterBound's values.
const (
	RouterBoundInForce   = "in-force"
	RouterBoundSuspended = "suspended"
)

// Running is the version of an artifact kind the device runs ("" for none
// or a nil status). For the agent it is the bundle its slot holds, when it
// reports one: an installed update need not change the build stamp that
// Version carries.
func (s *Status) Running(kind string) string {
	if s == nil {
		return ""
	}
	if v, ok := s.Artifacts[kind]; ok {
		return v
	}
	if kind == firmware.KindAgent {
		return s.Version
	}
	return ""
}

// AgentVersion is the agent version the device runs (Running).
func (s *Status) AgentVersion() string { return s.Running(firmware.KindAgent) }

// Installed lists the other artifacts the device runs, by kind, as
// "model 2.0, predictor 1.1": what the fleet views print beside the agent's
// version. "" when there are none.
func (s *Status) Installed() string {
	if s == nil {
		return ""
	}
	var out []string
	for kind, v := range s.Artifacts {
		if kind != firmware.KindAgent && v != "" {
			out = append(out, kind+" "+v)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// Record is one telemetry record as it travels; Data is the record body
// (usually a RequestRecord) kept opaque so the transport never re-encodes it.
type Record struct {
	// Seq is per device and strictly increasing, also across restarts. A
	// new device buffer starts at its creation time in microseconds, not
	// at 1, so a device whose data directory was wiped does not reuse
	// seqs the cloud has already ingested.
	Seq  uint64          `json:"seq"`
	Time time.Time       `json:"time"`
	Kind string          `json:"kind"` // "request", ...
	Data json.RawMessage `json:"data"`
}

// TelemetryBatch is what one telemetry publish carries. (DeviceID, Seq) makes
// each record's identity, so ingest is idempotent under redelivery.
type TelemetryBatch struct {
	DeviceID string   `json:"device_id"`
	BatchID  string   `json:"batch_id"`
	Records  []Record `json:"records"`
	// Dropped counts records the device discarded because its buffer was
	// full (or found corrupt on disk). It is cumulative since the device's
	// buffer was created, not per batch: the cloud keeps the largest value
	// it has seen per device, so redelivered batches never count twice.
	Dropped uint64 `json:"dropped,omitempty"`
	// Pending is how many records the device held unacknowledged when it
	// sent this batch (this batch's included): its offline backlog, for
	// the fleet's view of a device that is still catching up.
	Pending uint64 `json:"pending,omitempty"`
}

// TelemetryAck tells the device which records are stored and may be deleted.
// The cloud sends one per received batch, to {prefix}dev/{id}/telemetry/ack,
// with UpTo = the largest seq of the batch once all of it is stored (also
// when the records were already stored before: ingest is idempotent). A
// smaller UpTo means only the records up to it are stored; the device then
// resends the rest. Acks may arrive in any order.
type TelemetryAck struct {
	BatchID string `json:"batch_id"`
	UpTo    uint64 `json:"up_to"` // every seq ≤ UpTo of this batch is stored
}

// RequestRecord is the telemetry body of one completion request on a device:
// what the router saw, what it decided, and how it went. It is also the
// training data for the next router predictor.
type RequestRecord struct {
	TraceID          string    `json:"trace_id"`
	Features         []float32 `json:"features,omitempty"`
	FeatureVersion   int       `json:"feature_version,omitempty"`
	CloudProb        float64   `json:"cloud_prob"`
	Decision         string    `json:"decision"` // local | cloud
	Reason           string    `json:"reason"`
	Path             string    `json:"path"` // where it actually ran
	FallbackReason   string    `json:"fallback_reason,omitempty"`
	FallbackCause    string    `json:"fallback_cause,omitempty"` // llm.FallbackCause name: no_cloud, cloud_timeout, ...
	TTFTMillis       float64   `json:"ttft_ms"`
	ITLMillis        float64   `json:"itl_ms"`
	PromptTokens     int       `json:"prompt_tokens"`
	CompletionTokens int       `json:"completion_tokens"`
	Outcome          string    `json:"outcome"` // ok | error | cancelled
	Error            string    `json:"error,omitempty"`
	// ContinuedOn is set when the answer began on the cloud and the
	// device's engine finished it ("local"), ContinueReason says why
	// (llm.ContinueCloudLost, llm.ContinueCloudError) and ContinueDetail
	// what failed.
	ContinuedOn    string `json:"continued_on,omitempty"`
	ContinueReason string `json:"continue_reason,omitempty"`
	ContinueDetail string `json:"continue_detail,omitempty"`
}

// Ran is where the request ran, "local" or "cloud": Path names the cloud's
// pool and worker too ("cloud/<pool>/<worker>") when the cloud answered, so
// a reader that compares Path with "cloud" misses every one of those.
func (r RequestRecord) Ran() string {
	where, _, _ := strings.Cut(r.Path, "/")
	return where
}

// DesiredConfig is the versioned configuration the cloud wants a device to run.
type DesiredConfig struct {
	Version uint64            `json:"version"`
	Values  map[string]string `json:"values"`
}

// ReportedConfig is what the device applied.
type ReportedConfig struct {
	Version uint64 `json:"version"`
	Applied bool   `json:"applied"`
	Error   string `json:"error,omitempty"` // why it was not applied: the setting and what is wrong
	// RestartPending lists the settings of this version that take effect
	// at the device's next start; the others are in force already.
	RestartPending []string `json:"restart_pending,omitempty"`
}

// Command asks a device to do something once; ID makes it idempotent.
type Command struct {
	ID       string            `json:"id"`
	Name     string            `json:"name"` // update, reload-model, rollback, ...
	Args     map[string]string `json:"args,omitempty"`
	IssuedAt time.Time         `json:"issued_at"`
}

// CommandResult is the device's answer to a Command.
type CommandResult struct {
	ID     string `json:"id"`
	OK     bool   `json:"ok"`
	Output string `json:"output,omitempty"`
	Error  string `json:"error,omitempty"`
}
