package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A standby fleet manager: a cloud replica that does not hold the fleet
// lease waits for it instead of refusing to start, and becomes the fleet's
// writer when the holder stops or dies (its lease is released, or expires
// after its TTL). It opens the fleet's store only then, so the store must
// be one both replicas reach (Config.DataDir on a shared volume, or the
// same host): bbolt's file lock keeps a second opener out even if the
// lease were wrong. What it resumes is what that store holds: the registry,
// desired config and its layers, commands, telemetry, artifacts and every
// rollout where the last writer left it; the rollout loop carries running
// rollouts on from their stored stage.
//
// Both ways round: a writer whose lease is lost (it was cut off from Redis
// for longer than the TTL and another took over) closes its Manager, which
// frees the store for the new writer, and waits again as a standby.

// ErrStandby is returned by a Standby's fleet API while another process is
// the fleet's writer.
var ErrStandby = errors.New("standby fleet manager: another replica is the fleet's writer")

// DefaultStandbyPoll is how often a standby tries the lease, and a writer
// checks it is still its own.
const DefaultStandbyPoll = 2 * time.Second

// Standby runs a Manager while it holds the fleet lease and waits for the
// lease otherwise. Make it with OpenStandby.
type Standby struct {
	cfg  Config
	poll time.Duration

	mu       sync.Mutex // guards m, handlers, waiting
	m        *Manager
	api, art http.Handler // m's handlers
	waiting  error        // why this process is not the writer; nil while it is

	// opened, when set, is told of every change of writer role: the new
	// Manager after a takeover, nil after stepping down (tests, logs).
	opened func(*Manager)

	retryAt time.Time // no asking for the lease before then (run's goroutine only)

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// OpenStandby takes the fleet lease and opens the Manager if the lease is
// free, and otherwise returns a Standby that keeps trying every poll
// (DefaultStandbyPoll when 0). cfg.Lease is required.
func OpenStandby(cfg Config, poll time.Duration) (*Standby, error) {
	cfg.fillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Lease == nil {
		return nil, errors.New("fleet standby: a lease is required")
	}
	if poll <= 0 {
		poll = DefaultStandbyPoll
	}
	cfg.live = new(atomic.Pointer[Manager])
	s := &Standby{cfg: cfg, poll: poll, stop: make(chan struct{}), done: make(chan struct{})}
	s.step()
	go s.run()
	return s, nil
}

func (s *Standby) run() {
	defer close(s.done)
	t := time.NewTicker(s.poll)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.step()
		}
	}
}

// step takes over when the lease is free, or steps down when it is lost.
func (s *Standby) step() {
	s.mu.Lock()
	m := s.m
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.poll+5*time.Second)
	defer cancel()
	if m != nil {
		if err := m.fence(ctx); errors.Is(err, ErrLeaseLost) {
			s.cfg.Logger.Warn("fleet lease lost: stepping down to standby", "err", err)
			s.set(nil, fmt.Errorf("%w: %w", ErrStandby, err))
			if err := m.Close(); err != nil {
				s.cfg.Logger.Error("close the fleet manager after losing the lease", "err", err)
			}
		}
		return
	}
	if time.Now().Before(s.retryAt) {
		return
	}
	if err := s.cfg.Lease.Acquire(ctx); err != nil {
		s.set(nil, fmt.Errorf("%w: %w", ErrStandby, err))
		return
	}
	m, err := open(s.cfg, func(st fleetStore) error { return sameStore(ctx, s.cfg.Lease, s.cfg.DataDir, st) })
	if errors.Is(err, ErrOtherStore) {
		// Only an operator changes that: ask again seldom, so this
		// replica's brief holds of the lease do not keep refusing a
		// writer on the right store that is starting at that moment.
		s.retryAt = time.Now().Add(otherStoreWait)
	}
	if err != nil {
		// The store may still be locked by a writer that lost its lease
		// but has not closed yet: give the lease back and try again.
		if rerr := s.cfg.Lease.Release(ctx); rerr != nil {
			s.cfg.Logger.Warn("give the fleet lease back", "err", rerr)
		}
		s.cfg.Logger.Error("fleet lease taken but the fleet manager did not open; retrying", "err", err)
		s.set(nil, fmt.Errorf("%w: took the lease but could not open the fleet store: %w", ErrStandby, err))
		return
	}
	s.cfg.Logger.Info("fleet lease taken: this replica is the fleet's writer", "data_dir", s.cfg.DataDir)
	s.set(m, nil)
}

// otherStoreWait is how long a standby on the wrong store waits before it
// takes the lease to look again, whatever its poll interval.
const otherStoreWait = 30 * time.Second

// ErrOtherStore is returned when a standby's fleet store is not the one
// the fleet's writers have used: taking over with it would forget every
// rollout, config layer and record, and step devices' config versions back.
var ErrOtherStore = errors.New("this fleet store is not the fleet's")

// storeBinder is a Lease that records the fleet store's identity
// (RedisLease.BindStore).
type storeBinder interface {
	BindStore(ctx context.Context, id string) (string, error)
}

// sameStore checks that st is the one the fleet's writers used: the
// first writer (a standby or not) records its store's identity beside the
// lease, and a writer on a store of its own (per-replica data
// directories, not a shared one) refuses to steer the fleet instead of
// taking it over empty.
func sameStore(ctx context.Context, lease Lease, dataDir string, st fleetStore) error {
	b, ok := lease.(storeBinder)
	if !ok {
		return nil
	}
	id, err := st.id()
	if err != nil {
		return err
	}
	fleetID, err := b.BindStore(ctx, id)
	if err != nil {
		return err
	}
	if fleetID != id {
		return fmt.Errorf("%w: %s holds store %s, the fleet's writers used %s: point the fleet data directory at the shared store, or delete the lease's :store key in Redis to make this store the fleet's", ErrOtherStore, dataDir, id, fleetID)
	}
	return nil
}

func (s *Standby) set(m *Manager, waiting error) {
	s.cfg.live.Store(m)
	s.mu.Lock()
	changed := s.m != m
	s.m, s.waiting = m, waiting
	s.api, s.art = nil, nil
	if m != nil {
		s.api, s.art = m.Handler(), m.ArtifactHandler()
	}
	opened := s.opened
	s.mu.Unlock()
	if changed && opened != nil {
		opened(m)
	}
}

// Manager is the Manager while this process is the fleet's writer, nil
// while it waits.
func (s *Standby) Manager() *Manager {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m
}

// Writer is nil while this process is the fleet's writer, and otherwise
// says who is (ErrStandby with the lease's holder) or why it could not
// take over.
func (s *Standby) Writer() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m != nil {
		return nil
	}
	return s.waiting
}

// Ready is the writer's Manager.Ready, and nil while standing by: a
// standby replica serves everything but the fleet.
func (s *Standby) Ready() error {
	if m := s.Manager(); m != nil {
		return m.Ready()
	}
	return nil
}

// Handler is the admin API of the writer's Manager, or 503 with
// ErrStandby while another replica is the writer.
func (s *Standby) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, false) })
}

// ArtifactHandler is the writer's Manager.ArtifactHandler; meanwhile it
// serves bundles from the shared store's directory (serveStored), and 503
// for any it does not hold.
func (s *Standby) ArtifactHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, true) })
}

func (s *Standby) serve(w http.ResponseWriter, r *http.Request, artifacts bool) {
	s.mu.Lock()
	h, why := s.api, s.waiting
	if artifacts {
		h = s.art
	}
	s.mu.Unlock()
	if h == nil && artifacts && s.serveStored(w, r) {
		return
	}
	if h == nil {
		w.Header().Set("Retry-After", fmt.Sprint(int(s.poll.Seconds())+1))
		writeError(w, http.StatusServiceUnavailable, why)
		return
	}
	h.ServeHTTP(w, r)
}

// serveStored serves a bundle from the shared fleet directory while this
// replica stands by, so that devices whose download reaches it (a load
// balancer in front of every replica) do not fail their update: a bundle's
// file is named by its sha256 and written once, before any rollout names
// it, and devices verify its signature. It reports false when it has none.
func (s *Standby) serveStored(w http.ResponseWriter, r *http.Request) bool {
	id, ok := strings.CutPrefix(r.URL.Path, ArtifactPrefix)
	if !ok || r.Method != http.MethodGet && r.Method != http.MethodHead || len(id) != 64 || strings.Trim(id, "0123456789abcdef") != "" {
		return false
	}
	f, err := os.Open(artifactPath(s.cfg.DataDir, id))
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, id+".plota", fi.ModTime(), f)
	return true
}

// Close stops waiting, closes the Manager if this process is the writer
// (releasing the lease to the next standby) and closes the lease. Safe to
// call more than once.
func (s *Standby) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.cfg.live.Store(nil)
		s.mu.Lock()
		m := s.m
		s.m, s.api, s.art, s.waiting = nil, nil, nil, ErrStandby
		s.mu.Unlock()
		if m != nil {
			s.closeErr = m.Close()
		}
		s.closeErr = errors.Join(s.closeErr, closeLease(s.cfg.Lease))
	})
	return s.closeErr
}
