package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet/internal/gate"
	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/cloud/fleetapi/archive"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// Manager is the cloud's fleet manager. Open it once per data directory;
// Close it after the HTTP server stops and before the embedded broker does.
type Manager struct {
	cfg    Config
	topics fleetwire.Topics
	log    *slog.Logger
	now    func() time.Time
	st     fleetStore
	bus    bus
	gate   gate.Gate // deliveries in progress, waited for by Close

	stop      chan struct{}
	wg        sync.WaitGroup // the prune and rollout loops
	closeOnce sync.Once
	closeErr  error
	ownsLease bool // Open took cfg.Lease and closes it; a Standby keeps its own

	history statusHistory

	rolloutMu sync.Mutex // serialises rollout steps and state changes

	stored atomic.Int64 // phaseless_fleet_telemetry_records_stored, refreshed after writes
	nDevs  atomic.Int64

	mBatches, mIngested, mDuplicates, mDeleted *metrics.Counter
	mArchived, mArchiveErrors                  *metrics.Counter
	archiveBytes                               atomic.Int64
	mIngestErrors, mSeqReset, mMerged          *metrics.Counter
	mUnknownResults, mPublishErrors            *metrics.Counter
	mDecodeErrors                              *metrics.LabeledCounter
	mShadow                                    *metrics.LabeledCounter

	shadowCh       chan shadowJob // samples waiting for a grader; nil without Config.Shadow
	mIngestSeconds *metrics.Histogram
}

// Open opens (or creates) DataDir/fleet.db, subscribes to the device topics
// and starts reconciling. With an external broker it returns at once and
// connects in the background (Ready says when).
func Open(cfg Config) (*Manager, error) {
	cfg.fillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Lease != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := cfg.Lease.Acquire(ctx)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	var check func(fleetStore) error
	if cfg.Lease != nil {
		check = func(st fleetStore) error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return sameStore(ctx, cfg.Lease, cfg.DataDir, st)
		}
	}
	m, err := open(cfg, check)
	if err != nil && cfg.Lease != nil {
		_ = closeLease(cfg.Lease)
	}
	if m != nil {
		m.ownsLease = true
	}
	return m, err
}

// closeLease gives the lease up and closes its client when it has one.
func closeLease(l Lease) error {
	if c, ok := l.(io.Closer); ok {
		return c.Close()
	}
	return l.Release(context.Background())
}

// open opens the store and, if check (when set) accepts it, the Manager
// on it: check runs before anything reaches devices.
func open(cfg Config, check func(fleetStore) error) (*Manager, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("fleet data dir: %w", err)
	}
	var st fleetStore
	var err error
	if cfg.DB != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		st, err = openPGStore(ctx, cfg.DB)
		cancel()
	} else {
		st, err = openStore(filepath.Join(cfg.DataDir, "fleet.db"))
	}
	if err != nil {
		return nil, err
	}
	if check != nil {
		if err := check(st); err != nil {
			st.close()
			return nil, err
		}
	}
	reg := cfg.Metrics
	m := &Manager{
		cfg: cfg, topics: fleetwire.Topics{Prefix: cfg.Prefix}, log: cfg.Logger, now: cfg.Now, st: st,
		stop:            make(chan struct{}),
		mBatches:        reg.Counter("phaseless_fleet_telemetry_batches_total", "telemetry batches received (redeliveries included)"),
		mIngested:       reg.Counter("phaseless_fleet_telemetry_records_ingested_total", "distinct telemetry records stored"),
		mDuplicates:     reg.Counter("phaseless_fleet_telemetry_duplicates_total", "redelivered telemetry records recognised by (device, seq) and not stored again"),
		mDeleted:        reg.Counter("phaseless_fleet_telemetry_retention_deleted_total", "telemetry records deleted by the retention bound (count or age)"),
		mArchived:       reg.Counter("phaseless_fleet_telemetry_archived_total", "telemetry records moved from the store to the Parquet archive (--fleet-archive-dir)"),
		mArchiveErrors:  reg.Counter("phaseless_fleet_telemetry_archive_errors_total", "archive sweeps that failed (the records stay in the store and are moved by a later sweep)"),
		mIngestErrors:   reg.Counter("phaseless_fleet_telemetry_ingest_errors_total", "telemetry batches not stored because the store failed (not acknowledged; the device resends)"),
		mSeqReset:       reg.Counter("phaseless_fleet_telemetry_seq_index_resets_total", "corrupt per-device seq indexes that were reset"),
		mMerged:         reg.Counter("phaseless_fleet_telemetry_seq_gaps_merged_total", "old seq gaps folded into the seen set by its size bound"),
		mUnknownResults: reg.Counter("phaseless_fleet_command_results_unknown_total", "command results for commands this cloud does not know"),
		mPublishErrors:  reg.Counter("phaseless_fleet_publish_errors_total", "publishes to devices that failed (retried by reconcile)"),
		mDecodeErrors:   reg.LabeledCounter("phaseless_fleet_decode_errors_total", "device messages that did not decode or were refused, by topic suffix", "suffix"),
		mShadow:         reg.LabeledCounter("phaseless_fleet_shadow_samples_total", "devices' shadow samples by outcome: passed, failed, cloud_error, duplicate, dropped (queue full), no_grader, malformed", "outcome"),
		mIngestSeconds:  reg.Histogram("phaseless_fleet_telemetry_ingest_seconds", "time to store one telemetry batch (bbolt commit included)", metrics.DefLatencyBuckets),
	}
	// A registry keeps the first function registered under a name, so a
	// Standby's later Managers report through the one it points at now.
	cur := func() *Manager {
		if cfg.live != nil {
			return cfg.live.Load()
		}
		return m
	}
	reg.GaugeFunc("phaseless_fleet_telemetry_records_stored", "telemetry records held in the fleet store", func() float64 {
		if c := cur(); c != nil {
			return float64(c.stored.Load())
		}
		return 0
	})
	reg.GaugeFunc("phaseless_fleet_devices", "devices in the registry", func() float64 {
		if c := cur(); c != nil {
			return float64(c.nDevs.Load())
		}
		return 0
	})
	reg.GaugeFunc("phaseless_fleet_telemetry_archive_bytes", "size of the Parquet telemetry archive after the last sweep (--fleet-archive-dir)", func() float64 {
		if c := cur(); c != nil {
			return float64(c.archiveBytes.Load())
		}
		return 0
	})
	// PostgreSQL's group commits: batches over transactions is the mean
	// group size, which says whether ingest is bound by transactions.
	pgIngest := func(read func(q *pgIngestQueue) int64) func() float64 {
		return func() float64 {
			if c := cur(); c != nil {
				if pg, ok := c.st.(*pgStore); ok {
					return float64(read(&pg.queue))
				}
			}
			return 0
		}
	}
	reg.CounterFunc("phaseless_fleet_store_ingest_transactions_total", "ingest transactions committed on PostgreSQL (--fleet-db), each holding one or more devices' batches",
		pgIngest(func(q *pgIngestQueue) int64 { return q.groups.Load() }))
	reg.CounterFunc("phaseless_fleet_store_ingest_transaction_batches_total", "telemetry batches those transactions held",
		pgIngest(func(q *pgIngestQueue) int64 { return q.batches.Load() }))
	registerDeviceGauges(reg, cur)
	m.refreshCounts()

	filters := []string{
		m.topics.DeviceFilter(fleetwire.SuffixStatus),
		m.topics.DeviceFilter(fleetwire.SuffixTelemetry),
		m.topics.DeviceFilter(fleetwire.SuffixConfigReported),
		m.topics.DeviceFilter(fleetwire.SuffixCmdResult),
	}
	// m.bus is set before anything can deliver: deliveries use it.
	if cfg.DB != "" && cfg.External != nil {
		// Managers side by side split the devices' messages: each message
		// of a shared subscription goes to one of the group's sessions.
		for i, f := range filters {
			filters[i] = "$share/" + SharedGroup + "/" + f
		}
	}
	if cfg.Broker != nil {
		eb := &embeddedBus{b: cfg.Broker}
		m.bus = eb
		err = eb.subscribe(filters, m.deliver) // retained messages arrive right here
	} else {
		laneOf := func(topic string) (string, bool) {
			id, suffix, _ := m.topics.ParseDevice(topic)
			return id, suffix == fleetwire.SuffixTelemetry
		}
		xb := newExternalBus(&m.cfg, filters, m.deliver, laneOf, func() { m.reconcileAll() })
		m.bus = xb
		err = xb.start()
	}
	if err != nil {
		st.close()
		return nil, err
	}
	if cfg.Broker != nil {
		m.reconcileAll()
	}
	m.startShadow()
	m.wg.Add(2)
	go m.pruneLoop()
	go m.rolloutLoop(cfg.RolloutInterval)
	return m, nil
}

// SharedGroup is the MQTT v5 shared-subscription group of managers on one
// PostgreSQL database (Config.DB): $share/phaseless-managers/<filter>.
const SharedGroup = "phaseless-managers"

// Ready is nil when the Manager can reach devices and holds its lease
// (for /readyz).
func (m *Manager) Ready() error {
	return errors.Join(m.bus.ready(), m.fence(context.Background()))
}

// fence is nil while this Manager may steer devices: it has no lease, or
// its lease is still its own.
func (m *Manager) fence(ctx context.Context) error {
	if m.cfg.Lease == nil {
		return nil
	}
	return m.cfg.Lease.Held(ctx)
}

// Close stops the subscriptions, waits for messages being handled and
// closes the store. Safe to call more than once.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		close(m.stop)
		m.wg.Wait()
		err := m.bus.close()
		m.gate.Close()
		m.closeErr = errors.Join(err, m.st.close())
		switch {
		case m.cfg.Lease == nil:
		case m.ownsLease:
			m.closeErr = errors.Join(m.closeErr, closeLease(m.cfg.Lease))
		default: // a Standby's: it may take the lease again
			m.closeErr = errors.Join(m.closeErr, m.cfg.Lease.Release(context.Background()))
		}
	})
	return m.closeErr
}

func (m *Manager) pruneLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.PruneInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			if _, err := m.Prune(); err != nil {
				m.log.Error("telemetry retention failed", "err", err)
			}
		}
	}
}

// Prune applies the retention bounds now and returns how many records were
// deleted; with an archive it first moves what is due there.
func (m *Manager) Prune() (int, error) {
	var archErr error
	if m.cfg.ArchiveDir != "" {
		if archErr = m.Archive(); archErr != nil {
			m.mArchiveErrors.Inc()
			m.log.Error("telemetry archive failed; records stay in the store", "dir", m.cfg.ArchiveDir, "err", archErr)
		}
	}
	maxRecords, maxAge := m.storeBounds()
	n, err := m.st.prune(m.now(), maxRecords, maxAge)
	if n > 0 {
		m.mDeleted.Add(float64(n))
		m.refreshCounts()
	}
	return n, errors.Join(archErr, err)
}

// storeBounds are the store's own retention bounds: with an archive the
// records leave by moving there, and deleting is the backstop.
func (m *Manager) storeBounds() (maxRecords int, maxAge time.Duration) {
	if m.cfg.ArchiveDir != "" {
		return 2 * m.cfg.MaxRecords, 0
	}
	return m.cfg.MaxRecords, m.cfg.MaxAge
}

// archiveMoves bounds one sweep's moves, so a backlog (an archive that was
// unwritable for a while) drains over several sweeps instead of holding
// the store's writer for minutes.
const archiveMoves = 32

// Archive moves the records that are due to the Parquet archive now and
// applies the files' retention (MaxAge, ArchiveMaxBytes).
func (m *Manager) Archive() error {
	now := m.now()
	cutoff := now.Add(-m.cfg.ArchiveAfter).Truncate(time.Hour)
	for range archiveMoves {
		n, _, err := m.st.archiveOnce(m.cfg.ArchiveDir, now, cutoff, m.cfg.MaxRecords)
		if n > 0 {
			m.mArchived.Add(float64(n))
			m.refreshCounts()
		}
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	_, size, err := archive.Retain(m.cfg.ArchiveDir, now, m.cfg.MaxAge, m.cfg.ArchiveMaxBytes)
	m.archiveBytes.Store(size)
	return err
}

func (m *Manager) refreshCounts() {
	if c, err := m.st.counts(); err == nil {
		m.stored.Store(int64(c.Stored))
		m.nDevs.Store(int64(c.Devices))
	}
}

// deliver routes one message from a device topic. It runs on the broker's
// (or MQTT client's) goroutine; the message is acknowledged to the broker
// when it returns.
func (m *Manager) deliver(topic string, payload []byte) {
	if !m.gate.Enter() {
		return
	}
	defer m.gate.Leave()
	id, suffix, ok := m.topics.ParseDevice(topic)
	if !ok {
		m.mDecodeErrors.With("topic").Inc()
		return
	}
	if len(payload) > m.cfg.MaxPayloadBytes {
		m.mDecodeErrors.With(suffix).Inc()
		m.log.Warn("device message too large", "device", id, "topic", topic, "bytes", len(payload))
		return
	}
	if len(payload) == 0 {
		return // a cleared retained message
	}
	switch suffix {
	case fleetwire.SuffixTelemetry:
		m.handleTelemetry(id, payload)
	case fleetwire.SuffixStatus:
		m.handleStatus(id, payload)
	case fleetwire.SuffixConfigReported:
		m.handleReported(id, payload)
	case fleetwire.SuffixCmdResult:
		m.handleResult(id, payload)
	}
}

// decodeBatch decodes and checks a telemetry batch from device id.
func decodeBatch(id string, payload []byte) (*fleetwire.TelemetryBatch, error) {
	var b fleetwire.TelemetryBatch
	if err := json.Unmarshal(payload, &b); err != nil {
		return nil, err
	}
	// The topic is what the ACL vouched for; a payload naming another device
	// is forged or broken.
	if b.DeviceID != "" && b.DeviceID != id {
		return nil, fmt.Errorf("batch names device %q on %q's topic", b.DeviceID, id)
	}
	for i := range b.Records {
		if d := b.Records[i].Data; len(d) > 0 && !json.Valid(d) {
			return nil, fmt.Errorf("record %d: data is not JSON", i)
		}
	}
	return &b, nil
}

func (m *Manager) handleTelemetry(id string, payload []byte) {
	b, err := decodeBatch(id, payload)
	if err != nil {
		m.mDecodeErrors.With(fleetwire.SuffixTelemetry).Inc()
		m.log.Warn("bad telemetry batch", "device", id, "err", err)
		return
	}
	start := time.Now()
	maxRecords, maxAge := m.storeBounds()
	res, err := m.st.ingest(id, b, m.now(), maxRecords, maxAge)
	m.mIngestSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		m.mIngestErrors.Inc()
		m.log.Error("store telemetry batch", "device", id, "batch", b.BatchID, "err", err)
		return // not acknowledged: the device sends it again
	}
	m.mBatches.Inc()
	m.mIngested.Add(float64(res.stored))
	m.mDuplicates.Add(float64(res.duplicates))
	m.mDeleted.Add(float64(res.deleted))
	m.mMerged.Add(float64(res.merged))
	if res.seqSetReset {
		m.mSeqReset.Inc()
		m.log.Error("corrupt seq index reset; old duplicates of this device may be counted again", "device", id)
	}
	m.stored.Add(int64(res.stored - res.deleted))
	if res.newDevice {
		m.refreshCounts()
	}
	m.queueShadow(id, b)
	ack, _ := json.Marshal(fleetwire.TelemetryAck{BatchID: b.BatchID, UpTo: res.upTo})
	m.bus.publishLater(m.topics.Device(id, fleetwire.SuffixTelemetryAck), ack, false)
}

func (m *Manager) handleStatus(id string, payload []byte) {
	var s fleetwire.Status
	if err := json.Unmarshal(payload, &s); err != nil {
		m.mDecodeErrors.With(fleetwire.SuffixStatus).Inc()
		m.log.Warn("bad status", "device", id, "err", err)
		return
	}
	s.DeviceID = id
	now := m.now()
	m.history.add(id, now, s)
	var wasOnline, created bool
	// The board is a config group label: a device's first status, or one
	// naming another board, may change its merged config.
	dev, changed, err := m.st.updateDeviceConfig(id, now, true, func(d *Device) error {
		wasOnline = d.Status != nil && d.Status.State == "online"
		// Made by this call (or, with a stopped clock, by another at the
		// same instant: a count read once too often).
		created = d.StatusAt.IsZero() && d.FirstSeen.Equal(now)
		// The last message wins, whatever its Time: a last will carries the
		// time of the CONNECT it was registered with, older than the
		// "online" the device published after that CONNECT.
		d.Status, d.StatusAt = &s, now
		if s.State == "online" {
			d.LastSeen = now
		}
		restartCalibration(d, now) // a router rollout reached it: the fleet's threshold until its own certify
		return nil
	})
	if err != nil {
		m.log.Error("store status", "device", id, "err", err)
		return
	}
	if created {
		// A status changes the device count only when it made the device;
		// reading the counts for every status cost PostgreSQL a query per
		// message in a reconnect storm.
		m.refreshCounts()
	}
	if dev != nil && dev.State() == "online" && !wasOnline {
		m.reconcile(dev)
	} else if changed {
		m.publishDesired(dev)
	}
}

func (m *Manager) handleReported(id string, payload []byte) {
	var r fleetwire.ReportedConfig
	if err := json.Unmarshal(payload, &r); err != nil {
		m.mDecodeErrors.With(fleetwire.SuffixConfigReported).Inc()
		m.log.Warn("bad reported config", "device", id, "err", err)
		return
	}
	now := m.now()
	dev, err := m.st.updateDevice(id, now, true, func(d *Device) error {
		d.Reported, d.ReportedAt, d.LastSeen = &r, now, now
		return nil
	})
	if err != nil {
		m.log.Error("store reported config", "device", id, "err", err)
		return
	}
	if dev.Desired != nil && r.Version < dev.Desired.Version {
		m.publishDesired(dev) // the device missed a version (or reports a stale one)
	}
}

func (m *Manager) handleResult(id string, payload []byte) {
	var r fleetwire.CommandResult
	if err := json.Unmarshal(payload, &r); err != nil || r.ID == "" {
		m.mDecodeErrors.With(fleetwire.SuffixCmdResult).Inc()
		m.log.Warn("bad command result", "device", id, "err", err)
		return
	}
	found, err := m.st.commandResult(id, &r, m.now())
	if err != nil {
		m.log.Error("store command result", "device", id, "command", r.ID, "err", err)
		return
	}
	if !found {
		m.mUnknownResults.Inc()
	}
	if _, err := m.st.updateDevice(id, m.now(), true, func(d *Device) error { d.LastSeen = m.now(); return nil }); err != nil {
		m.log.Error("store last seen", "device", id, "err", err)
	}
}

// reconcile re-sends what a device should have but may not: a desired
// config it has not reported, and commands without a result. Devices treat
// both idempotently (config by version, commands by id).
func (m *Manager) reconcile(dev *Device) {
	if m.steers() {
		m.resend(dev)
	}
}

// resend publishes what dev has not acknowledged: a newer desired config
// and its pending commands. The caller has checked the lease.
func (m *Manager) resend(dev *Device) {
	if dev.Desired != nil && (dev.Reported == nil || dev.Reported.Version < dev.Desired.Version) {
		m.sendDesired(dev)
	}
	cmds := dev.Commands
	if cmds == nil && dev.PendingCommands == 0 {
		// Every caller counted them (updateDeviceConfig, devices): a
		// device coming online with nothing pending costs no second read,
		// which was a third of PostgreSQL's transactions in a reconnect
		// storm.
		return
	}
	if cmds == nil {
		full, err := m.st.device(dev.ID)
		if err != nil || full == nil {
			return
		}
		cmds = full.Commands
	}
	for i := len(cmds) - 1; i >= 0; i-- { // oldest first
		if cmds[i].State == CommandPending {
			p, _ := json.Marshal(cmds[i].Command)
			m.bus.publishLater(m.topics.Device(dev.ID, fleetwire.SuffixCmd), p, false)
		}
	}
}

func (m *Manager) reconcileAll() {
	if !m.steers() {
		return
	}
	devs, err := m.st.devices()
	if err != nil {
		m.log.Error("reconcile: list devices", "err", err)
		return
	}
	for _, d := range devs {
		if d.Desired != nil && (d.Reported == nil || d.Reported.Version < d.Desired.Version) || d.PendingCommands > 0 {
			m.resend(d)
		}
	}
}

// publishDesired sends dev its desired config, if this Manager still holds
// the fleet lease: a holder that lost it must not steer devices from the
// message handlers either (a device reconnecting, reporting a stale
// version or changing board), only from the API, which fences itself.
func (m *Manager) publishDesired(dev *Device) {
	if m.steers() {
		m.sendDesired(dev)
	}
}

func (m *Manager) sendDesired(dev *Device) {
	p, _ := json.Marshal(dev.Desired)
	m.bus.publishLater(m.topics.Device(dev.ID, fleetwire.SuffixConfigDesired), p, true)
}

// steers reports whether this Manager holds the fleet lease (always, with
// no lease configured), logging why not.
func (m *Manager) steers() bool {
	if l, ok := m.cfg.Lease.(recentLease); ok {
		switch err := l.HeldRecently(); {
		case err == nil:
			return true
		case errors.Is(err, ErrLeaseLost):
			m.log.Warn("not the fleet's writer: nothing sent to devices", "err", err)
			return false
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.fence(ctx); err != nil {
		m.log.Warn("not the fleet's writer: nothing sent to devices", "err", err)
		return false
	}
	return true
}

// recentLease is a Lease that can tell without a round trip that it is
// still held (RedisLease.HeldRecently): steers runs on the MQTT delivery
// goroutine once per message, where a Redis round trip each would hold
// up every device's messages behind a slow Redis.
type recentLease interface {
	HeldRecently() error
}

// Errors the API maps to statuses.
var (
	ErrUnknownDevice = errors.New("unknown device")
	ErrBadRequest    = errors.New("bad request")
	// ErrNotWriter: this Manager's fleet lease is lost; another steers the
	// fleet now (lease.go).
	ErrNotWriter = errors.New("not the fleet's writer")
)

// Devices lists the registry.
func (m *Manager) Devices() ([]*Device, error) { return m.st.devices() }

// Device returns one device with its recent commands, or ErrUnknownDevice.
func (m *Manager) Device(id string) (*Device, error) {
	d, err := m.st.device(id)
	if err == nil && d == nil {
		err = ErrUnknownDevice
	}
	return d, err
}

// SetConfig changes a device's own overrides, the top layer of its config
// (configlayers.go), and publishes the merged result retained; its version
// goes up when the merged values change. The device need not exist yet
// (pre-provisioning).
// A failed publish is reported but the version stands: reconcile re-sends
// it when the device or the broker comes back.
func (m *Manager) SetConfig(ctx context.Context, id string, u ConfigUpdate) (*fleetwire.DesiredConfig, error) {
	if err := fleetwire.ValidateDeviceID(id); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if err := checkKeys(u); err != nil {
		return nil, err
	}
	if err := m.fence(ctx); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotWriter, err)
	}
	dev, _, err := m.st.updateDeviceConfig(id, m.now(), true, func(d *Device) error {
		adoptLegacyOverrides(d)
		d.Overrides = fleetapi.ApplyUpdate(d.Overrides, u)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if dev.Desired == nil {
		// Nothing set anywhere: publish an empty version 1 so the device
		// reports it and the operator sees the change land.
		if dev, err = m.st.updateDevice(id, m.now(), true, func(d *Device) error {
			d.Desired = &fleetwire.DesiredConfig{Version: 1, Values: map[string]string{}}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	m.refreshCounts()
	p, _ := json.Marshal(dev.Desired)
	if err := m.bus.publish(ctx, m.topics.Device(id, fleetwire.SuffixConfigDesired), p, true); err != nil {
		m.mPublishErrors.Inc()
		return dev.Desired, fmt.Errorf("stored version %d but could not publish it yet: %w", dev.Desired.Version, err)
	}
	return dev.Desired, nil
}

// SendCommand issues a command (pending until the device answers on
// cmd/result). A failed publish leaves it pending for reconcile.
func (m *Manager) SendCommand(ctx context.Context, id, name string, args map[string]string) (*CommandState, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	return m.sendCommand(ctx, id, hex.EncodeToString(rnd[:]), name, args)
}

// sendCommand is SendCommand with the command's id: a command already
// stored under it is returned as stored and not published again (reconcile
// re-sends pending ones).
func (m *Manager) sendCommand(ctx context.Context, id, cmdID, name string, args map[string]string) (*CommandState, error) {
	if err := fleetwire.ValidateDeviceID(id); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: command name is required", ErrBadRequest)
	}
	if err := m.fence(ctx); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotWriter, err)
	}
	now := m.now()
	cs := CommandState{
		DeviceID:  id,
		Command:   fleetwire.Command{ID: cmdID, Name: name, Args: args, IssuedAt: now},
		State:     CommandPending,
		UpdatedAt: now,
	}
	added, err := m.st.addCommand(cs, m.cfg.MaxCommandsPerDevice)
	if err != nil {
		return nil, err
	}
	if !added {
		old, err := m.st.command(id, cmdID)
		if err != nil || old == nil {
			return nil, fmt.Errorf("command %s: stored, then not found: %v", cmdID, err)
		}
		return old, nil
	}
	m.refreshCounts()
	p, _ := json.Marshal(cs.Command)
	if err := m.bus.publish(ctx, m.topics.Device(id, fleetwire.SuffixCmd), p, false); err != nil {
		m.mPublishErrors.Inc()
		return &cs, fmt.Errorf("command %s stored but not published yet: %w", cs.ID, err)
	}
	return &cs, nil
}

// Command returns one command's state, or nil.
func (m *Manager) Command(dev, id string) (*CommandState, error) { return m.st.command(dev, id) }

// Counts returns fleet-wide telemetry totals.
func (m *Manager) Counts() (Counts, error) { return m.st.counts() }

// Export writes stored telemetry as JSON lines (ExportedRecord) in ingest
// order, from ingest time since (zero: all), for one device or all ("").
func (m *Manager) Export(ctx context.Context, w io.Writer, since time.Time, device string) (int, error) {
	n := 0
	err := m.st.export(since, device, func(line []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return err
		}
		n++
		return nil
	})
	return n, err
}
