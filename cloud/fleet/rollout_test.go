package fleet

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

func registry(n int, board, version string) []*Device {
	devs := make([]*Device, n)
	for i := range devs {
		devs[i] = &Device{ID: fmt.Sprintf("car-%03d", i), Status: &fleetwire.Status{State: "online", Version: version, Board: board}}
	}
	return devs
}

// settle plays each updating device's outcome: its command ran, and it came
// back online running the new version, or the old one when fail says so.
func settle(r *Rollout, devs []*Device, at time.Time, fail func(id string) bool) {
	for _, d := range devs {
		rd := r.Devices[d.ID]
		if rd == nil || rd.State != DeviceUpdating {
			continue
		}
		d.Commands = []CommandState{{Command: fleetwire.Command{ID: rd.Command}, State: CommandDone, UpdatedAt: at}}
		d.StatusAt = at.Add(time.Second)
		d.Status = &fleetwire.Status{State: "online", Version: r.Version, Board: d.Status.Board}
		if fail(d.ID) {
			d.Status.Version, d.Status.RolledBack = rd.From, map[string]string{"agent": r.Version}
		}
	}
}

func TestPlanRolloutStagesSoakAndHalt(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	devs := registry(200, "rk3588", "1.0")
	devs = append(devs, registry(5, "rpi4", "1.0")...) // another board: never selected
	for _, d := range devs[200:] {
		d.ID = "pi-" + d.ID
	}
	r := &Rollout{ID: "r-1", Kind: "agent", Version: "2.0", Board: "rk3588", State: RolloutRunning, Devices: map[string]*RolloutDevice{},
		Spec: RolloutSpec{Artifact: "x", Stages: []float64{0.1, 0.5, 1}, MaxFailures: new(0.1), Soak: Duration(10 * time.Minute), UpdateTimeout: Duration(time.Hour), Select: map[string]string{"board": "rk3588"}}}
	var cmd int
	issue := func(ids []string) {
		for _, id := range ids {
			cmd++
			r.Devices[id].Command = fmt.Sprint("c", cmd)
		}
	}

	first := planRollout(r, devs, now)
	if len(first) != 20 || r.Selected != 200 {
		t.Fatalf("stage 1 sent %d of %d selected, want 20 of 200", len(first), r.Selected)
	}
	for _, id := range first {
		if strings.HasPrefix(id, "pi-") {
			t.Fatalf("sent to %s, which the selector excludes", id)
		}
	}
	// The same rollout picks the same devices, whatever the registry order.
	again := &Rollout{ID: "r-1", Spec: r.Spec, Kind: "agent", Version: "2.0", State: RolloutRunning, Devices: map[string]*RolloutDevice{}}
	rev := append([]*Device(nil), devs...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	if got := planRollout(again, rev, now); fmt.Sprint(sortedCopy(got)) != fmt.Sprint(sortedCopy(first)) {
		t.Fatal("stage 1 picked other devices for the same rollout")
	}
	issue(first)
	if sends := planRollout(r, devs, now.Add(time.Minute)); len(sends) != 0 {
		t.Fatalf("sent %d more while stage 1 was updating", len(sends))
	}
	// One of 20 fails (5%, under the 10% bound): the stage settles, soaks.
	failed := first[0]
	settle(r, devs, now.Add(2*time.Minute), func(id string) bool { return id == failed })
	if sends := planRollout(r, devs, now.Add(3*time.Minute)); len(sends) != 0 || r.Stage != 0 {
		t.Fatalf("advanced before the soak: stage %d, %d sent", r.Stage, len(sends))
	}
	if rd := r.Devices[failed]; rd.State != DeviceFailed || !strings.Contains(rd.Error, "rolled back") {
		t.Fatalf("the device that came back on 1.0 is %+v", rd)
	}
	second := planRollout(r, devs, now.Add(14*time.Minute))
	if r.Stage != 1 || len(second) != 80 {
		t.Fatalf("after the soak: stage %d, %d sent, want stage 1 with 80", r.Stage, len(second))
	}
	issue(second)
	// A paused rollout sends nothing and does not advance, but still
	// records outcomes.
	r.State = RolloutPaused
	settle(r, devs, now.Add(15*time.Minute), func(id string) bool { return failShare(id) < 0.3 })
	if sends := planRollout(r, devs, now.Add(40*time.Minute)); len(sends) != 0 || r.Stage != 1 || r.Progress().StageUpdating != 0 {
		t.Fatalf("paused rollout: stage %d, %d sent, %+v", r.Stage, len(sends), r.Progress())
	}
	// Resumed with ~30% of stage 2 failed: it halts by itself.
	r.State = RolloutRunning
	if sends := planRollout(r, devs, now.Add(41*time.Minute)); len(sends) != 0 || r.State != RolloutHalted {
		t.Fatalf("stage 2 with %d failures: state %s, %d sent", r.Progress().StageFailed, r.State, len(sends))
	}
	if !strings.Contains(r.Reason, "stage 2") {
		t.Fatalf("halt reason %q", r.Reason)
	}
	// It quotes one failed device of that stage, the same one each step.
	var firstFailed string
	for id, rd := range r.Devices {
		if rd.Stage == 1 && rd.State == DeviceFailed && (firstFailed == "" || id < firstFailed) {
			firstFailed = id
		}
	}
	if want := "; " + firstFailed + ": " + r.Devices[firstFailed].Error; firstFailed == "" || !strings.HasSuffix(r.Reason, want) {
		t.Fatalf("halt reason %q does not end with %q", r.Reason, want)
	}
}

func TestPlanRolloutTimeoutAndAlreadyUpdated(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	devs := registry(3, "b", "1.0")
	devs[2].Status.Version = "2.0" // already there
	r := &Rollout{ID: "r-2", Kind: "agent", Version: "2.0", State: RolloutRunning, Devices: map[string]*RolloutDevice{},
		Spec: RolloutSpec{Artifact: "x", Stages: []float64{1}, MaxFailures: new(0.5), UpdateTimeout: Duration(time.Hour)}}
	sends := planRollout(r, devs, now)
	if len(sends) != 2 || r.Devices["car-002"].State != DeviceSucceeded {
		t.Fatalf("sent %v; car-002 %+v", sends, r.Devices["car-002"])
	}
	settle(r, devs[:1], now, func(string) bool { return false })
	devs[1].Status.State = "offline" // never answers
	planRollout(r, devs, now.Add(59*time.Minute))
	if r.State != RolloutRunning {
		t.Fatalf("settled before the timeout: %s", r.State)
	}
	planRollout(r, devs, now.Add(61*time.Minute))
	if rd := r.Devices["car-001"]; rd.State != DeviceFailed || !strings.Contains(rd.Error, "no outcome") {
		t.Fatalf("offline device: %+v", rd)
	}
	if r.State != RolloutDone { // 1 of 3 failed, under the 50% bound, no soak
		t.Fatalf("state %s (%s)", r.State, r.Reason)
	}
}

func TestRolloutSpecValidate(t *testing.T) {
	for _, tt := range []struct {
		stages string
		ok     bool
	}{
		{"1%,10%,50%,100%", true}, {"0.5,1", true}, {"100%", true},
		{"10%,5%,100%", false}, {"10%,50%", false}, {"0,100%", false}, {"10%,110%", false}, {"x", false},
	} {
		st, err := ParseStages(tt.stages)
		if err == nil {
			s := RolloutSpec{Artifact: "a", Stages: st}
			s.FillDefaults()
			err = s.Validate()
		}
		if (err == nil) != tt.ok {
			t.Errorf("stages %q: err %v, want ok %v", tt.stages, err, tt.ok)
		}
	}
}

func sortedCopy(s []string) []string {
	c := append([]string(nil), s...)
	for i := range c {
		for j := i + 1; j < len(c); j++ {
			if c[j] < c[i] {
				c[i], c[j] = c[j], c[i]
			}
		}
	}
	return c
}

// failShare maps an id to [0,1): which simulated devices fail.
func failShare(id string) float64 {
	h := sha256.Sum256([]byte("fail:" + id))
	return float64(binary.BigEndian.Uint32(h[:4])) / (1 << 32)
}

// otaDevice is a simulated device on a raw MQTT v5 connection: it reports
// its status, takes update commands, downloads the artifact from the URL in
// them and checks its manifest like an agent, then comes back running the
// new version, or the old one when it is one of the devices whose updates
// fail (its supervisor rolled the trial back).
type otaDevice struct {
	id      string
	board   string
	version string
	fails   atomic.Bool
	conn    net.Conn
	pid     uint16
	updates atomic.Int32
	pub     ed25519.PublicKey
}

func (d *otaDevice) publish(topic string, v any, retain bool) error {
	d.pid++
	if d.pid == 0 {
		d.pid = 1
	}
	b, _ := json.Marshal(v)
	cp := packets.NewControlPacket(packets.PUBLISH)
	p := cp.Content.(*packets.Publish)
	p.QoS, p.PacketID, p.Topic, p.Payload, p.Retain = 1, d.pid, topic, b, retain
	_, err := cp.WriteTo(d.conn)
	return err
}

func (d *otaDevice) status(rolledBack string) error {
	st := fleetwire.Status{
		DeviceID: d.id, State: "online", Version: d.version, Board: d.board,
		Artifacts: map[string]string{"agent": d.version}, Time: time.Now(),
	}
	if rolledBack != "" {
		st.RolledBack = map[string]string{"agent": rolledBack}
	}
	return d.publish(topics.Device(d.id, fleetwire.SuffixStatus), st, true)
}

func (d *otaDevice) connect(addr string) error {
	rd := &rawDevice{id: d.id}
	var err error
	if rd.conn, err = net.Dial("tcp", addr); err != nil {
		return err
	}
	d.conn = rd.conn
	cp := packets.NewControlPacket(packets.CONNECT)
	c := cp.Content.(*packets.Connect)
	c.ClientID, c.CleanStart, c.KeepAlive = d.id, true, 120
	if err := rd.write(cp); err != nil {
		return err
	}
	if _, err := rd.read(); err != nil {
		return err
	}
	sp := packets.NewControlPacket(packets.SUBSCRIBE)
	s := sp.Content.(*packets.Subscribe)
	s.PacketID = 1
	s.Subscriptions = []packets.SubOptions{{Topic: topics.Device(d.id, fleetwire.SuffixCmd), QoS: 1}}
	if err := rd.write(sp); err != nil {
		return err
	}
	if _, err := rd.read(); err != nil {
		return err
	}
	return d.status("")
}

// serve handles commands until the connection closes.
func (d *otaDevice) serve(client *http.Client) {
	rd := &rawDevice{id: d.id, conn: d.conn}
	for {
		cp, err := rd.read()
		if err != nil {
			return
		}
		p, ok := cp.Content.(*packets.Publish)
		if !ok {
			continue
		}
		var cmd fleetwire.Command
		if json.Unmarshal(p.Payload, &cmd) != nil || cmd.Name != "update" {
			continue
		}
		d.updates.Add(1)
		res := fleetwire.CommandResult{ID: cmd.ID, OK: true}
		man, err := d.download(client, cmd.Args["url"])
		if err != nil {
			res.OK, res.Error = false, err.Error()
		}
		if err := d.publish(topics.Device(d.id, fleetwire.SuffixCmdResult), res, false); err != nil {
			return
		}
		if !res.OK {
			continue
		}
		rolledBack := man.Version // the trial failed its health check
		if !d.fails.Load() {
			d.version, rolledBack = man.Version, ""
		}
		if d.status(rolledBack) != nil { // back from the restart
			return
		}
	}
}

func (d *otaDevice) download(client *http.Client, url string) (firmware.Manifest, error) {
	resp, err := client.Get(url)
	if err != nil {
		return firmware.Manifest{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return firmware.Manifest{}, fmt.Errorf("download: %s", resp.Status)
	}
	v, err := firmware.Open(resp.Body, firmware.Policy{TrustedKey: d.pub, Board: d.board, RunningVersion: d.version})
	if err != nil {
		return firmware.Manifest{}, err
	}
	return v.Manifest, nil
}

// serveDevices serves each connected device's commands until the returned
// stop closes their connections and waits for them.
func serveDevices(devs []*otaDevice, client *http.Client) (stop func()) {
	var served sync.WaitGroup
	for _, d := range devs {
		served.Add(1)
		go func() { defer served.Done(); d.serve(client) }()
	}
	return func() {
		for _, d := range devs {
			d.conn.Close()
		}
		served.Wait()
	}
}

// TestRolloutThousandDevices rolls a signed agent bundle out to 1,000
// simulated devices (200 under -race) on the embedded broker in four stages, restarting the
// cloud half-way (the rollout resumes from bbolt); 2% of the devices fail
// their update and the rollout completes under its 5% bound. A second
// rollout, of a build that fails everywhere, halts in its first stage by
// itself and never reaches the rest of the fleet.
func TestRolloutThousandDevices(t *testing.T) {
	n := 1000
	if raceEnabled {
		n = 200 // the race detector makes a thousand take minutes; make test also runs this without it
	}
	pub, priv, _ := ed25519.GenerateKey(nil)
	b := startBroker(t, broker.Config{DevAuth: true})
	dataDir := t.TempDir()
	clock := &fakeClock{t: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)}
	var mgr atomic.Pointer[Manager]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mgr.Load().ArtifactHandler().ServeHTTP(w, r) }))
	defer srv.Close()
	open := func() *Manager {
		m, err := Open(Config{DataDir: dataDir, Broker: b, Now: clock.now, PublicURL: srv.URL, OTAPub: pub, RolloutInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		mgr.Store(m)
		return m
	}
	m := open()
	defer func() { mgr.Load().Close() }()

	devs := make([]*otaDevice, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 128)
	for i := range devs {
		d := &otaDevice{id: fmt.Sprintf("car-%04d", i), board: "rk3588", version: "1.0", pub: pub}
		devs[i] = d
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := d.connect(b.TCPAddr()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	defer serveDevices(devs, client)()
	start := time.Now()
	defer func() { t.Logf("took %v", time.Since(start)) }()
	waitFor(t, "every device online", func() bool {
		ds, _ := m.Devices()
		on := 0
		for _, d := range ds {
			if d.State() == "online" {
				on++
			}
		}
		return on == n
	})

	upload := func(version string) string {
		var bb bytes.Buffer
		if err := firmware.Write(&bb, priv, version, "rk3588", map[string][]byte{"phaseless-agent": []byte("agent " + version)}, []string{"phaseless-agent"}); err != nil {
			t.Fatal(err)
		}
		info, err := mgr.Load().PutArtifact(&bb)
		if err != nil {
			t.Fatal(err)
		}
		return info.ID
	}
	ctx := context.Background()
	stages, _ := ParseStages("1%,10%,50%,100%")
	r, err := m.CreateRollout(ctx, RolloutSpec{Artifact: upload("2.0"), Stages: stages, MaxFailures: new(0.05), Soak: Duration(10 * time.Minute), Select: map[string]string{"board": "rk3588"}})
	if err != nil {
		t.Fatal(err)
	}
	// Every 50th device in the rollout's order fails, past the first stage
	// (already sent to): 2% of each later stage, under the 5% bound.
	sort.Slice(devs, func(i, j int) bool { return rolloutOrder(r.ID, devs[i].id) < rolloutOrder(r.ID, devs[j].id) })
	for i, d := range devs {
		d.fails.Store(i >= 10 && i%50 == 0)
	}
	stageOf := func() (int, string) {
		ro, err := mgr.Load().Rollout(r.ID)
		if err != nil {
			t.Fatal(err)
		}
		return ro.Stage, ro.State
	}
	settled := func(stage int) func() bool {
		return func() bool {
			ro, _ := mgr.Load().Rollout(r.ID)
			return ro != nil && (ro.State != RolloutRunning || ro.Stage == stage && !ro.StageSettledAt.IsZero())
		}
	}
	for want := 0; want < 4; want++ {
		if !waitUntil(settled(want)) {
			ro, _ := mgr.Load().Rollout(r.ID)
			t.Fatalf("stage %d never settled: at stage %d %s %+v", want+1, ro.Stage, ro.State, ro.Progress())
		}
		if st, state := stageOf(); st != want || state != RolloutRunning {
			ro, _ := mgr.Load().Rollout(r.ID)
			for id, rd := range ro.Devices {
				if rd.State == DeviceFailed {
					t.Logf("%s failed: %s", id, rd.Error)
				}
			}
			t.Fatalf("stage %d: at stage %d, %s (%s) %+v", want+1, st, state, ro.Reason, ro.Progress())
		}
		if want == 1 { // the cloud restarts mid-rollout
			mgr.Load().Close()
			open()
		}
		t.Logf("stage %d settled after %v", want+1, time.Since(start).Round(time.Millisecond))
		clock.advance(11 * time.Minute) // the soak passes
	}
	if !waitUntil(func() bool { _, s := stageOf(); return s == RolloutDone }) {
		t.Fatal("rollout 1 never finished")
	}
	ro, _ := mgr.Load().Rollout(r.ID)
	p := ro.Progress()
	wantFailed := 0
	for _, d := range devs {
		if d.fails.Load() {
			wantFailed++
		}
		if d.updates.Load() != 1 {
			t.Fatalf("%s got the update %d times", d.id, d.updates.Load())
		}
	}
	if p.Succeeded+p.Failed != n || p.Failed != wantFailed {
		t.Fatalf("progress %+v, want %d failed of %d", p, wantFailed, n)
	}
	t.Logf("rollout 1: %d devices, %d failed (rolled back), done", n, p.Failed)

	// Rollout 2 is a build that fails its health check everywhere: it
	// halts in its first stage by itself and reaches no one else.
	for _, d := range devs {
		d.fails.Store(true)
	}
	r2, err := mgr.Load().CreateRollout(ctx, RolloutSpec{Artifact: upload("3.0"), Stages: stages, MaxFailures: new(0.05)})
	if err != nil {
		t.Fatal(err)
	}
	if !waitUntil(func() bool { ro, _ := mgr.Load().Rollout(r2.ID); return ro.State != RolloutRunning }) {
		t.Fatal("rollout 2 never halted")
	}
	ro2, _ := mgr.Load().Rollout(r2.ID)
	if ro2.State != RolloutHalted || ro2.Stage != 0 || len(ro2.Devices) != (n+99)/100 {
		t.Fatalf("rollout 2: %s after %d devices (%s)", ro2.State, len(ro2.Devices), ro2.Reason)
	}
	got := 0
	for _, d := range devs {
		got += int(d.updates.Load()) - 1
	}
	if got != len(ro2.Devices) {
		t.Fatalf("%d devices got rollout 2's update, the rollout counts %d", got, len(ro2.Devices))
	}
	t.Logf("rollout 2 halted at stage %d after %d devices: %s", ro2.Stage+1, len(ro2.Devices), ro2.Reason)
}

// waitUntil is waitFor that lets the caller explain a time-out.
func waitUntil(cond func() bool) bool {
	// Polls slowly: each look decodes a rollout of a thousand devices.
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// A rollout copies each device's download of its bundle (the status's
// update, for the rollout's URL only) and sums it per stage.
func TestRolloutCountsBytesPerStage(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	devs := registry(2, "b", "1.0")
	r := &Rollout{ID: "r-3", Kind: "model", Version: "2.0", URL: "http://cloud/v1/fleet/artifacts/a1", State: RolloutRunning, Devices: map[string]*RolloutDevice{},
		Spec: RolloutSpec{Artifact: "a1", Stages: []float64{1}, MaxFailures: new(0.5), UpdateTimeout: Duration(time.Hour)}}
	planRollout(r, devs, now)
	devs[0].Status.Update = &fleetwire.UpdateStatus{URL: r.URL, State: fleetwire.UpdateDownloading, FullBytes: 1000, PlannedBytes: 40, TransferredBytes: 20}
	devs[1].Status.Update = &fleetwire.UpdateStatus{URL: "http://cloud/v1/fleet/artifacts/other", FullBytes: 9999, PlannedBytes: 9999, TransferredBytes: 9999}
	planRollout(r, devs, now.Add(time.Minute))
	if b := r.Bytes(); len(b) != 1 || b[0] != (StageBytes{Full: 1000, Planned: 40, Transferred: 20}) {
		t.Fatalf("stage bytes %+v", b)
	}
}
