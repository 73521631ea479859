// Package fleetapi is the cloud's fleet admin API as a client sees it: the
// JSON types of /v1/fleet/ and a Go Client for them. cloud/fleet serves it;
// phaselessctl (and any operator tool) uses it without linking the MQTT
// broker or bbolt.
package fleetapi

import (
	"time"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// Device is one device in the registry, as the admin API shows it.
type Device struct {
	ID       string            `json:"id"`
	Status   *fleetwire.Status `json:"status,omitempty"`   // last status (retained / last will)
	StatusAt time.Time         `json:"status_at,omitzero"` // when the cloud received it
	// Labels are the operator's (region, cohort, …): rollouts select by them.
	Labels    map[string]string `json:"labels,omitempty"`
	FirstSeen time.Time         `json:"first_seen"`
	LastSeen  time.Time         `json:"last_seen,omitzero"` // last message from the device itself

	// Desired is the merged config the device is asked to run (fleet
	// defaults, label groups, then Overrides: MergeConfig); ConfigSources
	// names the layer each key came from.
	Desired       *fleetwire.DesiredConfig  `json:"desired,omitempty"`
	Overrides     map[string]string         `json:"overrides,omitempty"`
	ConfigSources map[string]string         `json:"config_sources,omitempty"`
	Reported      *fleetwire.ReportedConfig `json:"reported,omitempty"`
	ReportedAt    time.Time                 `json:"reported_at,omitzero"`

	Telemetry DeviceTelemetry `json:"telemetry"`
	// Router is the device's calibrated routing threshold (nil before its
	// first scored shadow grade).
	Router *RouterCalibration `json:"router,omitempty"`

	// PendingCommands is filled by the API: commands without a result.
	PendingCommands int `json:"pending_commands"`
	// Commands is filled for single-device views, newest first.
	Commands []CommandState `json:"commands,omitempty"`
}

// State is the device's last reported state: online, offline, or unknown
// before its first status.
func (d *Device) State() string {
	if d.Status == nil || d.Status.State == "" {
		return "unknown"
	}
	return d.Status.State
}

// DeviceTelemetry counts one device's telemetry.
type DeviceTelemetry struct {
	Stored          uint64    `json:"stored"`            // records held now
	Ingested        uint64    `json:"ingested"`          // distinct records ever stored
	Duplicates      uint64    `json:"duplicates"`        // redelivered records not stored again
	Batches         uint64    `json:"batches"`           // batches received (duplicates included)
	LastSeq         uint64    `json:"last_seq"`          // highest seq stored
	DroppedOnDevice uint64    `json:"dropped_on_device"` // the device's own count of records it discarded
	PendingOnDevice uint64    `json:"pending_on_device"` // records the device still held unacknowledged at its newest batch (its backlog)
	LastBatch       time.Time `json:"last_batch,omitzero"`
	// Shadow evaluation of the device's sampled local answers (its
	// shadow-share config key): graded by the cloud, passed or failed, or
	// not graded because the cloud could not answer.
	ShadowPassed uint64 `json:"shadow_passed,omitempty"`
	ShadowFailed uint64 `json:"shadow_failed,omitempty"`
	ShadowErrors uint64 `json:"shadow_errors,omitempty"`
}

// Command states.
const (
	CommandPending = "pending" // issued, no result yet
	CommandDone    = "done"    // result ok
	CommandFailed  = "failed"  // result not ok
)

// CommandState is a command and what became of it.
type CommandState struct {
	DeviceID string `json:"device_id"`
	fleetwire.Command
	State     string                   `json:"state"`
	Result    *fleetwire.CommandResult `json:"result,omitempty"`
	UpdatedAt time.Time                `json:"updated_at"`
}

// ExportedRecord is one line of the telemetry export: the record as the
// device sent it (fleet.Record: seq, time, kind, data) plus which device
// sent it and when the cloud stored it. Training reads Data as a
// fleet.RequestRecord when Kind is "request".
type ExportedRecord struct {
	DeviceID string `json:"device_id"`
	fleetwire.Record
	IngestedAt time.Time `json:"ingested_at"`
}

// ConfigUpdate changes a device's overrides (PUT .../devices/{id}/config)
// or a config layer (PUT .../config/{scope}).
type ConfigUpdate struct {
	// Values to set. With Merge, they are added to the current values and a
	// null value removes a key; without, they replace all values.
	Values map[string]*string `json:"values"`
	Merge  bool               `json:"merge"`
}

// CommandRequest is the body of POST .../commands.
type CommandRequest struct {
	Name string            `json:"name"`
	Args map[string]string `json:"args,omitempty"`
}

// Counts are fleet-wide telemetry totals.
type Counts struct {
	Stored     uint64 `json:"stored"`     // records held now
	Ingested   uint64 `json:"ingested"`   // distinct records ever stored
	Duplicates uint64 `json:"duplicates"` // redelivered records not stored again
	Deleted    uint64 `json:"deleted"`    // removed by retention
	Archived   uint64 `json:"archived"`   // moved to the Parquet archive (--fleet-archive-dir)
	Devices    int    `json:"devices"`
}

// Prefix is where the admin API's routes live on the cloud's HTTP listener.
const Prefix = "/v1/fleet/"

// ErrorBody is the shape of every admin API error answer.
type ErrorBody struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

// ConfigRouterAlpha is the fleet config key of the bound on a device's
// share of requests answered locally and wrong (default
// DefaultRouterAlpha); ConfigRouterDelta the key of 1 − the confidence of
// that bound (default DefaultRouterDelta): the realised share exceeds α
// with probability at most δ. ConfigRouteThreshold is the device setting
// the calibrated threshold is shipped as.
const (
	ConfigRouterAlpha    = "router-alpha"
	ConfigRouterDelta    = "router-delta"
	ConfigRouteThreshold = "route-threshold"
	DefaultRouterAlpha   = 0.05
	DefaultRouterDelta   = 0.05
	// SourceCalibrated is ConfigSources' name for a route-threshold set by
	// the calibration.
	SourceCalibrated = "calibrated"
)

// RouterCalibration is a device's routing threshold calibrated on its own
// graded outcomes (models/riskcontrol, Learn-then-Test): requests it
// scores below Threshold stay local, and the share answered locally and
// wrong is at most Alpha with probability 1 − Delta while its traffic
// stays like the outcomes'.
type RouterCalibration struct {
	Alpha float64 `json:"alpha"`
	Delta float64 `json:"delta,omitempty"`
	// Router is the router model the outcomes were scored by
	// (fleetwire.ShadowRecord.Router): a new one starts the window again.
	Router    string  `json:"router,omitempty"`
	Threshold float64 `json:"threshold,omitempty"` // meaningful when Certified
	// Certified is false while the outcomes are too few for any threshold:
	// the device keeps the fleet's.
	Certified bool `json:"certified"`
	Outcomes  int  `json:"outcomes"` // scored shadow grades in the window
	// Realised is the share of those outcomes the device answered locally
	// and wrong, at the thresholds it ran.
	Realised  float64   `json:"realised"`
	UpdatedAt time.Time `json:"updated_at"`
}

// EffectiveDelta is r's δ; a calibration stored before router-delta
// existed ran at the default.
func (r *RouterCalibration) EffectiveDelta() float64 {
	if r.Delta == 0 {
		return DefaultRouterDelta
	}
	return r.Delta
}
