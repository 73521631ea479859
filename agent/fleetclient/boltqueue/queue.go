// Package boltqueue is a durable outgoing-message queue for autopaho
// (github.com/eclipse/paho.golang/autopaho/queue.Queue) on bbolt.
//
// autopaho's own file queue writes one file per message without fsync,
// orders by file mtime (close messages can swap), has no size bound and
// loops forever on a corrupt or empty file (upstream issue #193). This queue
// fsyncs every Enqueue before returning, keeps strict FIFO order by a
// persistent 64-bit id, bounds its size with an explicit policy, and moves
// entries that fail their checksum to a quarantine bucket, counting and
// reporting them, instead of returning them again.
package boltqueue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho/queue"
	bolt "go.etcd.io/bbolt"
)

var _ queue.Queue = (*Queue)(nil)

// Policy says what Enqueue does when the queue is full.
type Policy int

const (
	// DropOldest removes the oldest entries to make room (the default):
	// for device status and results, the newest message matters most.
	DropOldest Policy = iota
	// RejectNew fails Enqueue with ErrFull and keeps what is queued.
	RejectNew
)

var (
	// ErrFull is returned by Enqueue under RejectNew when the queue is full.
	ErrFull = errors.New("boltqueue: queue full")
	// ErrTooLarge is returned by Enqueue for an entry over MaxEntryBytes.
	ErrTooLarge = errors.New("boltqueue: entry too large")
	// ErrClosed is returned by calls on a closed Queue.
	ErrClosed = errors.New("boltqueue: closed")
)

// Config tunes a Queue. The zero value means the defaults.
type Config struct {
	MaxEntries    int    // default 10000
	MaxBytes      int64  // total stored bytes, default 16 MiB
	MaxEntryBytes int    // default 256 KiB (MQTT messages the agent sends are small)
	WhenFull      Policy // default DropOldest
	// KeepQuarantined bounds how many corrupt entries are kept for
	// analysis (default 16; older ones are deleted).
	KeepQuarantined int
	// OnCorrupt, if set, is told about every entry moved to quarantine.
	// It must not block or call back into the queue.
	OnCorrupt func(id uint64, err error)
	// OpenTimeout bounds the wait for the file lock (Open only; default 5 s).
	OpenTimeout time.Duration
}

func (c *Config) fillDefaults() {
	if c.MaxEntries == 0 {
		c.MaxEntries = 10000
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = 16 << 20
	}
	if c.MaxEntryBytes == 0 {
		c.MaxEntryBytes = 256 << 10
	}
	if c.KeepQuarantined == 0 {
		c.KeepQuarantined = 16
	}
	if c.OpenTimeout == 0 {
		c.OpenTimeout = 5 * time.Second
	}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.MaxEntries < 0:
		return errors.New("boltqueue: MaxEntries must not be negative")
	case c.MaxBytes < 0:
		return errors.New("boltqueue: MaxBytes must not be negative")
	case c.MaxEntryBytes < 0:
		return errors.New("boltqueue: MaxEntryBytes must not be negative")
	case c.MaxEntryBytes > 0 && c.MaxBytes > 0 && int64(c.MaxEntryBytes) > c.MaxBytes:
		return errors.New("boltqueue: MaxEntryBytes must not exceed MaxBytes")
	case c.WhenFull != DropOldest && c.WhenFull != RejectNew:
		return fmt.Errorf("boltqueue: WhenFull %d is not a Policy", c.WhenFull)
	case c.KeepQuarantined < 0:
		return errors.New("boltqueue: KeepQuarantined must not be negative")
	case c.OpenTimeout < 0:
		return errors.New("boltqueue: OpenTimeout must not be negative")
	}
	return nil
}

// Stats is a snapshot of the queue.
type Stats struct {
	Entries  int    // queued now
	Bytes    int64  // their stored size
	Dropped  uint64 // cumulative entries dropped by DropOldest
	Rejected uint64 // Enqueue calls refused by RejectNew since open
	Corrupt  uint64 // cumulative entries moved to quarantine
}

// Queue is a bbolt-backed queue.Queue. Enqueue, Wait and Stats are safe for
// concurrent use; Peek and the Entry methods follow the queue.Queue contract
// (one entry outstanding at a time).
type Queue struct {
	db     *bolt.DB
	ownDB  bool // Close closes db
	bucket []byte
	quar   []byte
	meta   []byte
	cfg    Config

	mu      sync.Mutex // guards everything below and serialises write transactions
	entries int
	bytes   int64
	stats   Stats
	waiting []chan struct{} // closed when the queue becomes non-empty
	closed  bool
}

var (
	metaNext    = []byte("next")
	metaDropped = []byte("dropped")
	metaCorrupt = []byte("corrupt")
)

// Open opens or creates a queue in its own bbolt file.
func Open(path string, cfg Config) (*Queue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.fillDefaults()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: cfg.OpenTimeout})
	if err != nil {
		return nil, fmt.Errorf("open queue %s: %w", path, err)
	}
	q, err := New(db, "queue", cfg)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	q.ownDB = true
	return q, nil
}

// New keeps a queue in buckets named after name inside db, which the caller
// owns (Close then leaves db open). Several queues may share one file.
func New(db *bolt.DB, name string, cfg Config) (*Queue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if name == "" {
		return nil, errors.New("boltqueue: empty queue name")
	}
	cfg.fillDefaults()
	q := &Queue{
		db:     db,
		bucket: []byte(name),
		quar:   []byte(name + ".quarantine"),
		meta:   []byte(name + ".meta"),
		cfg:    cfg,
	}
	err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(q.bucket)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(q.quar); err != nil {
			return err
		}
		m, err := tx.CreateBucketIfNotExists(q.meta)
		if err != nil {
			return err
		}
		q.stats.Dropped, q.stats.Corrupt = getU64(m, metaDropped), getU64(m, metaCorrupt)
		return b.ForEach(func(_, v []byte) error {
			q.entries++
			q.bytes += int64(len(v))
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("boltqueue: init %s: %w", name, err)
	}
	return q, nil
}

// Wait returns a channel that is closed when the queue holds something
// (already closed if it does now).
func (q *Queue) Wait() chan struct{} {
	c := make(chan struct{})
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.entries > 0 {
		close(c)
		return c
	}
	q.waiting = append(q.waiting, c)
	return c
}

// Enqueue appends the contents of p; the entry is on disk (fsync'd) when it
// returns nil.
func (q *Queue) Enqueue(p io.Reader) error {
	data, err := io.ReadAll(io.LimitReader(p, int64(q.cfg.MaxEntryBytes)+1))
	if err != nil {
		return fmt.Errorf("boltqueue: read entry: %w", err)
	}
	if len(data) > q.cfg.MaxEntryBytes {
		return fmt.Errorf("%w: over %d bytes", ErrTooLarge, q.cfg.MaxEntryBytes)
	}
	if len(data) == 0 {
		return errors.New("boltqueue: empty entry")
	}
	v := make([]byte, 4+len(data))
	binary.BigEndian.PutUint32(v, crc32.Checksum(data, castagnoli))
	copy(v[4:], data)

	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	size := int64(len(v))
	if q.cfg.WhenFull == RejectNew && (q.entries+1 > q.cfg.MaxEntries || q.bytes+size > q.cfg.MaxBytes) {
		q.stats.Rejected++
		return ErrFull
	}
	entries, total := q.entries, q.bytes
	var dropped uint64
	err = q.db.Update(func(tx *bolt.Tx) error {
		b, m := tx.Bucket(q.bucket), tx.Bucket(q.meta)
		entries, total, dropped = q.entries, q.bytes, 0
		id := getU64(m, metaNext) + 1
		if err := putU64(m, metaNext, id); err != nil {
			return err
		}
		if err := b.Put(idKey(id), v); err != nil {
			return err
		}
		entries++
		total += size
		c := b.Cursor()
		for entries > q.cfg.MaxEntries || total > q.cfg.MaxBytes {
			k, old := c.First()
			if k == nil || bytes.Equal(k, idKey(id)) {
				break
			}
			total -= int64(len(old))
			if err := c.Delete(); err != nil {
				return err
			}
			entries--
			dropped++
		}
		if dropped > 0 {
			return putU64(m, metaDropped, q.stats.Dropped+dropped)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("boltqueue: enqueue: %w", err)
	}
	q.entries, q.bytes = entries, total
	q.stats.Dropped += dropped
	for _, c := range q.waiting {
		close(c)
	}
	q.waiting = q.waiting[:0]
	return nil
}

// Peek returns the oldest intact entry without removing it, or
// queue.ErrEmpty. Entries that fail their checksum are quarantined and
// reported on the way, so a corrupt entry can never be returned twice.
func (q *Queue) Peek() (queue.Entry, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, ErrClosed
	}
	for {
		if q.entries == 0 {
			return nil, queue.ErrEmpty
		}
		var id uint64
		var data []byte
		var bad error
		err := q.db.View(func(tx *bolt.Tx) error {
			k, v := tx.Bucket(q.bucket).Cursor().First()
			if k == nil {
				return queue.ErrEmpty
			}
			id = binary.BigEndian.Uint64(k)
			data, bad = decode(k, v)
			return nil
		})
		if errors.Is(err, queue.ErrEmpty) {
			// The counters disagree with the file (cannot happen unless
			// the file was edited); trust the file.
			q.entries, q.bytes = 0, 0
			return nil, queue.ErrEmpty
		}
		if err != nil {
			return nil, fmt.Errorf("boltqueue: peek: %w", err)
		}
		if bad == nil {
			return &entry{q: q, id: id, data: data}, nil
		}
		if err := q.quarantineLocked(id, bad); err != nil {
			return nil, err
		}
	}
}

func decode(k, v []byte) ([]byte, error) {
	if len(k) != 8 {
		return nil, fmt.Errorf("boltqueue: bad key %x", k)
	}
	if len(v) <= 4 {
		return nil, fmt.Errorf("boltqueue: entry %d: %d bytes, too short", binary.BigEndian.Uint64(k), len(v))
	}
	if crc32.Checksum(v[4:], castagnoli) != binary.BigEndian.Uint32(v) {
		return nil, fmt.Errorf("boltqueue: entry %d: checksum mismatch", binary.BigEndian.Uint64(k))
	}
	return append([]byte(nil), v[4:]...), nil
}

// remove deletes entry id if it is still queued.
func (q *Queue) remove(id uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	var removed int64 = -1
	err := q.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(q.bucket)
		v := b.Get(idKey(id))
		if v == nil {
			return nil // dropped by DropOldest meanwhile
		}
		removed = int64(len(v))
		return b.Delete(idKey(id))
	})
	if err != nil {
		return fmt.Errorf("boltqueue: remove %d: %w", id, err)
	}
	if removed >= 0 {
		q.entries--
		q.bytes -= removed
	}
	return nil
}

// quarantineLocked moves entry id to the quarantine bucket, trims that
// bucket to KeepQuarantined, counts and reports it. q.mu is held.
func (q *Queue) quarantineLocked(id uint64, why error) error {
	var moved int64 = -1
	err := q.db.Update(func(tx *bolt.Tx) error {
		b, qb, m := tx.Bucket(q.bucket), tx.Bucket(q.quar), tx.Bucket(q.meta)
		v := b.Get(idKey(id))
		if v == nil {
			return nil
		}
		moved = int64(len(v))
		if err := qb.Put(idKey(id), append([]byte(nil), v...)); err != nil {
			return err
		}
		if err := b.Delete(idKey(id)); err != nil {
			return err
		}
		// Counted by hand: Bucket.Stats reads the committed pages, not
		// this transaction's changes (trusting it emptied the bucket).
		kept := 0
		if err := qb.ForEach(func(_, _ []byte) error { kept++; return nil }); err != nil {
			return err
		}
		c := qb.Cursor()
		for k, _ := c.First(); k != nil && kept > q.cfg.KeepQuarantined; k, _ = c.First() {
			if err := c.Delete(); err != nil {
				return err
			}
			kept--
		}
		return putU64(m, metaCorrupt, q.stats.Corrupt+1)
	})
	if err != nil {
		return fmt.Errorf("boltqueue: quarantine %d: %w", id, err)
	}
	if moved >= 0 {
		q.entries--
		q.bytes -= moved
		q.stats.Corrupt++
		if q.cfg.OnCorrupt != nil {
			q.cfg.OnCorrupt(id, why)
		}
	}
	return nil
}

// Stats returns a snapshot of the counters.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.stats
	st.Entries, st.Bytes = q.entries, q.bytes
	return st
}

// Close stops the queue; it closes the file only if Open created it. It is
// safe to call more than once.
func (q *Queue) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	if q.ownDB {
		return q.db.Close()
	}
	return nil
}

// entry is one peeked message.
type entry struct {
	q    *Queue
	id   uint64
	data []byte
}

func (e *entry) Reader() (io.Reader, error) { return bytes.NewReader(e.data), nil }

// Leave keeps the entry at the head of the queue.
func (e *entry) Leave() error { return nil }

// Remove deletes the entry. Like autopaho's own queues it returns nil when
// the queue is left empty: autopaho logs any error from Remove.
func (e *entry) Remove() error { return e.q.remove(e.id) }

// Quarantine moves the entry aside (autopaho calls it when the bytes do not
// parse as an MQTT packet).
func (e *entry) Quarantine() error {
	e.q.mu.Lock()
	defer e.q.mu.Unlock()
	if e.q.closed {
		return ErrClosed
	}
	return e.q.quarantineLocked(e.id, errors.New("boltqueue: rejected by the consumer"))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func idKey(id uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], id)
	return k[:]
}

func getU64(b *bolt.Bucket, k []byte) uint64 {
	v := b.Get(k)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func putU64(b *bolt.Bucket, k []byte, v uint64) error {
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], v)
	return b.Put(k, buf[:])
}
