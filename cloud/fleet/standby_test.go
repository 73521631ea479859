package fleet

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/admit/redistest"
	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// dyingLease is a RedisLease whose holder can die: once dead, giving the
// lease up only stops renewing it, as when the process is killed, so the
// key stays until its TTL runs out.
type dyingLease struct {
	*RedisLease
	dead atomic.Bool
}

func (d *dyingLease) Release(ctx context.Context) error {
	if d.dead.Load() {
		d.stopRenewing()
		return nil
	}
	return d.RedisLease.Release(ctx)
}

func (d *dyingLease) Close() error {
	if d.dead.Load() {
		d.stopRenewing()
		return d.client.Close()
	}
	return d.RedisLease.Close()
}

// TestStandbyTakesOverRollout runs two cloud replicas' fleet managers as
// Standbys on one Redis, one broker (as an external broker both reach)
// and one fleet store on storage both reach. A is the writer and starts a
// staged rollout to simulated devices; B waits, refusing the fleet API
// with 503 while it does. A dies after the first stage (its lease is not
// released: it expires); B takes the lease, opens the store, and the
// rollout A started runs to completion under B, each device updated once.
// Then B stops cleanly and A, back as a standby, takes over at once.
func TestStandbyTakesOverRollout(t *testing.T) {
	url := redistest.Start(t)
	// A TTL well above the renewal period, so that a loaded machine does
	// not lose the writer its lease before the test kills it.
	lease := func(name string) *dyingLease { return &dyingLease{RedisLease: testLease(t, url, name, 6*time.Second)} }
	pub, priv, _ := ed25519.GenerateKey(nil)
	b := startBroker(t, broker.Config{DevAuth: true})
	shared := t.TempDir() // the fleet store both replicas reach
	clock := &fakeClock{t: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)}

	// Devices download from the public URL, which reaches whichever
	// replica is the writer (a load balancer in front of both).
	var (
		mu       sync.Mutex // guards replicas
		replicas []*Standby
	)
	writer := func() *Standby {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range replicas {
			if s.Manager() != nil {
				return s
			}
		}
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := writer(); s != nil {
			s.ArtifactHandler().ServeHTTP(w, r)
			return
		}
		http.Error(w, "no writer", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	cfg := func(l Lease) Config {
		return Config{DataDir: shared, Broker: b, Now: clock.now, PublicURL: srv.URL, OTAPub: pub, RolloutInterval: 50 * time.Millisecond, Lease: l}
	}
	la, lb := lease("cloud-a"), lease("cloud-b")
	a, err := OpenStandby(cfg(la), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Manager() == nil || a.Writer() != nil {
		t.Fatalf("the first replica is not the writer: %v", a.Writer())
	}
	var takeovers atomic.Int32
	bs, err := OpenStandby(cfg(lb), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	bs.mu.Lock()
	bs.opened = func(m *Manager) {
		if m != nil {
			takeovers.Add(1)
		}
	}
	bs.mu.Unlock()
	mu.Lock()
	replicas = append(replicas, a, bs)
	mu.Unlock()
	if bs.Manager() != nil || !errors.Is(bs.Writer(), ErrStandby) || !strings.Contains(bs.Writer().Error(), "cloud-a") {
		t.Fatalf("the second replica is not standing by for cloud-a: %v", bs.Writer())
	}
	if bs.Ready() != nil {
		t.Fatalf("a standby is not ready to serve: %v", bs.Ready())
	}
	rec := httptest.NewRecorder()
	bs.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/fleet/devices", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "cloud-a") {
		t.Fatalf("standby's fleet API: %d %s", rec.Code, rec.Body)
	}

	const n = 20
	devs := make([]*otaDevice, n)
	client := &http.Client{}
	defer client.CloseIdleConnections()
	for i := range devs {
		d := &otaDevice{id: fmt.Sprintf("car-%02d", i), board: "rk3588", version: "1.0", pub: pub}
		if err := d.connect(b.TCPAddr()); err != nil {
			t.Fatal(err)
		}
		devs[i] = d
	}
	defer serveDevices(devs, client)()
	waitFor(t, "every device registered", func() bool { ds, _ := a.Manager().Devices(); return len(ds) == n })

	var bb bytes.Buffer
	if err := firmware.Write(&bb, priv, "2.0", "rk3588", map[string][]byte{"phaseless-agent": []byte("agent 2.0")}, []string{"phaseless-agent"}); err != nil {
		t.Fatal(err)
	}
	bundle := bytes.Clone(bb.Bytes())
	info, err := a.Manager().PutArtifact(&bb)
	if err != nil {
		t.Fatal(err)
	}
	// A download that reaches the standby is served from the shared store.
	rec = httptest.NewRecorder()
	bs.ArtifactHandler().ServeHTTP(rec, httptest.NewRequest("GET", ArtifactPrefix+info.ID, nil))
	if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), bundle) {
		t.Fatalf("standby's artifact download: %d, %d bytes", rec.Code, rec.Body.Len())
	}
	rec = httptest.NewRecorder()
	bs.ArtifactHandler().ServeHTTP(rec, httptest.NewRequest("GET", ArtifactPrefix+strings.Repeat("0", 64), nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("standby's download of a bundle it does not hold: %d", rec.Code)
	}
	stages, _ := ParseStages("10%,50%,100%")
	r, err := a.Manager().CreateRollout(context.Background(), RolloutSpec{Artifact: info.ID, Stages: stages, Soak: Duration(10 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	rollout := func() *Rollout {
		s := writer()
		if s == nil {
			return nil
		}
		m := s.Manager()
		if m == nil {
			return nil
		}
		ro, _ := m.Rollout(r.ID)
		return ro
	}
	waitFor(t, "stage 1 settled under A", func() bool {
		ro := rollout()
		return ro != nil && ro.Stage == 0 && !ro.StageSettledAt.IsZero()
	})

	// A dies: its manager stops, its lease is left to expire.
	la.dead.Store(true)
	a.Close()
	waitFor(t, "B takes over once A's lease expires", func() bool { return bs.Manager() != nil && takeovers.Load() > 0 })
	if err := bs.Writer(); err != nil || takeovers.Load() != 1 {
		t.Fatalf("B after the takeover: %v, %d takeovers", err, takeovers.Load())
	}
	if ro := rollout(); ro == nil || ro.State != RolloutRunning || ro.Stage != 0 {
		t.Fatalf("B does not resume A's rollout where A left it: %+v", ro)
	}
	for stage := 1; stage < len(stages); stage++ {
		clock.advance(11 * time.Minute) // the soak passes
		waitFor(t, fmt.Sprintf("stage %d settled under B", stage+1), func() bool {
			ro := rollout()
			return ro != nil && (ro.State != RolloutRunning || ro.Stage == stage && !ro.StageSettledAt.IsZero())
		})
	}
	clock.advance(11 * time.Minute)
	waitFor(t, "the rollout done under B", func() bool { ro := rollout(); return ro != nil && ro.State != RolloutRunning })
	ro := rollout()
	if p := ro.Progress(); ro.State != RolloutDone || p.Succeeded != n {
		t.Fatalf("rollout under B: %s (%s), %+v", ro.State, ro.Reason, p)
	}
	for _, d := range devs {
		if d.updates.Load() != 1 {
			t.Fatalf("%s got the update %d times", d.id, d.updates.Load())
		}
	}

	// B stops cleanly: its lease is released, and A, back as a standby,
	// becomes the writer with the finished rollout in its store.
	a2, err := OpenStandby(cfg(lease("cloud-a")), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	if a2.Manager() != nil {
		t.Fatal("two writers at once")
	}
	mu.Lock()
	replicas = append(replicas, a2)
	mu.Unlock()
	bs.Close()
	waitFor(t, "A takes over from B", func() bool { return a2.Manager() != nil })
	if ro := rollout(); ro == nil || ro.State != RolloutDone {
		t.Fatalf("A after B: rollout %+v", ro)
	}
}

// TestStandbyStepsDown: a writer whose lease passes to another (it was
// cut off for longer than the TTL) closes its Manager, freeing the store,
// and stands by; it takes over again when the lease is free.
func TestStandbyStepsDown(t *testing.T) {
	url := redistest.Start(t)
	l := testLease(t, url, "cloud-a", 3*time.Second)
	b := startBroker(t, broker.Config{DevAuth: true})
	reg := metrics.NewRegistry()
	s, err := OpenStandby(Config{DataDir: t.TempDir(), Broker: b, Lease: l, Metrics: reg}, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Manager() == nil {
		t.Fatal("not the writer on a free lease")
	}
	ctx := context.Background()
	if err := l.client.Set(ctx, "phaseless:fleet:lease", "othertoken cloud-c", 3*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the writer steps down", func() bool { return s.Manager() == nil })
	if err := s.Writer(); !errors.Is(err, ErrStandby) || !strings.Contains(err.Error(), "cloud-c") {
		t.Fatalf("after stepping down: %v", err)
	}
	if v, _ := l.client.Get(ctx, "phaseless:fleet:lease").Result(); v != "othertoken cloud-c" {
		t.Fatalf("stepping down touched the new holder's lease: %q", v)
	}
	l.client.Del(ctx, "phaseless:fleet:lease")
	waitFor(t, "the standby takes over again", func() bool { return s.Manager() != nil })
	// The fleet's gauges, registered by the first Manager, report the
	// second's registry.
	st, _ := json.Marshal(fleetwire.Status{DeviceID: "car-1", State: "online", Version: "1.0", Time: time.Now()})
	if err := b.Publish(topics.Device("car-1", fleetwire.SuffixStatus), st, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the device registered", func() bool { ds, _ := s.Manager().Devices(); return len(ds) == 1 })
	var text strings.Builder
	reg.WriteText(&text)
	for _, want := range []string{"phaseless_fleet_devices 1\n", `phaseless_fleet_devices_by_state{state="online"} 1`} {
		if !strings.Contains(text.String(), want) {
			t.Fatalf("metrics after a second takeover lack %q:\n%s", want, text.String())
		}
	}
}

// TestStandbyRefusesOtherStore: replicas whose fleet stores are their own
// (per-replica data directories) cannot hand the fleet over: the standby
// takes the lease when the writer stops, finds its store is not the one
// the writer used, gives the lease back and stays a standby, saying why,
// until an operator makes its store the fleet's.
func TestStandbyRefusesOtherStore(t *testing.T) {
	url := redistest.Start(t)
	b := startBroker(t, broker.Config{DevAuth: true})
	a, err := OpenStandby(Config{DataDir: t.TempDir(), Broker: b, Lease: testLease(t, url, "cloud-a", 3*time.Second)}, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Manager() == nil {
		t.Fatal("the first replica is not the writer")
	}
	lb := testLease(t, url, "cloud-b", 3*time.Second)
	bs, err := OpenStandby(Config{DataDir: t.TempDir(), Broker: b, Lease: lb}, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	a.Close()
	waitFor(t, "B refuses its own store", func() bool { return errors.Is(bs.Writer(), ErrOtherStore) })
	if bs.Manager() != nil {
		t.Fatal("B took the fleet over with a store of its own")
	}
	lb.client.Del(context.Background(), "phaseless:fleet:lease:store")
	waitFor(t, "B takes over once its store is made the fleet's", func() bool { return bs.Manager() != nil })
}
