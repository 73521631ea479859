package fleet

import "github.com/phaseless/phaseless/cloud/fleetapi"

// The admin API's types live in cloud/fleetapi so clients need not link the
// broker; the manager uses them under these names.
type (
	Device          = fleetapi.Device
	DeviceTelemetry = fleetapi.DeviceTelemetry
	CommandState    = fleetapi.CommandState
	ExportedRecord  = fleetapi.ExportedRecord
	Counts          = fleetapi.Counts
	ConfigUpdate    = fleetapi.ConfigUpdate
	CommandRequest  = fleetapi.CommandRequest
	Rollout         = fleetapi.Rollout
	RolloutSpec     = fleetapi.RolloutSpec
	RolloutDevice   = fleetapi.RolloutDevice
	StageBytes      = fleetapi.StageBytes
	RolloutAction   = fleetapi.RolloutAction
	LabelUpdate     = fleetapi.LabelUpdate
	ArtifactInfo    = fleetapi.ArtifactInfo
	RunningArtifact = fleetapi.RunningArtifact
	Duration        = fleetapi.Duration
)

// Rollout and rollout-device states.
const (
	RolloutRunning  = fleetapi.RolloutRunning
	RolloutPaused   = fleetapi.RolloutPaused
	RolloutHalted   = fleetapi.RolloutHalted
	RolloutAborted  = fleetapi.RolloutAborted
	RolloutDone     = fleetapi.RolloutDone
	DeviceUpdating  = fleetapi.DeviceUpdating
	DeviceSucceeded = fleetapi.DeviceSucceeded
	DeviceFailed    = fleetapi.DeviceFailed
)

// ParseStages reads "1%,10%,50%,100%" (fleetapi.ParseStages).
var ParseStages = fleetapi.ParseStages

// Command states.
const (
	CommandPending = fleetapi.CommandPending
	CommandDone    = fleetapi.CommandDone
	CommandFailed  = fleetapi.CommandFailed
)
