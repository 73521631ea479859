package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// pgStore keeps the fleet in PostgreSQL (--fleet-db postgres://…), shared
// by managers that run side by side. Documents (a device, a command, a
// rollout, a layer) are the same JSON as in bbolt, one row each; what
// managers contend on is a row and its lock:
//
//   - a device's row is locked (SELECT … FOR UPDATE) by whatever changes
//     it, so two managers' updates of one device serialize;
//   - records are unique on (device, seq): a redelivered record, whichever
//     manager gets it, is an INSERT … ON CONFLICT DO NOTHING that stores
//     nothing;
//   - counters are sharded by device (pgCounterShards rows a name) so
//     concurrent ingests do not queue on one row;
//   - retention and config layers take advisory locks: one sweep, one
//     layer change at a time, fleet-wide.
//
// A device's stored-record count is a column beside its document, kept by
// ingest and retention in SQL; the document's copy is ignored.
type pgStore struct {
	pool  *pgxpool.Pool
	queue pgIngestQueue // ingest calls waiting for a shared transaction
}

// pgCounterShards is how many rows each counter is spread over; ingest
// adds to its device's shard and retention to pgSweepShard.
const (
	pgCounterShards = 32
	pgSweepShard    = -1
)

// Advisory lock keys (pg_advisory_xact_lock): arbitrary, fixed, and
// distinct from anything else one database is likely to hold.
const (
	pgLockSchema int64 = 0x706c66_0001 + iota
	pgLockSweep
	pgLockLayers
)

// pgSchema is the schema's migrations, applied in order once each; the
// fleet_schema table records how many ran. Append, never edit.
var pgSchema = []string{
	`CREATE TABLE fleet_store_info (id text PRIMARY KEY);
	CREATE TABLE fleet_devices (id text COLLATE "C" PRIMARY KEY, doc bytea NOT NULL, stored bigint NOT NULL DEFAULT 0);
	CREATE TABLE fleet_records (n bigserial PRIMARY KEY, device text NOT NULL, seq bigint, ingested_at bigint NOT NULL, line bytea NOT NULL, UNIQUE (device, seq));
	CREATE INDEX fleet_records_ingested_at ON fleet_records (ingested_at);
	CREATE TABLE fleet_seq_floor (device text PRIMARY KEY, floor bigint NOT NULL);
	CREATE TABLE fleet_counters (name text, shard int, value bigint NOT NULL, PRIMARY KEY (name, shard));
	CREATE TABLE fleet_commands (device text COLLATE "C", id text COLLATE "C", doc bytea NOT NULL, PRIMARY KEY (device, id));
	CREATE TABLE fleet_rollouts (id text COLLATE "C" PRIMARY KEY, doc bytea NOT NULL);
	CREATE TABLE fleet_configs (scope text PRIMARY KEY, doc bytea NOT NULL);
	CREATE TABLE fleet_artifacts (id text COLLATE "C" PRIMARY KEY, doc bytea NOT NULL);
	CREATE TABLE fleet_routercalib (device text PRIMARY KEY, doc bytea NOT NULL);
	CREATE TABLE fleet_shadow_graded (key bytea PRIMARY KEY);`,
	// The device count as a counter, kept where devices are created: a
	// count(*) of fleet_devices scanned the table on every new device's
	// status, quadratic in a fleet's first connection storm.
	`INSERT INTO fleet_counters SELECT 'devices', -2, count(*) FROM fleet_devices;`,
}

// openPGStore connects to url and creates or migrates the schema. Managers
// starting together migrate one at a time (an advisory lock).
func openPGStore(ctx context.Context, url string) (*pgStore, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("fleet db: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgx's default (the CPU count, at least 4) would queue ingest
		// workers and a rollout step's parallel sends behind each other.
		cfg.MaxConns = 32
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("fleet db: %w", err)
	}
	s := &pgStore{pool: pool}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("fleet db %s: %w", cfg.ConnConfig.Host, err)
	}
	return s, nil
}

func (s *pgStore) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgLockSchema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS fleet_schema (version int NOT NULL)`); err != nil {
			return err
		}
		var v int
		err := tx.QueryRow(ctx, `SELECT version FROM fleet_schema`).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			_, err = tx.Exec(ctx, `INSERT INTO fleet_schema VALUES (0)`)
		}
		if err != nil {
			return err
		}
		if v > len(pgSchema) {
			return fmt.Errorf("schema version %d is newer than this cloud's %d", v, len(pgSchema))
		}
		for ; v < len(pgSchema); v++ {
			if _, err := tx.Exec(ctx, pgSchema[v]); err != nil {
				return fmt.Errorf("migration %d: %w", v+1, err)
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE fleet_schema SET version = $1`, v); err != nil {
			return err
		}
		var id [16]byte
		_, _ = rand.Read(id[:])
		_, err = tx.Exec(ctx, `INSERT INTO fleet_store_info SELECT $1 WHERE NOT EXISTS (SELECT 1 FROM fleet_store_info)`, hex.EncodeToString(id[:]))
		return err
	})
}

// pgTimeout bounds one store call: a database that stops answering fails
// the call (the device resends, the API answers 500) instead of hanging.
const pgTimeout = 30 * time.Second

func (s *pgStore) tx(fn func(ctx context.Context, tx pgx.Tx) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), pgTimeout)
	defer cancel()
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return fn(ctx, tx) })
}

func (s *pgStore) close() error { s.pool.Close(); return nil }

func (s *pgStore) id() (string, error) {
	var id string
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT id FROM fleet_store_info`).Scan(&id)
	})
	return id, err
}

func shardOf(dev string) int {
	h := fnv.New32a()
	h.Write([]byte(dev))
	return int(h.Sum32() % pgCounterShards)
}

// addCounters adds deltas (name → delta) to shard.
func addCounters(ctx context.Context, tx pgx.Tx, shard int, deltas map[string]int64) error {
	names := make([]string, 0, len(deltas))
	for n, d := range deltas {
		if d != 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names) // one lock order for every caller
	vals := make([]int64, len(names))
	for i, n := range names {
		vals[i] = deltas[n]
	}
	// One statement for every name; its rows are locked in the sorted order.
	_, err := tx.Exec(ctx, `INSERT INTO fleet_counters
		SELECT t.name, $2, t.delta FROM unnest($1::text[], $3::bigint[]) WITH ORDINALITY AS t(name, delta, i) ORDER BY t.i
		ON CONFLICT (name, shard) DO UPDATE SET value = fleet_counters.value + excluded.value`, names, shard, vals)
	return err
}

func counter(ctx context.Context, tx pgx.Tx, name string) (uint64, error) {
	var v int64
	err := tx.QueryRow(ctx, `SELECT coalesce(sum(value), 0)::bigint FROM fleet_counters WHERE name = $1`, name).Scan(&v)
	return uint64(max(v, 0)), err
}

// lockDevice loads device id for update, creating it (first seen now)
// when create is set; nil when it does not exist and create is not set.
// created says whether this call made it.
func lockDevice(ctx context.Context, tx pgx.Tx, id string, now time.Time, create bool) (dev *Device, created bool, err error) {
	if create {
		doc, err := json.Marshal(&Device{ID: id, FirstSeen: now})
		if err != nil {
			return nil, false, err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO fleet_devices (id, doc) VALUES ($1, $2) ON CONFLICT DO NOTHING`, id, doc)
		if err != nil {
			return nil, false, err
		}
		if created = tag.RowsAffected() == 1; created {
			if err := addCounters(ctx, tx, shardOf(id), map[string]int64{"devices": 1}); err != nil {
				return nil, false, err
			}
		}
	}
	var doc []byte
	var stored int64
	err = tx.QueryRow(ctx, `SELECT doc, stored FROM fleet_devices WHERE id = $1 FOR UPDATE`, id).Scan(&doc, &stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	dev, err = decodeDevice(id, doc, stored)
	return dev, created, err
}

func decodeDevice(id string, doc []byte, stored int64) (*Device, error) {
	dev := new(Device)
	if err := json.Unmarshal(doc, dev); err != nil {
		return nil, fmt.Errorf("device %s: %w: %v", id, errCorrupt, err)
	}
	dev.ID = id
	dev.Telemetry.Stored = uint64(max(stored, 0))
	return dev, nil
}

// saveDevice writes dev's document; its stored count is the column's.
func saveDevice(ctx context.Context, tx pgx.Tx, dev *Device) error {
	doc, err := json.Marshal(dev)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE fleet_devices SET doc = $2 WHERE id = $1`, dev.ID, doc)
	return err
}

// Ingest commits are shared across devices. A transaction costs the same
// nine round trips and one WAL flush whether it stores one device's batch
// or sixty-four devices' batches, and at 1,000 batches/s PostgreSQL's CPU
// per transaction was the fleet's limit (docs/fleet-cloud.md). So ingest
// calls queue, and at most pgIngestTxns transactions take from the queue at
// a time, each everything waiting (up to pgIngestGroupMax batches): a lone
// batch commits at once, as before, and under load the group grows with
// the wait instead of the queue of transactions. Two in flight: one fills
// while the other commits. At 10,000 devices every 10 s on two cores, two
// gave groups of 9.8 batches and 0.75 ms of PostgreSQL CPU a batch, four
// gave 5.6 and 0.97 ms (docs/fleet-cloud.md).
const (
	pgIngestTxns        = 2
	pgIngestGroupMax    = 64
	pgIngestGroupRecord = 4096 // records in one group's INSERT, at most (one batch may exceed it alone)
)

// pgIngestQueue holds the ingest calls waiting for a group transaction.
type pgIngestQueue struct {
	mu      sync.Mutex
	waiting []*pgIngestCall
	running int // goroutines committing groups
	// groups and batches count committed group transactions and the
	// batches they held (BenchmarkIngest reports batches per transaction).
	groups, batches atomic.Int64
}

// pgIngestCall is one ingest call: its arguments, then its result.
type pgIngestCall struct {
	id         string
	b          *fleetwire.TelemetryBatch
	now        time.Time
	maxRecords int
	maxAge     time.Duration
	res        ingestResult
	err        error
	done       chan struct{}
}

func (s *pgStore) ingest(id string, b *fleetwire.TelemetryBatch, now time.Time, maxRecords int, maxAge time.Duration) (ingestResult, error) {
	c := &pgIngestCall{id: id, b: b, now: now, maxRecords: maxRecords, maxAge: maxAge, done: make(chan struct{})}
	q := &s.queue
	q.mu.Lock()
	q.waiting = append(q.waiting, c)
	start := q.running < pgIngestTxns
	if start {
		q.running++
	}
	q.mu.Unlock()
	if start {
		go s.commitQueued()
	}
	<-c.done
	return c.res, c.err
}

// commitQueued commits groups from the queue until it is empty.
func (s *pgStore) commitQueued() {
	for {
		group := s.queue.take()
		if group == nil {
			return
		}
		s.commitGroup(group)
	}
}

// take removes the next group from the queue: calls in arrival order, one
// per device (a device's second batch waits for the next group, so each
// device's row is read and written once per transaction), up to the
// group's bounds. nil, with the goroutine counted out, when none wait.
func (q *pgIngestQueue) take() []*pgIngestCall {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 {
		q.running--
		return nil
	}
	var group []*pgIngestCall
	in := make(map[string]bool)
	records := 0
	rest := q.waiting[:0]
	for _, c := range q.waiting {
		fits := len(group) == 0 || len(group) < pgIngestGroupMax && records+len(c.b.Records) <= pgIngestGroupRecord
		if fits && !in[c.id] {
			in[c.id] = true
			records += len(c.b.Records)
			group = append(group, c)
		} else {
			rest = append(rest, c)
		}
	}
	clear(q.waiting[len(rest):])
	q.waiting = rest
	return group
}

// commitGroup stores a group in one transaction, runs retention if it
// asks for it, and wakes its callers. If the transaction fails, each call
// is tried alone, so one bad batch (or a deadlock with a retention sweep)
// costs the others a retry, not an error. A retention sweep that fails
// after the commit fails only the call that ran it, as when each batch
// had its own transaction: that batch is not acknowledged and comes again
// as duplicates.
func (s *pgStore) commitGroup(group []*pgIngestCall) {
	sweep, err := s.ingestGroup(group)
	if err != nil && len(group) > 1 {
		for _, c := range group {
			sweep, c.err = s.ingestGroup([]*pgIngestCall{c})
			s.sweepAfter(sweep)
		}
	} else {
		for _, c := range group {
			c.err = err
		}
		s.sweepAfter(sweep)
	}
	for _, c := range group {
		close(c.done)
	}
}

// sweepAfter runs retention for c's bounds, after its transaction's commit
// and in its own: a sweep that waited on device rows while holding a
// group's would deadlock with a group of other devices doing the same.
// Its count goes to c; the manager adds the calls' counts up.
func (s *pgStore) sweepAfter(c *pgIngestCall) {
	if c != nil {
		c.res.deleted, c.err = s.pruneLimit(c.now, c.maxRecords, c.maxAge, 10_000)
	}
}

// ingestGroup stores the batches of distinct devices in one transaction,
// each with the result it would have alone. sweep is the call whose bounds
// the stored records now exceed (the group's last), nil when none do.
func (s *pgStore) ingestGroup(group []*pgIngestCall) (sweep *pgIngestCall, err error) {
	// Device rows are locked in id order, as setLayer takes them, so two
	// groups cannot deadlock each other or it. The retention sweep does
	// not; it runs after the commit, outside the group's transaction.
	group = slices.Clone(group)
	slices.SortFunc(group, func(a, b *pgIngestCall) int { return strings.Compare(a.id, b.id) })
	ids := make([]string, len(group))
	for i, c := range group {
		ids[i] = c.id
	}
	last := group[len(group)-1]
	var over bool
	err = s.tx(func(ctx context.Context, tx pgx.Tx) error {
		over = false
		devs, err := lockDevices(ctx, tx, group)
		if err != nil {
			return err
		}
		// Records retention deleted are remembered by their device's
		// highest deleted seq: a redelivery of one is a duplicate, not a
		// new record.
		floors := make(map[string]int64, len(group))
		rows, err := tx.Query(ctx, `SELECT device, floor FROM fleet_seq_floor WHERE device = ANY($1)`, ids)
		if err != nil {
			return err
		}
		var dev string
		var floor int64
		_, err = pgx.ForEachRow(rows, []any{&dev, &floor}, func() error { floors[dev] = floor; return nil })
		if err != nil {
			return err
		}
		var devCol []string
		var seqCol, atCol []int64
		var lineCol [][]byte
		for _, c := range group {
			fl, ok := floors[c.id]
			if !ok {
				fl = math.MinInt64
			}
			for i := range c.b.Records {
				r := &c.b.Records[i]
				c.res.upTo = max(c.res.upTo, r.Seq)
				if int64(r.Seq) <= fl {
					continue
				}
				line, err := json.Marshal(ExportedRecord{DeviceID: c.id, Record: *r, IngestedAt: c.now})
				if err != nil {
					return err
				}
				devCol, seqCol, atCol, lineCol = append(devCol, c.id), append(seqCol, int64(r.Seq)), append(atCol, c.now.UnixNano()), append(lineCol, line)
			}
		}
		stored := make(map[string]int, len(group))
		if len(seqCol) > 0 {
			rows, err := tx.Query(ctx, `INSERT INTO fleet_records (device, seq, ingested_at, line)
				SELECT t.device, t.seq, t.at, t.line FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bytea[]) WITH ORDINALITY AS t(device, seq, at, line, i) ORDER BY t.i
				ON CONFLICT (device, seq) DO NOTHING RETURNING device, seq`, devCol, seqCol, atCol, lineCol)
			if err != nil {
				return err
			}
			var seq int64
			_, err = pgx.ForEachRow(rows, []any{&dev, &seq}, func() error {
				stored[dev]++
				d := devs[dev]
				d.Telemetry.LastSeq = max(d.Telemetry.LastSeq, uint64(seq))
				return nil
			})
			if err != nil {
				return err
			}
		}
		docs, adds := make([][]byte, len(group)), make([]int64, len(group))
		var total struct{ stored, duplicates, devices int }
		for i, c := range group {
			c.res.stored = stored[c.id]
			c.res.duplicates = len(c.b.Records) - c.res.stored
			total.stored += c.res.stored
			total.duplicates += c.res.duplicates
			if c.res.newDevice {
				total.devices++
			}
			noteBatch(devs[c.id], c.b, c.res, c.now)
			if docs[i], err = json.Marshal(devs[c.id]); err != nil {
				return err
			}
			adds[i] = int64(c.res.stored)
		}
		// The documents and the record counts in one update, one new row
		// version per device.
		if _, err := tx.Exec(ctx, `UPDATE fleet_devices d SET doc = t.doc, stored = d.stored + t.stored
				FROM unnest($1::text[], $2::bytea[], $3::bigint[]) AS t(id, doc, stored) WHERE d.id = t.id`, ids, docs, adds); err != nil {
			return err
		}
		if err := addCounters(ctx, tx, shardOf(group[0].id), map[string]int64{
			"stored": int64(total.stored), "ingested": int64(total.stored), "duplicates": int64(total.duplicates),
			"devices": int64(total.devices),
		}); err != nil {
			return err
		}
		// Whether retention has work, read in the group's transaction: the
		// sweep's own transaction (an advisory lock, the counter, the
		// delete) then runs only when records are over the bound or too
		// old, not after every group.
		var all, oldest int64
		if err := tx.QueryRow(ctx, `SELECT
				(SELECT coalesce(sum(value), 0)::bigint FROM fleet_counters WHERE name = 'stored'),
				(SELECT coalesce(min(ingested_at), 0) FROM fleet_records)`).Scan(&all, &oldest); err != nil {
			return err
		}
		over = all > int64(last.maxRecords) || last.maxAge > 0 && all > 0 && oldest < last.now.Add(-last.maxAge).UnixNano()
		return nil
	})
	if err != nil {
		for _, c := range group {
			c.res = ingestResult{}
		}
		return nil, err
	}
	s.queue.groups.Add(1)
	s.queue.batches.Add(int64(len(group)))
	if over {
		return last, nil
	}
	return nil, nil
}

// lockDevices creates the group's devices that do not exist yet (first
// seen at their call's time), then loads and locks every one, in id order
// (group is sorted). Each call's newDevice says whether it made its device.
func lockDevices(ctx context.Context, tx pgx.Tx, group []*pgIngestCall) (map[string]*Device, error) {
	ids := make([]string, len(group))
	fresh := make([][]byte, len(group))
	for i, c := range group {
		c.res = ingestResult{}
		ids[i] = c.id
		doc, err := json.Marshal(&Device{ID: c.id, FirstSeen: c.now})
		if err != nil {
			return nil, err
		}
		fresh[i] = doc
	}
	rows, err := tx.Query(ctx, `INSERT INTO fleet_devices (id, doc)
		SELECT t.id, t.doc FROM unnest($1::text[], $2::bytea[]) WITH ORDINALITY AS t(id, doc, i) ORDER BY t.i
		ON CONFLICT DO NOTHING RETURNING id`, ids, fresh)
	if err != nil {
		return nil, err
	}
	created := make(map[string]bool)
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { created[id] = true; return nil }); err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, `SELECT id, doc, stored FROM fleet_devices WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids)
	if err != nil {
		return nil, err
	}
	devs := make(map[string]*Device, len(group))
	var doc []byte
	var stored int64
	_, err = pgx.ForEachRow(rows, []any{&id, &doc, &stored}, func() error {
		d, err := decodeDevice(id, doc, stored)
		devs[id] = d
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, c := range group {
		if devs[c.id] == nil {
			return nil, fmt.Errorf("device %s: row missing after insert", c.id)
		}
		c.res.newDevice = created[c.id]
	}
	return devs, nil
}

func (s *pgStore) prune(now time.Time, maxRecords int, maxAge time.Duration) (int, error) {
	return s.pruneLimit(now, maxRecords, maxAge, 100_000)
}

// pruneLimit deletes the oldest records (by ingest order) while there are
// more than maxRecords, and those older than maxAge, at most limit of
// them. One sweep runs at a time across managers; a sweep that finds the
// lock held leaves the work to the holder.
func (s *pgStore) pruneLimit(now time.Time, maxRecords int, maxAge time.Duration, limit int) (int, error) {
	deleted := 0
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		deleted = 0
		var got bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, pgLockSweep).Scan(&got); err != nil || !got {
			return err
		}
		stored, err := counter(ctx, tx, "stored")
		if err != nil {
			return err
		}
		excess := int64(0)
		if stored > uint64(maxRecords) {
			excess = int64(min(stored-uint64(maxRecords), uint64(limit)))
		}
		cutoff := int64(math.MinInt64)
		if maxAge > 0 {
			cutoff = now.Add(-maxAge).UnixNano()
		}
		err = tx.QueryRow(ctx, `WITH victims AS (
				(SELECT n FROM fleet_records ORDER BY n LIMIT $1)
				UNION
				(SELECT n FROM fleet_records WHERE ingested_at < $2 ORDER BY n LIMIT $3)
			), del AS (
				DELETE FROM fleet_records r USING (SELECT n FROM victims ORDER BY n LIMIT $3) v WHERE r.n = v.n
				RETURNING r.device, r.seq
			), per AS (
				SELECT device, count(*) AS k, max(seq) AS top FROM del GROUP BY device
			), devs AS (
				UPDATE fleet_devices d SET stored = greatest(d.stored - per.k, 0) FROM per WHERE d.id = per.device
			), floors AS (
				INSERT INTO fleet_seq_floor SELECT device, top FROM per WHERE top IS NOT NULL
				ON CONFLICT (device) DO UPDATE SET floor = greatest(fleet_seq_floor.floor, excluded.floor)
			)
			SELECT count(*) FROM del`, excess, cutoff, limit).Scan(&deleted)
		if err != nil || deleted == 0 {
			return err
		}
		return addCounters(ctx, tx, pgSweepShard, map[string]int64{"stored": -int64(deleted), "deleted": int64(deleted)})
	})
	return deleted, err
}

// errArchiveNeedsBolt: the Parquet archive moves records out of fleet.db;
// with PostgreSQL, retention deletes them (Config.Validate refuses both).
var errArchiveNeedsBolt = errors.New("the telemetry archive (--fleet-archive-dir) works with the embedded bbolt store only")

func (s *pgStore) archiveOnce(string, time.Time, time.Time, int) (int, int64, error) {
	return 0, 0, errArchiveNeedsBolt
}

func (s *pgStore) counts() (Counts, error) {
	var c Counts
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		c = Counts{}
		rows, err := tx.Query(ctx, `SELECT name, sum(value)::bigint FROM fleet_counters GROUP BY name`)
		if err != nil {
			return err
		}
		var name string
		var v int64
		_, err = pgx.ForEachRow(rows, []any{&name, &v}, func() error {
			v = max(v, 0)
			if name == "devices" {
				c.Devices = int(v)
			} else if dst := map[string]*uint64{"stored": &c.Stored, "ingested": &c.Ingested, "duplicates": &c.Duplicates, "deleted": &c.Deleted}[name]; dst != nil {
				*dst = uint64(v)
			}
			return nil
		})
		return err
	})
	return c, err
}

func (s *pgStore) export(since time.Time, dev string, emit func(line []byte) error) error {
	from := int64(math.MinInt64)
	if !since.IsZero() {
		from = since.UnixNano()
	}
	after := int64(0)
	for {
		var lines [][]byte
		err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
			lines = lines[:0]
			rows, err := tx.Query(ctx, `SELECT n, line FROM fleet_records
				WHERE n > $1 AND ingested_at >= $2 AND ($3 = '' OR device = $3) ORDER BY n LIMIT $4`, after, from, dev, exportChunk)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var line []byte
				if err := rows.Scan(&after, &line); err != nil {
					return err
				}
				lines = append(lines, line)
			}
			return rows.Err()
		})
		if err != nil {
			return err
		}
		for _, l := range lines {
			if err := emit(l); err != nil {
				return err
			}
		}
		if len(lines) < exportChunk {
			return nil
		}
	}
}

func (s *pgStore) updateDevice(id string, now time.Time, create bool, fn func(*Device) error) (*Device, error) {
	var out *Device
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		out = nil
		dev, _, err := lockDevice(ctx, tx, id, now, create)
		if err != nil || dev == nil {
			return err
		}
		if err := fn(dev); err != nil {
			return err
		}
		cp := *dev
		out = &cp
		return saveDevice(ctx, tx, dev)
	})
	return out, err
}

// loadLayers reads the config layers as of the statement.
func loadLayers(ctx context.Context, tx pgx.Tx) (map[string]*ConfigLayer, error) {
	out := map[string]*ConfigLayer{}
	rows, err := tx.Query(ctx, `SELECT scope, doc FROM fleet_configs`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var scope string
		var doc []byte
		if err := rows.Scan(&scope, &doc); err != nil {
			return nil, err
		}
		l := new(ConfigLayer)
		if err := json.Unmarshal(doc, l); err != nil {
			return nil, fmt.Errorf("config layer %s: %w: %v", scope, errCorrupt, err)
		}
		out[scope] = l
	}
	return out, rows.Err()
}

func (s *pgStore) layers() (map[string]*ConfigLayer, error) {
	var out map[string]*ConfigLayer
	err := s.tx(func(ctx context.Context, tx pgx.Tx) (err error) { out, err = loadLayers(ctx, tx); return err })
	return out, err
}

// remergeLoaded is remergeTx on the layers as of now: the device's row is
// locked first, so a layer change either committed before (and is read
// here) or waits for this row and re-merges it after.
func remergeLoaded(ctx context.Context, tx pgx.Tx, d *Device) (*Device, bool, error) {
	layers, err := loadLayers(ctx, tx)
	if err != nil {
		return nil, false, err
	}
	changed := remerge(d, layers)
	cp := *d
	return &cp, changed, nil
}

func (s *pgStore) updateDeviceConfig(id string, now time.Time, create bool, fn func(*Device) error) (dev *Device, changed bool, err error) {
	err = s.tx(func(ctx context.Context, tx pgx.Tx) error {
		dev, changed = nil, false
		d, _, err := lockDevice(ctx, tx, id, now, create)
		if err != nil || d == nil {
			return err
		}
		if err := fn(d); err != nil {
			return err
		}
		if dev, changed, err = remergeLoaded(ctx, tx, d); err != nil {
			return err
		}
		cmds, err := loadCommands(ctx, tx, id)
		if err != nil {
			return err
		}
		dev.PendingCommands = pendingOf(cmds[id])
		return saveDevice(ctx, tx, d)
	})
	return dev, changed, err
}

func (s *pgStore) setLayer(scope string, u ConfigUpdate, now time.Time) (*ConfigLayer, []*Device, error) {
	var layer *ConfigLayer
	var changed []*Device
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		layer, changed = nil, nil
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgLockLayers); err != nil {
			return err
		}
		layers, err := loadLayers(ctx, tx)
		if err != nil {
			return err
		}
		l := applyLayer(layers, scope, u, now)
		if len(l.Values) == 0 {
			_, err = tx.Exec(ctx, `DELETE FROM fleet_configs WHERE scope = $1`, scope)
		} else {
			var doc []byte
			if doc, err = json.Marshal(l); err == nil {
				_, err = tx.Exec(ctx, `INSERT INTO fleet_configs VALUES ($1, $2) ON CONFLICT (scope) DO UPDATE SET doc = excluded.doc`, scope, doc)
			}
		}
		if err != nil {
			return err
		}
		devs, err := queryDevices(ctx, tx, `SELECT id, doc, stored FROM fleet_devices ORDER BY id FOR UPDATE`)
		if err != nil {
			return err
		}
		for _, d := range devs {
			if remerge(d, layers) {
				if err := saveDevice(ctx, tx, d); err != nil {
					return err
				}
				cp := *d
				changed = append(changed, &cp)
			}
		}
		layer = l
		return nil
	})
	return layer, changed, err
}

func queryDevices(ctx context.Context, tx pgx.Tx, sql string, args ...any) ([]*Device, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Device
	for rows.Next() {
		var id string
		var doc []byte
		var stored int64
		if err := rows.Scan(&id, &doc, &stored); err != nil {
			return nil, err
		}
		d, err := decodeDevice(id, doc, stored)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

func (s *pgStore) device(id string) (*Device, error) {
	var dev *Device
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		devs, err := queryDevices(ctx, tx, `SELECT id, doc, stored FROM fleet_devices WHERE id = $1`, id)
		if err != nil || len(devs) == 0 {
			return err
		}
		dev = devs[0]
		cmds, err := loadCommands(ctx, tx, id)
		dev.Commands = cmds[id]
		dev.PendingCommands = pendingOf(dev.Commands)
		return err
	})
	return dev, err
}

func (s *pgStore) devices() ([]*Device, error) { return s.listDevices(false) }

func (s *pgStore) devicesWithCommands() ([]*Device, error) { return s.listDevices(true) }

func (s *pgStore) listDevices(withCommands bool) ([]*Device, error) {
	var out []*Device
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		var err error
		if out, err = queryDevices(ctx, tx, `SELECT id, doc, stored FROM fleet_devices ORDER BY id`); err != nil {
			return err
		}
		cmds, err := loadCommands(ctx, tx, "")
		for _, d := range out {
			d.PendingCommands = pendingOf(cmds[d.ID])
			if withCommands {
				d.Commands = cmds[d.ID]
			}
		}
		return err
	})
	return out, err
}

// loadCommands lists one device's commands (all devices' for dev ""),
// newest first, by device.
func loadCommands(ctx context.Context, tx pgx.Tx, dev string) (map[string][]CommandState, error) {
	rows, err := tx.Query(ctx, `SELECT device, id, doc FROM fleet_commands WHERE $1 = '' OR device = $1 ORDER BY device, id`, dev)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]CommandState{}
	for rows.Next() {
		var d, id string
		var doc []byte
		if err := rows.Scan(&d, &id, &doc); err != nil {
			return nil, err
		}
		var cs CommandState
		if err := json.Unmarshal(doc, &cs); err != nil {
			return nil, fmt.Errorf("command %s/%s: %w: %v", d, id, errCorrupt, err)
		}
		out[d] = append(out[d], cs)
	}
	for _, cmds := range out {
		sort.SliceStable(cmds, func(i, j int) bool { return cmds[i].IssuedAt.After(cmds[j].IssuedAt) })
	}
	return out, rows.Err()
}

func (s *pgStore) addCommand(cs CommandState, keep int) (added bool, err error) {
	doc, err := json.Marshal(cs)
	if err != nil {
		return false, err
	}
	err = s.tx(func(ctx context.Context, tx pgx.Tx) error {
		added = false
		// The device's row lock orders this with its other commands' trims.
		if _, _, err := lockDevice(ctx, tx, cs.DeviceID, cs.UpdatedAt, true); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO fleet_commands VALUES ($1, $2, $3) ON CONFLICT (device, id) DO NOTHING`, cs.DeviceID, cs.ID, doc)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		added = true
		all, err := loadCommands(ctx, tx, cs.DeviceID)
		if err != nil {
			return err
		}
		if drop := trimCommands(all[cs.DeviceID], keep); len(drop) > 0 {
			_, err = tx.Exec(ctx, `DELETE FROM fleet_commands WHERE device = $1 AND id = ANY($2)`, cs.DeviceID, drop)
		}
		return err
	})
	return added, err
}

func (s *pgStore) commandResult(dev string, r *fleetwire.CommandResult, now time.Time) (bool, error) {
	var found bool
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		found = false
		var doc []byte
		err := tx.QueryRow(ctx, `SELECT doc FROM fleet_commands WHERE device = $1 AND id = $2 FOR UPDATE`, dev, r.ID).Scan(&doc)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		var cs CommandState
		if err := json.Unmarshal(doc, &cs); err != nil {
			return fmt.Errorf("command %s/%s: %w: %v", dev, r.ID, errCorrupt, err)
		}
		found = true
		finishCommand(&cs, r, now)
		if doc, err = json.Marshal(cs); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE fleet_commands SET doc = $3 WHERE device = $1 AND id = $2`, dev, r.ID, doc)
		return err
	})
	return found, err
}

func (s *pgStore) command(dev, id string) (*CommandState, error) {
	var cs *CommandState
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		var doc []byte
		err := tx.QueryRow(ctx, `SELECT doc FROM fleet_commands WHERE device = $1 AND id = $2`, dev, id).Scan(&doc)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		cs = new(CommandState)
		return json.Unmarshal(doc, cs)
	})
	return cs, err
}

// putDoc and getDoc keep one JSON document by key in table (a fixed name
// from this file, never input).
func (s *pgStore) putDoc(table, key string, v any) error {
	doc, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.tx(func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+table+` VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET doc = excluded.doc`, key, doc)
		return err
	})
}

func (s *pgStore) getDoc(table, key string, into any) (bool, error) {
	var doc []byte
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT doc FROM `+table+` WHERE id = $1`, key).Scan(&doc)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(doc, into); err != nil {
		return false, fmt.Errorf("%s %s: %w: %v", table, key, errCorrupt, err)
	}
	return true, nil
}

// allDocs decodes every document of table in key order; one that does not
// decode fails the call unless skipBad.
func allDocs[T any](s *pgStore, table string, skipBad bool) ([]*T, error) {
	var out []*T
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		out = nil
		rows, err := tx.Query(ctx, `SELECT id, doc FROM `+table+` ORDER BY id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var doc []byte
			if err := rows.Scan(&id, &doc); err != nil {
				return err
			}
			v := new(T)
			if err := json.Unmarshal(doc, v); err != nil {
				if skipBad {
					continue
				}
				return fmt.Errorf("%s %s: %w: %v", table, id, errCorrupt, err)
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	return out, err
}

func (s *pgStore) putRollout(r *Rollout) error { return s.putDoc("fleet_rollouts", r.ID, r) }

func (s *pgStore) rollout(id string) (*Rollout, error) {
	r := new(Rollout)
	ok, err := s.getDoc("fleet_rollouts", id, r)
	if !ok {
		r = nil
	}
	return r, err
}

func (s *pgStore) rollouts() ([]*Rollout, error) { return allDocs[Rollout](s, "fleet_rollouts", false) }

// updateRollout runs fn on the rollout with its row locked, so managers
// that step the same rollout take turns and each sees the last one's
// state.
func (s *pgStore) updateRollout(id string, fn func(*Rollout) error) error {
	return s.tx(func(ctx context.Context, tx pgx.Tx) error {
		var doc []byte
		err := tx.QueryRow(ctx, `SELECT doc FROM fleet_rollouts WHERE id = $1 FOR UPDATE`, id).Scan(&doc)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w %q", ErrUnknownRollout, id)
		}
		if err != nil {
			return err
		}
		return rewriteRollout(ctx, tx, id, doc, fn)
	})
}

// rewriteRollout runs fn on the rollout doc read under a row lock and
// stores the result in the same transaction.
func rewriteRollout(ctx context.Context, tx pgx.Tx, id string, doc []byte, fn func(*Rollout) error) error {
	r := new(Rollout)
	if err := json.Unmarshal(doc, r); err != nil {
		return fmt.Errorf("rollout %s: %w: %v", id, errCorrupt, err)
	}
	if err := fn(r); err != nil {
		return err
	}
	doc, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE fleet_rollouts SET doc = $2 WHERE id = $1`, id, doc)
	return err
}

// claimRollout locks the rollout's row for the step, skipping a row
// another manager has locked: that one is stepping it now, and a second
// step would plan from the same state and send the same stage twice. The
// step's sends run on other connections while the row stays locked; a
// manager that dies mid-step loses its lock with its connection, and the
// next step re-plans from the last stored state (its update commands have
// fixed ids: updateCommandID).
func (s *pgStore) claimRollout(id string, fn func(*Rollout) error) (claimed bool, err error) {
	err = s.tx(func(ctx context.Context, tx pgx.Tx) error {
		claimed = false
		var doc []byte
		err := tx.QueryRow(ctx, `SELECT doc FROM fleet_rollouts WHERE id = $1 FOR UPDATE SKIP LOCKED`, id).Scan(&doc)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		claimed = true
		return rewriteRollout(ctx, tx, id, doc, fn)
	})
	return claimed, err
}

func (s *pgStore) putArtifact(info *ArtifactInfo) error {
	return s.putDoc("fleet_artifacts", info.ID, info)
}

func (s *pgStore) artifact(id string) (*ArtifactInfo, error) {
	a := new(ArtifactInfo)
	ok, err := s.getDoc("fleet_artifacts", id, a)
	if !ok {
		a = nil
	}
	return a, err
}

func (s *pgStore) artifacts() ([]*ArtifactInfo, error) {
	return allDocs[ArtifactInfo](s, "fleet_artifacts", true)
}

func (s *pgStore) shadowGraded(key []byte) (bool, error) {
	var done bool
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM fleet_shadow_graded WHERE key = $1)`, key).Scan(&done)
	})
	return done, err
}

func (s *pgStore) storeShadowGrade(device string, key []byte, g fleetwire.ShadowGrade, now time.Time) (dev *Device, changed, stale bool, err error) {
	data, err := json.Marshal(g)
	if err != nil {
		return nil, false, false, err
	}
	line, err := gradeLine(device, data, now)
	if err != nil {
		return nil, false, false, err
	}
	err = s.tx(func(ctx context.Context, tx pgx.Tx) error {
		dev, changed, stale = nil, false, false
		tag, err := tx.Exec(ctx, `INSERT INTO fleet_shadow_graded VALUES ($1) ON CONFLICT DO NOTHING`, key)
		if err != nil || tag.RowsAffected() == 0 {
			return err // graded already (by this manager or another)
		}
		d, _, err := lockDevice(ctx, tx, device, now, true)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO fleet_records (device, seq, ingested_at, line) VALUES ($1, NULL, $2, $3)`, device, now.UnixNano(), line); err != nil {
			return err
		}
		d.Telemetry.Stored++
		countGrade(d, g)
		var window []byte
		err = tx.QueryRow(ctx, `SELECT doc FROM fleet_routercalib WHERE device = $1`, device).Scan(&window)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		stale, err = calibrateWith(d, g, now, func() []byte { return window }, func(v []byte) error {
			_, err := tx.Exec(ctx, `INSERT INTO fleet_routercalib VALUES ($1, $2) ON CONFLICT (device) DO UPDATE SET doc = excluded.doc`, device, v)
			return err
		})
		if err != nil {
			return err
		}
		if dev, changed, err = remergeLoaded(ctx, tx, d); err != nil {
			return err
		}
		if err := saveDevice(ctx, tx, d); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE fleet_devices SET stored = stored + 1 WHERE id = $1`, device); err != nil {
			return err
		}
		return addCounters(ctx, tx, shardOf(device), map[string]int64{"stored": 1})
	})
	return dev, changed, stale, err
}

var _ fleetStore = (*pgStore)(nil)
