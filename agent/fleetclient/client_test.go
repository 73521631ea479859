package fleetclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/phaseless/phaseless/agent/fleetclient/internal/brokertest"
	"github.com/phaseless/phaseless/agent/telemetry"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// childEnv makes the re-executed test binary run a device until killed
// (for the last-will test). Value: JSON childSpec.
const childEnv = "PHASELESS_FLEET_CHILD"

type childSpec struct {
	Broker, Device, State string
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		runChild(spec)
		return
	}
	goleak.VerifyTestMain(m)
}

func runChild(spec string) {
	var s childSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, "child spec:", err)
		os.Exit(2)
	}
	c, err := New(Config{BrokerURL: s.Broker, DeviceID: s.Device, Version: "v-child", Board: "test", StatePath: s.State,
		Slot: func() string { return "b" }, BackoffMin: 50 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	fmt.Println("running")
	_ = c.Run(context.Background()) // until SIGKILL
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testLogger logs to the test output when -v is given.
func testLogger(t testing.TB) *slog.Logger {
	if !testing.Verbose() {
		return quietLogger()
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

type broker interface {
	URL() string
	Restart()
	Stop()
}

var brokers = []struct {
	name  string
	start func(t *testing.T) broker
}{
	{"mochi", func(t *testing.T) broker { return brokertest.StartMochi(t) }},
	{"mosquitto", func(t *testing.T) broker { return brokertest.StartMosquitto(t) }},
}

// device runs a Client until the test ends (or stop is called).
type device struct {
	*Client
	stop func()
}

func startDevice(t *testing.T, cfg Config) *device {
	t.Helper()
	if cfg.StatePath == "" {
		cfg.StatePath = filepath.Join(t.TempDir(), "fleet.db")
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.BackoffMin == 0 {
		cfg.BackoffMin = 50 * time.Millisecond
		cfg.BackoffMax = 500 * time.Millisecond
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return &device{Client: c, stop: stop}
}

func openStore(t *testing.T) *telemetry.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "telemetry.db")
	s, err := telemetry.Open(path, telemetry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// TestStatusOnlineAndWillOnKill runs a device in a child process, kills it
// with SIGKILL and expects the broker to publish its retained last will.
func TestStatusOnlineAndWillOnKill(t *testing.T) {
	for _, bk := range brokers {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.start(t)
			topics := fleetwire.Topics{}
			cloud := startCloud(t, b.URL(), topics)
			const id = "dev-kill"
			spec, _ := json.Marshal(childSpec{Broker: b.URL(), Device: id, State: filepath.Join(t.TempDir(), "s.db")})
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
			out, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			if line, _ := bufio.NewReader(out).ReadString('\n'); line != "running\n" {
				t.Fatalf("child: %q", line)
			}
			cloud.waitFor("status online", func() bool {
				s, ok := cloud.lastStatus(id)
				return ok && s.State == "online"
			})
			cloud.mu.Lock()
			s, _ := cloud.lastStatus(id)
			cloud.mu.Unlock()
			if s.Version != "v-child" || s.Slot != "b" || s.Board != "test" || s.DeviceID != id {
				t.Errorf("online status = %+v", s)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			cloud.waitFor("last will offline", func() bool {
				s, ok := cloud.lastStatus(id)
				return ok && s.State == "offline"
			})
			// The will is retained: a newcomer sees the device offline.
			late := startCloud(t, b.URL(), topics)
			late.waitFor("retained offline status", func() bool {
				s, ok := late.lastStatus(id)
				return ok && s.State == "offline" && s.Slot == "b" && s.Version == "v-child"
			})
		})
	}
}

func TestGracefulStopPublishesOffline(t *testing.T) {
	b := brokertest.StartMochi(t)
	cloud := startCloud(t, b.URL(), fleetwire.Topics{})
	d := startDevice(t, Config{BrokerURL: b.URL(), DeviceID: "dev-stop", Version: "1.0"})
	cloud.waitFor("online", func() bool { s, ok := cloud.lastStatus("dev-stop"); return ok && s.State == "online" })
	d.stop()
	cloud.waitFor("offline", func() bool { s, ok := cloud.lastStatus("dev-stop"); return ok && s.State == "offline" })
}

func TestConfigAppliedAndReported(t *testing.T) {
	for _, bk := range brokers {
		t.Run(bk.name, func(t *testing.T) { testConfigAppliedAndReported(t, bk.start(t)) })
	}
}

func testConfigAppliedAndReported(t *testing.T, b broker) {
	topics := fleetwire.Topics{Prefix: "acme/"}
	cloud := startCloud(t, b.URL(), topics)
	const id = "dev-cfg"
	var mu sync.Mutex
	var got []fleetwire.DesiredConfig
	d := startDevice(t, Config{BrokerURL: b.URL(), DeviceID: id, Topics: topics,
		OnConfig: func(_ context.Context, c fleetwire.DesiredConfig) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, c)
			if c.Values["route"] == "bogus" {
				return nil, errors.New("route must be auto, local or cloud")
			}
			return nil, nil
		}})
	cloud.waitFor("online", func() bool { _, ok := cloud.lastStatus(id); return ok })

	desired := topics.Device(id, fleetwire.SuffixConfigDesired)
	cloud.publish(desired, true, fleetwire.DesiredConfig{Version: 1, Values: map[string]string{"route": "local"}})
	cloud.waitFor("report v1", func() bool {
		r := cloud.reported[id]
		return len(r) > 0 && r[len(r)-1].Version == 1
	})
	cloud.publish(desired, true, fleetwire.DesiredConfig{Version: 2, Values: map[string]string{"route": "bogus"}})
	cloud.waitFor("report v2", func() bool {
		r := cloud.reported[id]
		return len(r) > 0 && r[len(r)-1].Version == 2
	})
	cloud.mu.Lock()
	reps := append([]fleetwire.ReportedConfig(nil), cloud.reported[id]...)
	cloud.mu.Unlock()
	if r := reps[0]; !r.Applied || r.Error != "" {
		t.Errorf("v1 report = %+v, want applied", r)
	}
	if r := reps[len(reps)-1]; r.Applied || !strings.Contains(r.Error, "route must be") {
		t.Errorf("v2 report = %+v, want the handler's error", r)
	}
	mu.Lock()
	if len(got) != 2 || got[0].Values["route"] != "local" || got[1].Version != 2 {
		t.Errorf("OnConfig saw %+v", got)
	}
	mu.Unlock()
	// A stale version (an old retained message) is not applied.
	cloud.publish(desired, false, fleetwire.DesiredConfig{Version: 1, Values: map[string]string{"route": "cloud"}})
	cloud.publish(desired, true, fleetwire.DesiredConfig{Version: 3, Values: map[string]string{"route": "cloud"}})
	cloud.waitFor("report v3", func() bool {
		r := cloud.reported[id]
		return len(r) > 0 && r[len(r)-1].Version == 3 && r[len(r)-1].Applied
	})
	mu.Lock()
	for _, c := range got {
		if c.Version == 1 && c.Values["route"] == "cloud" {
			t.Error("stale config version 1 was applied after version 2")
		}
	}
	mu.Unlock()
	if st := d.Stats(); st.ConfigsApplied < 2 || st.ConfigsFailed != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestCommandsRunOncePerID(t *testing.T) {
	for _, bk := range brokers {
		t.Run(bk.name, func(t *testing.T) { testCommandsRunOncePerID(t, bk.start(t)) })
	}
}

func testCommandsRunOncePerID(t *testing.T, b broker) {
	topics := fleetwire.Topics{}
	cloud := startCloud(t, b.URL(), topics)
	const id = "dev-cmd"
	state := filepath.Join(t.TempDir(), "fleet.db")
	var runs atomic.Int32
	echo := func(_ context.Context, c fleetwire.Command) (string, error) {
		runs.Add(1)
		return "echo:" + c.Args["text"], nil
	}
	d := startDevice(t, Config{BrokerURL: b.URL(), DeviceID: id, StatePath: state})
	d.Handle("echo", echo)
	d.Handle("boom", func(context.Context, fleetwire.Command) (string, error) { panic("kaput") })
	cloud.waitFor("online", func() bool { _, ok := cloud.lastStatus(id); return ok })

	cmdTopic := topics.Device(id, fleetwire.SuffixCmd)
	results := func(n int) func() bool { return func() bool { return len(cloud.results[id]) >= n } }
	cloud.publish(cmdTopic, false, fleetwire.Command{ID: "c1", Name: "echo", Args: map[string]string{"text": "hi"}})
	cloud.waitFor("result c1", results(1))
	cloud.publish(cmdTopic, false, fleetwire.Command{ID: "c1", Name: "echo", Args: map[string]string{"text": "again"}})
	cloud.waitFor("repeated result c1", results(2))
	cloud.publish(cmdTopic, false, fleetwire.Command{ID: "c2", Name: "reboot-the-moon"})
	cloud.waitFor("result c2", results(3))
	cloud.publish(cmdTopic, false, fleetwire.Command{ID: "c3", Name: "boom"})
	cloud.waitFor("result c3", results(4))

	cloud.mu.Lock()
	res := append([]fleetwire.CommandResult(nil), cloud.results[id]...)
	cloud.mu.Unlock()
	want := []fleetwire.CommandResult{
		{ID: "c1", OK: true, Output: "echo:hi"},
		{ID: "c1", OK: true, Output: "echo:hi"},
		{ID: "c2", Error: `unknown command "reboot-the-moon"`},
	}
	for i, w := range want {
		if res[i] != w {
			t.Errorf("result %d = %+v, want %+v", i, res[i], w)
		}
	}
	if res[3].ID != "c3" || res[3].OK || !strings.Contains(res[3].Error, "kaput") {
		t.Errorf("panicking handler result = %+v", res[3])
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("echo ran %d times, want 1", n)
	}
	if st := d.Stats(); st.CommandsDeduped != 1 || st.CommandsRun != 3 {
		t.Errorf("stats = %+v", st)
	}

	// The saved result survives a device restart: c1 still does not rerun.
	d.stop()
	d2 := startDevice(t, Config{BrokerURL: b.URL(), DeviceID: id, StatePath: state})
	d2.Handle("echo", echo)
	cloud.waitFor("online again", func() bool {
		s := cloud.status[id]
		return len(s) >= 3 && s[len(s)-1].State == "online"
	})
	cloud.publish(cmdTopic, false, fleetwire.Command{ID: "c1", Name: "echo", Args: map[string]string{"text": "third"}})
	cloud.waitFor("result c1 after restart", results(5))
	cloud.mu.Lock()
	last := cloud.results[id][4]
	cloud.mu.Unlock()
	if last != want[0] || runs.Load() != 1 {
		t.Errorf("after restart: result %+v, echo ran %d times", last, runs.Load())
	}
}

func appendN(t *testing.T, s *telemetry.Store, n int, tag string) []uint64 {
	t.Helper()
	seqs := make([]uint64, 0, n)
	for i := range n {
		seq, err := s.AppendRequest(context.Background(), fleetwire.RequestRecord{TraceID: fmt.Sprintf("%s-%d", tag, i), Decision: "local", Outcome: "ok"})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	return seqs
}

// TestTelemetryFlowsAfterBrokerOutage appends while the broker is down and
// checks that, after it comes back, the acking side has every record
// exactly once (on (device, seq)) and the device deleted only what was
// acknowledged.
func TestTelemetryFlowsAfterBrokerOutage(t *testing.T) {
	for _, bk := range brokers {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.start(t)
			topics := fleetwire.Topics{}
			cloud := startCloud(t, b.URL(), topics)
			const id = "dev-tel"
			store := openStore(t)
			d := startDevice(t, Config{BrokerURL: b.URL(), DeviceID: id, Store: store,
				BatchSize: 64, UplinkRate: -1, AckTimeout: time.Second})
			var all []uint64
			all = append(all, appendN(t, store, 40, "live")...)
			cloud.waitFor("live records", func() bool { return len(cloud.seen[id]) == 40 })
			waitUntil(t, "live records acknowledged", func() bool { return store.Stats().Records == 0 })

			b.Stop()
			waitUntil(t, "device notices the outage", func() bool { return !d.Connected() })
			all = append(all, appendN(t, store, 500, "offline")...)
			if st := store.Stats(); st.Records != 500 {
				t.Fatalf("buffered while offline: %+v", st)
			}
			b.Restart()
			all = append(all, appendN(t, store, 40, "after")...)
			cloud.waitFor("every record ingested", func() bool { return len(cloud.seen[id]) == len(all) })
			waitUntil(t, "store drained", func() bool { return store.Stats().Records == 0 })

			cloud.mu.Lock()
			defer cloud.mu.Unlock()
			for _, seq := range all {
				if _, ok := cloud.seen[id][seq]; !ok {
					t.Fatalf("seq %d lost", seq)
				}
			}
			if n := len(cloud.seen[id]); n != len(all) {
				t.Fatalf("ingested %d distinct records, want %d", n, len(all))
			}
			if cloud.dropped[id] != 0 {
				t.Errorf("device reported %d dropped", cloud.dropped[id])
			}
			t.Logf("%d records, %d batches, %d redelivered and deduplicated, stats %+v", len(all), cloud.batches, cloud.redeliv, d.Stats())
		})
	}
}

// TestBacklogDrainsOldestFirst starts a device with a backlog and checks
// that the cloud first sees records in seq order, with several batches in
// flight.
func TestBacklogDrainsOldestFirst(t *testing.T) {
	b := brokertest.StartMochi(t)
	cloud := startCloud(t, b.URL(), fleetwire.Topics{})
	store := openStore(t)
	const id = "dev-backlog"
	seqs := appendN(t, store, 1000, "backlog")
	d := startDevice(t, Config{BrokerURL: b.URL(), DeviceID: id, Store: store, BatchSize: 50, MaxInFlight: 4, UplinkRate: -1})
	cloud.waitFor("backlog", func() bool { return len(cloud.seen[id]) == len(seqs) })
	waitUntil(t, "store drained", func() bool { return store.Stats().Records == 0 })
	cloud.mu.Lock()
	defer cloud.mu.Unlock()
	for i := 1; i < len(cloud.firstSeen); i++ {
		if cloud.firstSeen[i] <= cloud.firstSeen[i-1] {
			t.Fatalf("record %d arrived before %d", cloud.firstSeen[i], cloud.firstSeen[i-1])
		}
	}
	if cloud.firstSeen[0] != seqs[0] {
		t.Errorf("first record %d, want the oldest %d", cloud.firstSeen[0], seqs[0])
	}
	if st := d.Stats(); st.RecordsAcked != uint64(len(seqs)) {
		t.Errorf("stats = %+v", st)
	}
}

// TestUplinkRateLimit drains a backlog at 200 records/s in batches of 20:
// the limiter must hold batches back (the 300-record backlog would take
// 1.4 s at that rate, far longer than a loopback broker needs).
func TestUplinkRateLimit(t *testing.T) {
	b := brokertest.StartMochi(t)
	cloud := startCloud(t, b.URL(), fleetwire.Topics{})
	store := openStore(t)
	const id = "dev-rate"
	appendN(t, store, 300, "r")
	d := startDevice(t, Config{BrokerURL: b.URL(), DeviceID: id, Store: store, BatchSize: 20, UplinkRate: 200})
	cloud.waitFor("all records", func() bool { return len(cloud.seen[id]) == 300 })
	if st := d.Stats(); st.RateWaits == 0 {
		t.Errorf("rate limiter never held a batch back: %+v", st)
	}
}

// TestUnackedTelemetryIsKept: while the cloud does not acknowledge, the
// device resends but deletes nothing.
func TestUnackedTelemetryIsKept(t *testing.T) {
	b := brokertest.StartMochi(t)
	cloud := startCloud(t, b.URL(), fleetwire.Topics{})
	cloud.acking.Store(false)
	store := openStore(t)
	const id = "dev-noack"
	appendN(t, store, 30, "n")
	d := startDevice(t, Config{BrokerURL: b.URL(), DeviceID: id, Store: store, BatchSize: 10, UplinkRate: -1, AckTimeout: 200 * time.Millisecond})
	waitUntil(t, "a resend after ack timeout", func() bool { return d.Stats().AckTimeouts >= 2 })
	if st := store.Stats(); st.Records != 30 {
		t.Fatalf("records deleted without an ack: %+v", st)
	}
	cloud.acking.Store(true)
	waitUntil(t, "drained once acks flow", func() bool { return store.Stats().Records == 0 })
	cloud.mu.Lock()
	defer cloud.mu.Unlock()
	if len(cloud.seen[id]) != 30 || cloud.redeliv == 0 {
		t.Errorf("seen %d distinct, %d redelivered", len(cloud.seen[id]), cloud.redeliv)
	}
}

// timeout is the hang guard for single waits.
func timeout() <-chan time.Time { return time.After(60 * time.Second) }

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second) // hang guard only
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
