package fleet

import (
	"time"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// fleetStore is what the Manager keeps fleet state in: the registry,
// desired and reported config with its layers, commands, rollouts,
// artifacts and telemetry. store (bbolt, fleet.db in the data directory)
// is the embedded default, behind the single-writer lease; pgStore
// (--fleet-db postgres://…) is shared by managers that run side by side.
// Both are run through the same tests (storesuite_test.go) so the Manager
// sees one behaviour.
type fleetStore interface {
	// id is the store's identity, made when it was first created.
	id() (string, error)
	close() error

	// ingest stores a device's batch, idempotent on (device, seq), and
	// applies the count and age bounds.
	ingest(id string, b *fleetwire.TelemetryBatch, now time.Time, maxRecords int, maxAge time.Duration) (ingestResult, error)
	prune(now time.Time, maxRecords int, maxAge time.Duration) (int, error)
	archiveOnce(dir string, now, cutoff time.Time, maxRecords int) (moved int, size int64, err error)
	counts() (Counts, error)
	export(since time.Time, dev string, emit func(line []byte) error) error

	// updateDevice runs fn on device id (created if create) and saves it;
	// fn returning errNoChange skips the write.
	updateDevice(id string, now time.Time, create bool, fn func(*Device) error) (*Device, error)
	// updateDeviceConfig is updateDevice that also re-merges the device's
	// config (changed: a new desired version) and counts its pending
	// commands (dev.PendingCommands), in the same transaction.
	updateDeviceConfig(id string, now time.Time, create bool, fn func(*Device) error) (dev *Device, changed bool, err error)
	device(id string) (*Device, error)
	devices() ([]*Device, error)
	devicesWithCommands() ([]*Device, error)

	setLayer(scope string, u ConfigUpdate, now time.Time) (*ConfigLayer, []*Device, error)
	layers() (map[string]*ConfigLayer, error)

	// addCommand stores a new pending command unless one with its id is
	// stored already (added false): a rollout's update command has one id
	// per device, whichever manager issues it.
	addCommand(cs CommandState, keep int) (added bool, err error)
	commandResult(dev string, r *fleetwire.CommandResult, now time.Time) (bool, error)
	command(dev, id string) (*CommandState, error)

	putRollout(r *Rollout) error
	rollout(id string) (*Rollout, error)
	rollouts() ([]*Rollout, error)
	updateRollout(id string, fn func(*Rollout) error) error
	// claimRollout runs fn on rollout id and stores the result, unless
	// another manager is stepping it (claimed false). fn may call the
	// store.
	claimRollout(id string, fn func(*Rollout) error) (claimed bool, err error)

	putArtifact(info *ArtifactInfo) error
	artifact(id string) (*ArtifactInfo, error)
	artifacts() ([]*ArtifactInfo, error)

	// shadowGraded says whether the sample key (commandKey(device, trace
	// id)) was graded; storeShadowGrade stores a grade once per key, and
	// says stale when it was left out of the calibration (scored by a
	// router the device no longer runs).
	shadowGraded(key []byte) (bool, error)
	storeShadowGrade(device string, key []byte, g fleetwire.ShadowGrade, now time.Time) (dev *Device, changed, stale bool, err error)
}

var _ fleetStore = (*store)(nil)
