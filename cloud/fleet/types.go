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
)

// Command states.
const (
	CommandPending = fleetapi.CommandPending
	CommandDone    = fleetapi.CommandDone
	CommandFailed  = fleetapi.CommandFailed
)
