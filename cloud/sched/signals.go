package sched

import (
	"time"

	"github.com/phaseless/phaseless/transport/schedhint"
)

// Role is what a pool of workers is provisioned and tuned for (the hint's
// pool nibble).
type Role = schedhint.Pool

// The four pools of DESIGN.md §5.
const (
	RolePrefill      = schedhint.PoolPrefill
	RoleDecode       = schedhint.PoolDecode
	RoleStream       = schedhint.PoolStream
	RoleConservative = schedhint.PoolConservative
	NumRoles         = schedhint.NumPools
)

// ParseRole reads a role name as String writes it (also "prefill", "decode").
func ParseRole(s string) (Role, error) { return schedhint.ParsePool(s) }

// Request is what is measured about one request before it is placed. The
// coordinator fills it once; Decide only reads it.
type Request struct {
	InputTokens     int     // prompt length in tokens
	InputChars      int     // prompt length in characters (for the entropy's weight)
	EntropyBits     float64 // Shannon entropy of the prompt, bits per character
	PredictedOutput int     // expected completion tokens (OutputPredictor)
	Stream          bool    // the client reads tokens as they come
	// BlockHashes are the chained hashes of the prompt's full 16-token blocks
	// (kvcache.BlockHashes), compared with what each worker has cached.
	BlockHashes []uint64
}

// Worker is one worker's state at decision time, filled by cloud/worker.
type Worker struct {
	Role          Role
	Healthy       bool
	Running       int     // sequences generating now
	Queued        int     // requests waiting for this worker (engine queue + batcher)
	Capacity      int     // sequences it runs at once (≥ 1)
	KVUsage       float64 // fraction of KV cache in use, 0..1
	KVFaultsPerMs float64 // evictions or preemptions per ms of late
	BurstSigma    float64 // σ of tokens emitted per 100 ms window
	// PrefixBlocks is how many of Request.BlockHashes, from the start, the
	// worker has cached; Snapshot fills it per request.
	PrefixBlocks int
	// PendingPrefill is the uncached prompt tokens placed on the worker
	// whose first token has not come yet: the prefill work ahead of a new
	// request. The coordinator counts it live (probed signals are too stale
	// for it: a burst lands between two probes).
	PendingPrefill int
	// Prefilling is how many requests those tokens belong to: the rest of
	// Running decodes, and a prefill placed here stalls each of them.
	Prefilling int
	// Class prices the worker's hardware; zero when it declared none.
	Class Class
}

// Load is the worker's occupancy: queued and running work over capacity.
func (w *Worker) Load() float64 {
	c := w.Capacity
	if c < 1 {
		c = 1
	}
	return float64(w.Running+w.Queued) / float64(c)
}

// Snapshot is the set of workers a decision chooses from. Index i of Workers
// is the worker the Decision names.
type Snapshot struct {
	Workers []Worker
	// Now is when the snapshot was taken, on the driver's clock (wall time
	// live, virtual time in the simulator): the planner's hysteresis runs
	// on it. Zero: no clock, and the prefill planner only grows.
	Now time.Time
}
