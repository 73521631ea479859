package fleet

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/cloud/fleetapi/archive"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// Buckets of fleet.db.
//
//	devices  id → Device (JSON)
//	seen     id → seqSet (uvarints): the idempotency index
//	records  ingestNanos(8 BE) ‖ n(8 BE) → ExportedRecord (JSON, one export line)
//	commands id 0x00 commandID → CommandState (JSON)
//	meta     counter name → uint64 (8 BE)
//	rollouts id → Rollout (JSON)
//	shadowgraded device 0x00 trace id → empty: shadow samples graded
//	configs  scope ("fleet" or "label=value") → ConfigLayer (JSON)
//	artifacts id (bundle sha256) → ArtifactInfo (JSON); the bundle is DataDir/artifacts/id.plota
//
// Records are keyed by ingest time so retention (oldest first, by count or
// age) and incremental export (?since=) are seeks, not scans.
var (
	bucketDevices   = []byte("devices")
	bucketSeen      = []byte("seen")
	bucketRecords   = []byte("records")
	bucketCommands  = []byte("commands")
	bucketMeta      = []byte("meta")
	bucketRollouts  = []byte("rollouts")
	bucketArtifacts = []byte("artifacts")

	metaStored     = []byte("stored")
	metaStoreID    = []byte("store-id")
	metaIngested   = []byte("ingested")
	metaDuplicates = []byte("duplicates")
	metaDeleted    = []byte("deleted")
	metaArchived   = []byte("archived")
)

// store is fleet.db. Writers go through db.Batch so concurrent devices
// (each on its own broker goroutine) share fsyncs.
type store struct {
	db *bolt.DB
}

func openStore(path string) (*store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open fleet store %s: %w", path, err)
	}
	db.MaxBatchDelay = 2 * time.Millisecond
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketDevices, bucketSeen, bucketRecords, bucketCommands, bucketMeta, bucketRollouts, bucketArtifacts, bucketConfigs, bucketShadowGraded, bucketRouterCalib} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		// A random identity, made once, tells this store from another
		// replica's (standby.go refuses to take the fleet over with a
		// store that is not the one its writers used).
		meta := tx.Bucket(bucketMeta)
		if meta.Get(metaStoreID) == nil {
			var id [16]byte
			_, _ = rand.Read(id[:])
			return meta.Put(metaStoreID, []byte(hex.EncodeToString(id[:])))
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init fleet store %s: %w", path, err)
	}
	return &store{db: db}, nil
}

// id is the store's identity (openStore makes it).
func (s *store) id() (string, error) {
	var id string
	err := s.db.View(func(tx *bolt.Tx) error {
		id = string(tx.Bucket(bucketMeta).Get(metaStoreID))
		return nil
	})
	return id, err
}

func getU64(b *bolt.Bucket, k []byte) uint64 {
	v := b.Get(k)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func putU64(b *bolt.Bucket, k []byte, v uint64) error {
	return b.Put(k, binary.BigEndian.AppendUint64(nil, v))
}

func addU64(b *bolt.Bucket, k []byte, d uint64) error {
	if d == 0 {
		return nil
	}
	return putU64(b, k, getU64(b, k)+d)
}

func recordKey(t time.Time, n uint64) []byte {
	k := binary.BigEndian.AppendUint64(nil, uint64(t.UnixNano()))
	return binary.BigEndian.AppendUint64(k, n)
}

func commandKey(dev, id string) []byte { return append(append([]byte(dev), 0), id...) }

// errCorrupt marks stored values that do not decode.
var errCorrupt = errors.New("corrupt fleet store value")

// deviceTx caches the devices one transaction touches.
type deviceTx struct {
	tx   *bolt.Tx
	devs map[string]*Device
	now  time.Time
}

func newDeviceTx(tx *bolt.Tx, now time.Time) *deviceTx {
	return &deviceTx{tx: tx, devs: map[string]*Device{}, now: now}
}

// get loads id, creating it (first seen now) when create is set.
func (d *deviceTx) get(id string, create bool) (*Device, error) {
	if dev, ok := d.devs[id]; ok {
		return dev, nil
	}
	v := d.tx.Bucket(bucketDevices).Get([]byte(id))
	if v == nil {
		if !create {
			return nil, nil
		}
		dev := &Device{ID: id, FirstSeen: d.now}
		d.devs[id] = dev
		return dev, nil
	}
	dev := new(Device)
	if err := json.Unmarshal(v, dev); err != nil {
		return nil, fmt.Errorf("device %s: %w: %v", id, errCorrupt, err)
	}
	dev.ID = id
	d.devs[id] = dev
	return dev, nil
}

func (d *deviceTx) flush() error {
	b := d.tx.Bucket(bucketDevices)
	for id, dev := range d.devs {
		v, err := json.Marshal(dev)
		if err != nil {
			return err
		}
		if err := b.Put([]byte(id), v); err != nil {
			return err
		}
	}
	return nil
}

// ingestResult is what one batch did.
type ingestResult struct {
	stored, duplicates, deleted, merged int
	upTo                                uint64
	seqSetReset, newDevice              bool
}

// ingest stores the new records of one device's batch, skips those already
// seen, and applies the count and age bounds, all in one transaction.
func (s *store) ingest(id string, b *fleetwire.TelemetryBatch, now time.Time, maxRecords int, maxAge time.Duration) (ingestResult, error) {
	var res ingestResult
	err := s.db.Batch(func(tx *bolt.Tx) error {
		res = ingestResult{} // Batch may run this function more than once
		dt := newDeviceTx(tx, now)
		res.newDevice = tx.Bucket(bucketDevices).Get([]byte(id)) == nil
		dev, err := dt.get(id, true)
		if err != nil {
			return err
		}
		seenB := tx.Bucket(bucketSeen)
		seen, err := decodeSeqSet(seenB.Get([]byte(id)))
		if err != nil {
			// Lose the duplicate filter for old seqs rather than refuse the
			// device forever; counted and logged by the caller.
			seen, res.seqSetReset = seqSet{}, true
		}
		recs := tx.Bucket(bucketRecords)
		for i := range b.Records {
			r := &b.Records[i]
			res.upTo = max(res.upTo, r.Seq)
			added, merged := seen.add(r.Seq)
			res.merged += merged
			if !added {
				res.duplicates++
				continue
			}
			n, err := recs.NextSequence()
			if err != nil {
				return err
			}
			line, err := json.Marshal(ExportedRecord{DeviceID: id, Record: *r, IngestedAt: now})
			if err != nil {
				return err
			}
			if err := recs.Put(recordKey(now, n), line); err != nil {
				return err
			}
			res.stored++
			dev.Telemetry.LastSeq = max(dev.Telemetry.LastSeq, r.Seq)
		}
		if err := seenB.Put([]byte(id), seen.encode()); err != nil {
			return err
		}
		noteBatch(dev, b, res, now)
		meta := tx.Bucket(bucketMeta)
		if err := addU64(meta, metaStored, uint64(res.stored)); err != nil {
			return err
		}
		if err := addU64(meta, metaIngested, uint64(res.stored)); err != nil {
			return err
		}
		if err := addU64(meta, metaDuplicates, uint64(res.duplicates)); err != nil {
			return err
		}
		// Bounded work per batch; the periodic prune catches up on the rest.
		res.deleted, err = pruneTx(dt, now, maxRecords, maxAge, 10_000)
		if err != nil {
			return err
		}
		return dt.flush()
	})
	return res, err
}

// noteBatch counts a stored batch on its device (LastSeq is already
// raised by each stored record).
func noteBatch(dev *Device, b *fleetwire.TelemetryBatch, res ingestResult, now time.Time) {
	dev.LastSeen, dev.Telemetry.LastBatch = now, now
	dev.Telemetry.Batches++
	dev.Telemetry.Stored += uint64(res.stored)
	dev.Telemetry.Ingested += uint64(res.stored)
	dev.Telemetry.Duplicates += uint64(res.duplicates)
	dev.Telemetry.DroppedOnDevice = b.Dropped // cumulative on the device
	if n := len(b.Records); n > 0 && b.Records[n-1].Seq >= dev.Telemetry.LastSeq {
		// The newest batch says what is still on the device; a late
		// redelivery of an older one would report a stale backlog.
		dev.Telemetry.PendingOnDevice = b.Pending
	}
}

// pruneTx deletes the oldest records while there are more than maxRecords
// or they are older than maxAge, at most limit of them.
func pruneTx(dt *deviceTx, now time.Time, maxRecords int, maxAge time.Duration, limit int) (int, error) {
	meta := dt.tx.Bucket(bucketMeta)
	stored := getU64(meta, metaStored)
	cutoff := uint64(now.Add(-maxAge).UnixNano())
	c := dt.tx.Bucket(bucketRecords).Cursor()
	deleted := 0
	for k, v := c.First(); k != nil && deleted < limit; k, v = c.First() {
		over := stored > uint64(maxRecords)
		old := maxAge > 0 && len(k) == 16 && binary.BigEndian.Uint64(k[:8]) < cutoff
		if !over && !old {
			break
		}
		if err := dropRecord(dt, c, v); err != nil {
			return deleted, err
		}
		deleted++
		if stored > 0 {
			stored--
		}
	}
	if deleted == 0 {
		return 0, nil
	}
	if err := putU64(meta, metaStored, stored); err != nil {
		return deleted, err
	}
	return deleted, addU64(meta, metaDeleted, uint64(deleted))
}

// dropRecord deletes the record under c (value v) and takes it off its
// device's stored count; the caller keeps the store's count.
func dropRecord(dt *deviceTx, c *bolt.Cursor, v []byte) error {
	var who struct {
		DeviceID string `json:"device_id"`
	}
	if json.Unmarshal(v, &who) == nil && who.DeviceID != "" {
		dev, err := dt.get(who.DeviceID, false)
		if err == nil && dev != nil && dev.Telemetry.Stored > 0 {
			dev.Telemetry.Stored--
		}
	}
	return c.Delete()
}

// archiveChunk is how many records one transaction of a move reads or
// deletes: long read transactions keep bbolt from reusing pages, large
// write transactions hold its one writer.
const archiveChunk = 16 << 10

// archiveOnce moves the oldest records to a Parquet file in dir (see
// package archive): those of the oldest record's ingest hour that were
// ingested before cutoff and, while the store holds more than maxRecords,
// enough of that hour's oldest to bring it under. It returns how many
// moved (0: nothing is due) and the new file's size.
func (s *store) archiveOnce(dir string, now, cutoff time.Time, maxRecords int) (moved int, size int64, err error) {
	first, hour, excess, err := s.oldestRecord(maxRecords)
	if err != nil || first == nil {
		return 0, 0, err
	}
	if !keyTime(first).Before(cutoff) && excess == 0 {
		return 0, 0, nil
	}
	// A move that wrote its file but crashed before or while deleting:
	// the file wins; delete what it holds.
	last, err := archive.Covering(dir, hour, first)
	if err != nil {
		return 0, 0, err
	}
	if last == nil {
		if last, size, err = s.writeArchive(dir, first, hour, cutoff, excess); err != nil {
			return 0, 0, err
		}
	}
	moved, err = s.deleteRange(now, first, last)
	return moved, size, err
}

// oldestRecord returns the first record key, its ingest hour, and how many
// records the store holds over maxRecords.
func (s *store) oldestRecord(maxRecords int) (first []byte, hour time.Time, excess int, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		if stored := getU64(tx.Bucket(bucketMeta), metaStored); stored > uint64(maxRecords) {
			excess = int(stored - uint64(maxRecords))
		}
		c := tx.Bucket(bucketRecords).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) == 16 {
				first, hour = append([]byte(nil), k...), keyTime(k).Truncate(time.Hour)
				return nil
			}
		}
		return nil
	})
	return first, hour, excess, err
}

func keyTime(k []byte) time.Time { return time.Unix(0, int64(binary.BigEndian.Uint64(k[:8]))).UTC() }

// writeArchive streams the records from key first on that are due (see
// archiveOnce) into one file of hour and returns its last key.
func (s *store) writeArchive(dir string, first []byte, hour, cutoff time.Time, excess int) (last []byte, size int64, err error) {
	w, err := archive.Create(dir, hour)
	if err != nil {
		return nil, 0, err
	}
	from := first
	for from != nil {
		var rows []archive.Row
		next := []byte(nil)
		err := s.db.View(func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketRecords).Cursor()
			for k, v := c.Seek(from); k != nil; k, v = c.Next() {
				if len(k) != 16 {
					continue
				}
				at := keyTime(k)
				if !at.Truncate(time.Hour).Equal(hour) || (!at.Before(cutoff) && w.Rows()+len(rows) >= excess) {
					return nil
				}
				if len(rows) == archiveChunk {
					next = append([]byte(nil), k...)
					return nil
				}
				var r ExportedRecord
				if err := json.Unmarshal(v, &r); err != nil {
					return fmt.Errorf("record %x: %w", k, errCorrupt)
				}
				last = append(last[:0], k...)
				rows = append(rows, archive.FromExported(&r))
			}
			return nil
		})
		if err == nil {
			err = w.Write(rows)
		}
		if err != nil {
			w.Abort()
			return nil, 0, err
		}
		from = next
	}
	size, err = w.Commit(first, last)
	return last, size, err
}

// deleteRange deletes the records from key first through last, a chunk per
// transaction, keeping the store's and the devices' counts.
func (s *store) deleteRange(now time.Time, first, last []byte) (int, error) {
	total := 0
	for {
		n := 0
		err := s.db.Update(func(tx *bolt.Tx) error {
			n = 0
			dt := newDeviceTx(tx, now)
			c := tx.Bucket(bucketRecords).Cursor()
			for k, v := c.Seek(first); k != nil && bytes.Compare(k, last) <= 0 && n < archiveChunk; k, v = c.Seek(first) {
				if err := dropRecord(dt, c, v); err != nil {
					return err
				}
				n++
			}
			meta := tx.Bucket(bucketMeta)
			stored := getU64(meta, metaStored)
			if err := putU64(meta, metaStored, stored-min(stored, uint64(n))); err != nil {
				return err
			}
			if err := addU64(meta, metaArchived, uint64(n)); err != nil {
				return err
			}
			return dt.flush()
		})
		total += n
		if err != nil || n < archiveChunk {
			return total, err
		}
	}
}

// prune applies retention outside ingest (the periodic sweep).
func (s *store) prune(now time.Time, maxRecords int, maxAge time.Duration) (int, error) {
	var deleted int
	err := s.db.Update(func(tx *bolt.Tx) error {
		dt := newDeviceTx(tx, now)
		var err error
		if deleted, err = pruneTx(dt, now, maxRecords, maxAge, 100_000); err != nil {
			return err
		}
		return dt.flush()
	})
	return deleted, err
}

// updateDevice runs fn on device id (created if create) and saves it.
// fn returning errNoChange skips the write.
func (s *store) updateDevice(id string, now time.Time, create bool, fn func(*Device) error) (*Device, error) {
	var out *Device
	err := s.db.Batch(func(tx *bolt.Tx) error {
		out = nil
		dt := newDeviceTx(tx, now)
		dev, err := dt.get(id, create)
		if err != nil || dev == nil {
			return err
		}
		if err := fn(dev); err != nil {
			return err
		}
		cp := *dev
		out = &cp
		return dt.flush()
	})
	return out, err
}

func (s *store) device(id string) (*Device, error) {
	var dev *Device
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		dev, err = newDeviceTx(tx, time.Time{}).get(id, false)
		if err != nil || dev == nil {
			return err
		}
		dev.Commands, err = commandsTx(tx, id)
		dev.PendingCommands = pendingOf(dev.Commands)
		return err
	})
	return dev, err
}

func (s *store) devices() ([]*Device, error) { return s.listDevices(false) }

// devicesWithCommands is devices with each one's recent commands, for the
// rollout controller.
func (s *store) devicesWithCommands() ([]*Device, error) { return s.listDevices(true) }

func (s *store) listDevices(withCommands bool) ([]*Device, error) {
	var out []*Device
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketDevices).ForEach(func(k, v []byte) error {
			dev := new(Device)
			if err := json.Unmarshal(v, dev); err != nil {
				return fmt.Errorf("device %s: %w: %v", k, errCorrupt, err)
			}
			dev.ID = string(k)
			cmds, err := commandsTx(tx, dev.ID)
			if err != nil {
				return err
			}
			dev.PendingCommands = pendingOf(cmds)
			if withCommands {
				dev.Commands = cmds
			}
			out = append(out, dev)
			return nil
		})
	})
	return out, err
}

func pendingOf(cmds []CommandState) int {
	n := 0
	for _, c := range cmds {
		if c.State == CommandPending {
			n++
		}
	}
	return n
}

// commandsTx lists a device's commands, newest first.
func commandsTx(tx *bolt.Tx, dev string) ([]CommandState, error) {
	var out []CommandState
	prefix := commandKey(dev, "")
	c := tx.Bucket(bucketCommands).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var cs CommandState
		if err := json.Unmarshal(v, &cs); err != nil {
			return nil, fmt.Errorf("command %q: %w: %v", k, errCorrupt, err)
		}
		out = append(out, cs)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].IssuedAt.After(out[j].IssuedAt) })
	return out, nil
}

// addCommand stores a new pending command, creating the device record if
// needed (commands may be queued for a device that has not connected yet),
// and trims finished commands beyond keep.
func (s *store) addCommand(cs CommandState, keep int) (added bool, err error) {
	err = s.db.Batch(func(tx *bolt.Tx) error {
		added = false
		if tx.Bucket(bucketCommands).Get(commandKey(cs.DeviceID, cs.ID)) != nil {
			return nil
		}
		added = true
		dt := newDeviceTx(tx, cs.UpdatedAt)
		if _, err := dt.get(cs.DeviceID, true); err != nil {
			return err
		}
		v, err := json.Marshal(cs)
		if err != nil {
			return err
		}
		b := tx.Bucket(bucketCommands)
		if err := b.Put(commandKey(cs.DeviceID, cs.ID), v); err != nil {
			return err
		}
		all, err := commandsTx(tx, cs.DeviceID)
		if err != nil {
			return err
		}
		for _, id := range trimCommands(all, keep) {
			if err := b.Delete(commandKey(cs.DeviceID, id)); err != nil {
				return err
			}
		}
		return dt.flush()
	})
	return added, err
}

// trimCommands picks the commands to delete from all (newest first) to
// keep keep: oldest finished commands go first; pending ones only when a
// device has piled up twice the bound without answering.
func trimCommands(all []CommandState, keep int) (drop []string) {
	all = append([]CommandState(nil), all...)
	excess := len(all) - keep
	for pass := 0; pass < 2 && excess > 0; pass++ {
		for i := len(all) - 1; i >= 0 && excess > 0; i-- {
			if pass == 0 && all[i].State == CommandPending {
				continue
			}
			if pass == 1 && len(all)-keep <= keep {
				break
			}
			drop = append(drop, all[i].ID)
			all = append(all[:i], all[i+1:]...)
			excess--
		}
	}
	return drop
}

// commandResult records a device's result; false when the command is unknown
// (trimmed, or never issued by this cloud).
func (s *store) commandResult(dev string, r *fleetwire.CommandResult, now time.Time) (bool, error) {
	var found bool
	err := s.db.Batch(func(tx *bolt.Tx) error {
		found = false
		b := tx.Bucket(bucketCommands)
		k := commandKey(dev, r.ID)
		v := b.Get(k)
		if v == nil {
			return nil
		}
		var cs CommandState
		if err := json.Unmarshal(v, &cs); err != nil {
			return fmt.Errorf("command %q: %w: %v", k, errCorrupt, err)
		}
		found = true
		finishCommand(&cs, r, now)
		nv, err := json.Marshal(cs)
		if err != nil {
			return err
		}
		return b.Put(k, nv)
	})
	return found, err
}

// finishCommand records r as cs's result.
func finishCommand(cs *CommandState, r *fleetwire.CommandResult, now time.Time) {
	cs.Result, cs.UpdatedAt = r, now
	cs.State = CommandDone
	if !r.OK {
		cs.State = CommandFailed
	}
}

func (s *store) command(dev, id string) (*CommandState, error) {
	var cs *CommandState
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketCommands).Get(commandKey(dev, id))
		if v == nil {
			return nil
		}
		cs = new(CommandState)
		return json.Unmarshal(v, cs)
	})
	return cs, err
}

func (s *store) counts() (Counts, error) {
	var c Counts
	err := s.db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		c = Counts{
			Stored: getU64(m, metaStored), Ingested: getU64(m, metaIngested),
			Duplicates: getU64(m, metaDuplicates), Deleted: getU64(m, metaDeleted),
			Archived: getU64(m, metaArchived),
			Devices:  tx.Bucket(bucketDevices).Stats().KeyN,
		}
		return nil
	})
	return c, err
}

// exportChunk is how many records one read transaction of an export holds;
// long read transactions keep bbolt from reusing pages.
const exportChunk = 2048

// export calls emit with each stored record's export line (JSON, no newline)
// in ingest order, from ingest time since on, for one device or all (dev "").
func (s *store) export(since time.Time, dev string, emit func(line []byte) error) error {
	var from []byte
	if !since.IsZero() {
		from = recordKey(since, 0)
	}
	devField := []byte(nil)
	if dev != "" {
		devField, _ = json.Marshal(dev)
		devField = append([]byte(`{"device_id":`), devField...)
		devField = append(devField, ',')
	}
	for {
		var lines [][]byte
		var next []byte
		scanned := 0
		err := s.db.View(func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketRecords).Cursor()
			k, v := c.First()
			if from != nil {
				k, v = c.Seek(from)
			}
			for ; k != nil; k, v = c.Next() {
				if scanned == exportChunk {
					next = append([]byte(nil), k...)
					return nil
				}
				scanned++
				// Lines are written by json.Marshal(ExportedRecord), so
				// device_id is always the first field.
				if devField != nil && !bytes.HasPrefix(v, devField) {
					continue
				}
				lines = append(lines, append([]byte(nil), v...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, l := range lines {
			if err := emit(l); err != nil {
				return err
			}
		}
		if next == nil {
			return nil
		}
		from = next
	}
}
