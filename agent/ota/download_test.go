package ota

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/pem"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/crashtest"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/models/predictor/onnxpb"
	"github.com/phaseless/phaseless/transport/fleetwire"
	"github.com/phaseless/phaseless/transport/linkemu"
)

// fakeClock's After fires at once and moves the clock by d: waits take no
// wall-clock time and the clock says how long they would have taken.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// bundleServer serves bundles by path with range support (as the cloud's
// artifact endpoint does, through http.ServeContent) and counts the body
// bytes it writes.
type bundleServer struct {
	*httptest.Server
	mu      sync.Mutex // guards bundles
	bundles map[string][]byte
	sent    atomic.Int64
	onWrite func(total int64) // called after each write, may be nil
}

type countingWriter struct {
	http.ResponseWriter
	s *bundleServer
}

func (w countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	total := w.s.sent.Add(int64(n))
	if w.s.onWrite != nil {
		w.s.onWrite(total)
	}
	return n, err
}

func newBundleServer(t *testing.T) *bundleServer {
	s := &bundleServer{bundles: map[string][]byte{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		b, ok := s.bundles[r.URL.Path]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(countingWriter{w, s}, r, "bundle.plota", time.Time{}, bytes.NewReader(b))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *bundleServer) add(t *testing.T, priv ed25519.PrivateKey, path string, m firmware.Manifest, name string, data []byte) int {
	var b bytes.Buffer
	if err := firmware.WriteManifest(&b, priv, m, map[string][]byte{name: data}, []string{name}); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.bundles[path] = b.Bytes()
	s.mu.Unlock()
	return b.Len()
}

// headerBytes is what a device that holds all of bundle's files fetches
// of it: its header, or the header probe if that is more.
func headerBytes(t *testing.T, bundle []byte) int64 {
	t.Helper()
	n, err := firmware.HeaderSize(bundle)
	if err != nil {
		t.Fatal(err)
	}
	return max(n, firmware.HeaderProbe)
}

func testKey(t *testing.T) (string, ed25519.PrivateKey) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	p := filepath.Join(t.TempDir(), "ota-pub.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: firmware.PublicKeyPEMType, Bytes: pub}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, priv
}

func randomBinary(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func update(t *testing.T, o *Updater, u string) (string, error) {
	t.Helper()
	return o.Update(context.Background(), fleetwire.Command{ID: u, Name: "update", Args: map[string]string{"url": u}})
}

const agentFile = "bin/phaseless-agent"

// An agent build that differs from the installed one by a few bytes costs
// the chunks around the change, assembled in the inactive slot from the
// other slot's file; a bundle made before chunk lists still installs, as a
// whole download.
func TestChunkedUpdateFetchesOnlyChangedChunks(t *testing.T) {
	pubPath, priv := testKey(t)
	srv := newBundleServer(t)
	v2 := randomBinary(1, 3<<20)
	v3 := append(append(append([]byte{}, v2[:1<<20]...), "one changed line\n"...), v2[1<<20:]...)
	full2 := srv.add(t, priv, "/2.0", firmware.Manifest{Version: "2.0", Board: "rpi4"}, agentFile, v2)
	full3 := srv.add(t, priv, "/3.0", firmware.Manifest{Version: "3.0", Board: "rpi4"}, agentFile, v3)
	full4 := srv.add(t, priv, "/4.0", firmware.Manifest{Version: "4.0", Board: "rpi4", WholeFile: true}, agentFile, v2)

	o, err := Open(Config{DataDir: t.TempDir(), Board: "rpi4", OTAPub: pubPath, Origins: []string{srv.URL}, Slot: "a", Clock: &fakeClock{}})
	if err != nil {
		t.Fatal(err)
	}
	step := func(name string, full int) int64 {
		t.Helper()
		before := srv.sent.Load()
		out, err := update(t, o, srv.URL+"/"+name)
		if err != nil {
			t.Fatalf("update %s: %v", name, err)
		}
		if st := o.slots.State(); st.Trial == "" || st.Versions[st.Trial] != name {
			t.Fatalf("update %s: %q, slots %+v", name, out, st)
		}
		commitTrial(t, o)
		sent := srv.sent.Load() - before
		st := o.UpdateStatus()
		if st.State != fleetwire.UpdateInstalled || st.Version != name || st.TransferredBytes != sent || st.FullBytes != int64(full) {
			t.Errorf("update %s: status %+v, server sent %d of %d", name, st, sent, full)
		}
		t.Logf("%s: %d of %d bytes (%.1f%%)", name, sent, full, 100*float64(sent)/float64(full))
		return sent
	}
	if sent := step("2.0", full2); sent < int64(len(v2)) {
		t.Errorf("first install fetched %d bytes, less than the file", sent)
	}
	if sent := step("3.0", full3); sent > int64(full3)/10 {
		t.Errorf("a 17-byte change fetched %d of %d bytes", sent, full3)
	} else if cost, err := firmware.FetchCost(srv.bundles["/3.0"], map[string][]byte{agentFile: v2}); err != nil || cost.Fetch != sent {
		// phaselessctl ota delta prices an update with FetchCost: it must
		// be what the device fetches.
		t.Errorf("FetchCost %+v (%v), the device fetched %d", cost, err, sent)
	}
	got, err := os.ReadFile(filepath.Join(o.slots.Path("a"), filepath.FromSlash(agentFile)))
	if err != nil || !bytes.Equal(got, v3) {
		t.Fatalf("slot a does not hold 3.0: %v", err)
	}
	if sent := step("4.0", full4); sent < int64(len(v2)) {
		t.Errorf("a whole-file bundle fetched %d bytes, less than the file", sent)
	}
	if n := o.dl.store.used(); n != 0 {
		t.Errorf("the chunk store holds %d bytes after the install", n)
	}
}

// commitTrial commits the slot on trial as the device does: the trial
// build's own process answers "ota-commit" (the supervisor's commit after
// /readyz is the same change of the slots, seen by WatchCommit).
func commitTrial(t *testing.T, o *Updater) {
	t.Helper()
	trial, err := Open(Config{DataDir: o.dataDir, Board: o.board, Slot: o.slots.State().Trial, Clock: &fakeClock{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trial.Commit(context.Background(), fleetwire.Command{Name: "ota-commit"}); err != nil {
		t.Fatal(err)
	}
}

// The chunk store is emptied when an update is committed, not when its
// files are written: a trial that is rolled back keeps its chunks (for a
// retry, or a fixed build that shares them), and so does every restart
// until the commit.
func TestChunkStoreKeptUntilCommit(t *testing.T) {
	pubPath, priv := testKey(t)
	srv := newBundleServer(t)
	srv.add(t, priv, "/2.0", firmware.Manifest{Version: "2.0", Board: "rpi4"}, agentFile, randomBinary(11, 1<<20))
	// install opens a device on a fresh data directory and installs 2.0
	// on trial; open is a start of that device's agent in a slot.
	install := func(t *testing.T) (open func(slot string) *Updater, held int64) {
		t.Helper()
		dir := t.TempDir()
		open = func(slot string) *Updater {
			t.Helper()
			o, err := Open(Config{DataDir: dir, Board: "rpi4", OTAPub: pubPath, Origins: []string{srv.URL}, Slot: slot, Clock: &fakeClock{}})
			if err != nil {
				t.Fatal(err)
			}
			return o
		}
		o := open("a")
		if _, err := update(t, o, srv.URL+"/2.0"); err != nil {
			t.Fatal(err)
		}
		if held = o.dl.store.used(); held < 1<<20 {
			t.Fatalf("after the install, on trial: the chunk store holds %d bytes, want the file's chunks", held)
		}
		return open, held
	}

	t.Run("commit", func(t *testing.T) {
		open, held := install(t)
		trial := open("b") // the trial build starts: not committed yet
		if n := trial.dl.store.used(); n != held {
			t.Fatalf("the trial build's start left %d bytes of %d in the store", n, held)
		}
		if _, err := trial.Commit(context.Background(), fleetwire.Command{Name: "ota-commit"}); err != nil {
			t.Fatal(err)
		}
		if n := trial.dl.store.used(); n != 0 {
			t.Errorf("after the commit the chunk store holds %d bytes", n)
		}
	})
	t.Run("rollback", func(t *testing.T) {
		open, held := install(t)
		o := open("b")
		// The trial fails; the supervisor rolls it back and starts slot a.
		if err := o.slots.Rollback(); err != nil {
			t.Fatal(err)
		}
		o = open("a")
		if n := o.dl.store.used(); n != held {
			t.Fatalf("after a rollback and a restart the store holds %d bytes, was %d", n, held)
		}
		before := srv.sent.Load()
		if _, err := update(t, o, srv.URL+"/2.0"); err != nil {
			t.Fatal(err)
		}
		if sent, hdr := srv.sent.Load()-before, headerBytes(t, srv.bundles["/2.0"]); sent > hdr {
			t.Errorf("the update tried again fetched %d bytes, more than its %d-byte header", sent, hdr)
		}
	})
}

// A download whose link is cut half-way resumes: the cut chunk by a range
// request from where it stopped, so the whole costs at most one chunk more
// than planned. The link is transport/linkemu's TCP relay; the cut closes
// it (resetting the connection) and a new relay takes its place.
func TestUpdateResumesAfterLinkCut(t *testing.T) {
	pubPath, priv := testKey(t)
	srv := newBundleServer(t)
	data := randomBinary(2, 2<<20)
	full := srv.add(t, priv, "/2.0", firmware.Manifest{Version: "2.0", Board: "rpi4"}, agentFile, data)

	var mu sync.Mutex // guards relay
	newRelay := func() *linkemu.TCPRelay {
		r, err := linkemu.ListenTCP(linkemu.Config{Target: srv.Listener.Addr().String(), Profile: linkemu.Profile{Name: "cut"}, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	relay := newRelay()
	defer func() { mu.Lock(); relay.Close(); mu.Unlock() }()
	var cut atomic.Bool
	srv.onWrite = func(total int64) {
		if total >= int64(full)/2 && cut.CompareAndSwap(false, true) {
			mu.Lock()
			old := relay
			relay = newRelay()
			mu.Unlock()
			old.Close()
		}
	}
	o, err := Open(Config{DataDir: t.TempDir(), Board: "rpi4", OTAPub: pubPath, Origins: []string{srv.URL}, Slot: "a", Clock: &fakeClock{}})
	if err != nil {
		t.Fatal(err)
	}
	o.client.Transport = &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		mu.Lock()
		addr := relay.Addr().String()
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	defer o.client.CloseIdleConnections()
	if _, err := update(t, o, srv.URL+"/2.0"); err != nil {
		t.Fatal(err)
	}
	if !cut.Load() {
		t.Fatal("the link was never cut")
	}
	got, err := os.ReadFile(filepath.Join(o.slots.Path("b"), filepath.FromSlash(agentFile)))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("slot b: %v", err)
	}
	st := o.UpdateStatus()
	if extra := st.TransferredBytes - st.PlannedBytes; extra < 0 || extra > 256<<10 {
		t.Errorf("planned %d bytes, fetched %d: %d more than one chunk (256 KiB at most)", st.PlannedBytes, st.TransferredBytes, extra)
	}
	t.Logf("planned %d, device fetched %d, server sent %d", st.PlannedBytes, st.TransferredBytes, srv.sent.Load())
}

// update-bandwidth holds a download to its rate: by the fake clock the
// pacer waits on, the bytes fetched over the time it took are at most the
// cap (plus the one second of burst the bucket holds).
func TestUpdateBandwidthCap(t *testing.T) {
	pubPath, priv := testKey(t)
	srv := newBundleServer(t)
	srv.add(t, priv, "/2.0", firmware.Manifest{Version: "2.0", Board: "rpi4"}, agentFile, randomBinary(3, 1<<20))
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	const rate = 100 << 10
	o, err := Open(Config{DataDir: t.TempDir(), Board: "rpi4", OTAPub: pubPath, Origins: []string{srv.URL}, Slot: "a", Clock: clock, Link: LinkPolicy{Bandwidth: rate}})
	if err != nil {
		t.Fatal(err)
	}
	start := clock.Now()
	if _, err := update(t, o, srv.URL+"/2.0"); err != nil {
		t.Fatal(err)
	}
	took := clock.Now().Sub(start).Seconds()
	st := o.UpdateStatus()
	if st.Bandwidth != rate {
		t.Errorf("status reports bandwidth %d", st.Bandwidth)
	}
	if limit := float64(rate) * (took + 1); float64(st.TransferredBytes) > limit {
		t.Errorf("%d bytes in %.1f s at a cap of %d bytes/s", st.TransferredBytes, took, rate)
	}
	if want := float64(st.TransferredBytes)/rate - 1; took < want {
		t.Errorf("took %.1f s, want at least %.1f", took, want)
	}
	t.Logf("%d bytes in %.1f s of the fake clock (cap %d B/s)", st.TransferredBytes, took, rate)
}

// On a metered link with update-on-metered defer, an update fetches
// nothing and is reported deferred; when the policy allows it, RunPending
// downloads and installs it.
func TestMeteredUpdateDeferred(t *testing.T) {
	pubPath, priv := testKey(t)
	srv := newBundleServer(t)
	srv.add(t, priv, "/2.0", firmware.Manifest{Version: "2.0", Board: "rpi4"}, agentFile, randomBinary(4, 100<<10))
	o, err := Open(Config{DataDir: t.TempDir(), Board: "rpi4", OTAPub: pubPath, Origins: []string{srv.URL}, Slot: "a", Clock: &fakeClock{}, Link: LinkPolicy{Metered: true}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := update(t, o, srv.URL+"/2.0")
	if err != nil || !strings.Contains(out, "deferred") {
		t.Fatalf("update on a metered link: %q %v", out, err)
	}
	if st := o.UpdateStatus(); st.State != fleetwire.UpdateDeferred || !st.Metered || st.OnMetered != MeteredDefer || srv.sent.Load() != 0 {
		t.Fatalf("status %+v, %d bytes sent", st, srv.sent.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); o.RunPending(ctx) }()
	defer func() { cancel(); <-done }()
	o.SetLink(LinkPolicy{Metered: true, OnMetered: MeteredAllow})
	deadline := time.Now().Add(10 * time.Second)
	for o.UpdateStatus().State != fleetwire.UpdateInstalled {
		if time.Now().After(deadline) {
			t.Fatalf("not installed after the policy allowed it: %+v", o.UpdateStatus())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := o.slots.State(); st.Trial != "b" || st.Versions["b"] != "2.0" {
		t.Fatalf("slots %+v", st)
	}
}

// An update that does not fit the free space is refused before its
// download, with a status that says so.
func TestUpdateRefusedWhenDiskFull(t *testing.T) {
	pubPath, priv := testKey(t)
	srv := newBundleServer(t)
	full := srv.add(t, priv, "/2.0", firmware.Manifest{Version: "2.0", Board: "rpi4"}, agentFile, randomBinary(5, 1<<20))
	o, err := Open(Config{DataDir: t.TempDir(), Board: "rpi4", OTAPub: pubPath, Origins: []string{srv.URL}, Slot: "a", Clock: &fakeClock{}})
	if err != nil {
		t.Fatal(err)
	}
	o.dl.free = func(string) (int64, error) { return 1 << 20, nil } // less than chunks + file
	_, err = update(t, o, srv.URL+"/2.0")
	if err == nil || !strings.Contains(err.Error(), "refused before download") {
		t.Fatalf("update on a full disk: %v", err)
	}
	st := o.UpdateStatus()
	if st.State != fleetwire.UpdateRefused || !strings.Contains(st.Error, "free") {
		t.Fatalf("status %+v", st)
	}
	if sent := srv.sent.Load(); sent > int64(full)/10 {
		t.Errorf("a refused update fetched %d of %d bytes", sent, full)
	}
	if o.slots.State().Trial != "" {
		t.Fatal("a refused update was installed")
	}
	// The chunk store's bound refuses it too, whatever the disk holds.
	o.dl.free = func(string) (int64, error) { return 1 << 40, nil }
	o.dl.store.max = 64 << 10
	if _, err := update(t, o, srv.URL+"/2.0"); err == nil || !strings.Contains(err.Error(), "chunk store holds at most") {
		t.Fatalf("update over the chunk store's bound: %v", err)
	}
	o.dl.store.max = defaultChunkStore
	if _, err := update(t, o, srv.URL+"/2.0"); err != nil {
		t.Fatalf("update that fits: %v", err)
	}
}

// A download killed with SIGKILL half-way resumes in the next process:
// it fetches only what the first one had not stored (whole chunks and the
// bytes of the chunk it was in), then installs.
func TestUpdateResumesAfterKill(t *testing.T) {
	data := randomBinary(6, 2<<20)
	if crashtest.IsChild(t) {
		crashtest.Start(t, "", 0, func(arg string, ack *crashtest.Acker) {
			p := strings.Split(arg, "|")
			o, err := Open(Config{DataDir: p[0], Board: "rpi4", OTAPub: p[2], Origins: []string{p[1]}, Slot: "a", Link: LinkPolicy{Bandwidth: 1 << 20}})
			if err != nil {
				crashtest.Fail("open: %v", err)
			}
			go func() {
				for {
					if st := o.UpdateStatus(); st.PlannedBytes > 0 && st.TransferredBytes >= st.PlannedBytes/2 {
						ack.Ack("half")
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
			_, err = update(t, o, p[1]+"/2.0")
			crashtest.Fail("the download finished before the kill: %v", err)
		})
	}
	pubPath, priv := testKey(t)
	srv := newBundleServer(t)
	srv.add(t, priv, "/2.0", firmware.Manifest{Version: "2.0", Board: "rpi4"}, agentFile, data)
	dir := t.TempDir()
	p := crashtest.Start(t, dir+"|"+srv.URL+"|"+pubPath, 0, nil)
	p.Ack()
	p.Kill()

	o, err := Open(Config{DataDir: dir, Board: "rpi4", OTAPub: pubPath, Origins: []string{srv.URL}, Slot: "a", Clock: &fakeClock{}})
	if err != nil {
		t.Fatal(err)
	}
	st := o.UpdateStatus()
	held := o.dl.store.used()
	if st.State != fleetwire.UpdateDownloading || held < st.PlannedBytes/4 {
		t.Fatalf("after the kill: status %+v, %d bytes stored", st, held)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); o.RunPending(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(20 * time.Second)
	for o.UpdateStatus().State != fleetwire.UpdateInstalled {
		if time.Now().After(deadline) {
			t.Fatalf("not resumed: %+v", o.UpdateStatus())
		}
		time.Sleep(10 * time.Millisecond)
	}
	got, err := os.ReadFile(filepath.Join(o.slots.Path("b"), filepath.FromSlash(agentFile)))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("slot b after the resumed download: %v", err)
	}
	// Every try fetches the header probe again; beyond it, only what the
	// store lacked.
	if fetched, want := o.dl.got.Load(), st.PlannedBytes-held+firmware.HeaderProbe; fetched > want {
		t.Errorf("the resumed download fetched %d bytes; %d were planned and %d stored before the kill", fetched, st.PlannedBytes, held)
	}
	t.Logf("planned %d, stored before the kill %d, fetched after it %d", st.PlannedBytes, held, o.dl.got.Load())
}

// A router-model bundle (a hot-swapped kind) whose file the agent already
// runs costs the header probe only: its chunks come from what the agent
// started with, then from the installed version, and the swapped-in
// router passes its health check.
func TestChunkedRouterUpdateReusesWhatRuns(t *testing.T) {
	pubPath, priv := testKey(t)
	srv := newBundleServer(t)
	shipped := predictor.Shipped()
	for _, v := range []string{"1.1", "1.2"} {
		srv.add(t, priv, "/"+v, firmware.Manifest{Version: v, Board: "rpi4", Kind: firmware.KindPredictor}, "router.onnx", shipped)
	}
	m, err := predictor.Default()
	if err != nil {
		t.Fatal(err)
	}
	pred := predictor.NewSwappable(m)
	o, err := Open(Config{DataDir: t.TempDir(), Board: "rpi4", OTAPub: pubPath, Origins: []string{srv.URL}, Clock: &fakeClock{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.OpenArtifacts(context.Background(), Targets{Router: pred, RouterOwn: Source{Bytes: shipped, Name: "predictor.onnx"}}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"1.1", "1.2"} {
		before := srv.sent.Load()
		if _, err := update(t, o, srv.URL+"/"+v); err != nil {
			t.Fatalf("update %s: %v", v, err)
		}
		if sent := srv.sent.Load() - before; sent > firmware.HeaderProbe {
			t.Errorf("router %s: fetched %d bytes of a file the device runs", v, sent)
		}
		if got := o.hot[firmware.KindPredictor].version(); got != v {
			t.Fatalf("router in force %q, want %s", got, v)
		}
	}
	if err := predictor.Validate(pred); err != nil {
		t.Fatal(err)
	}
	o.hot[firmware.KindPredictor].own = Source{} // the installed 1.2 alone seeds the next
	srv.add(t, priv, "/1.3", firmware.Manifest{Version: "1.3", Board: "rpi4", Kind: firmware.KindPredictor}, "router.onnx", shipped)
	before := srv.sent.Load()
	if _, err := update(t, o, srv.URL+"/1.3"); err != nil {
		t.Fatal(err)
	}
	if sent := srv.sent.Load() - before; sent > firmware.HeaderProbe {
		t.Errorf("router 1.3: fetched %d bytes of the installed version's file", sent)
	}

	// A router whose output layer and threshold alone changed (what
	// `model train --head` makes) costs the header and those chunks: its
	// first layer's 57 KB come from the installed file.
	head := retrainedHead(t, shipped)
	full := srv.add(t, priv, "/1.4", firmware.Manifest{Version: "1.4", Board: "rpi4", Kind: firmware.KindPredictor}, "router.onnx", head)
	before = srv.sent.Load()
	if _, err := update(t, o, srv.URL+"/1.4"); err != nil {
		t.Fatal(err)
	}
	sent := srv.sent.Load() - before
	if limit := headerBytes(t, srv.bundles["/1.4"]) + 2<<10; sent > limit {
		t.Errorf("router 1.4 (new output layer): fetched %d of %d bytes, want at most %d", sent, full, limit)
	}
	if cost, err := firmware.FetchCost(srv.bundles["/1.4"], map[string][]byte{"router.onnx": shipped}); err != nil || cost.Fetch != sent {
		t.Errorf("FetchCost %+v (%v), the device fetched %d", cost, err, sent)
	}
	if th, ok := pred.Threshold(); !ok || th != 0.25 {
		t.Errorf("router in force has threshold %v (%v), want 1.4's 0.25", th, ok)
	}
	t.Logf("router 1.4: %d of %d bytes (%.1f%%)", sent, full, 100*float64(sent)/float64(full))
}

// retrainedHead is the router model with its output layer and threshold
// changed and its first layer as it was.
func retrainedHead(t *testing.T, model []byte) []byte {
	t.Helper()
	m, err := onnxpb.Unmarshal(model)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Graph.Initializers {
		if in := &m.Graph.Initializers[i]; in.Name == "w2" || in.Name == "b2" {
			for j := range in.Floats {
				in.Floats[j] *= 1.1
			}
		}
	}
	for i := range m.Metadata {
		if m.Metadata[i].Key == predictor.MetaThreshold {
			m.Metadata[i].Value = "0.2500"
		}
	}
	return onnxpb.Marshal(m)
}

// An update sent while the link is down is not a failed update: the
// command says the download resumes, the status stays downloading, and
// RunPending installs it once the link is back.
func TestUpdateWhileLinkDownResumes(t *testing.T) {
	pubPath, priv := testKey(t)
	srv := newBundleServer(t)
	srv.add(t, priv, "/2.0", firmware.Manifest{Version: "2.0", Board: "rpi4"}, agentFile, randomBinary(7, 300<<10))
	o, err := Open(Config{DataDir: t.TempDir(), Board: "rpi4", OTAPub: pubPath, Origins: []string{srv.URL}, Slot: "a", Clock: &fakeClock{}})
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	down.Store(true)
	o.client.Transport = &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if down.Load() {
			return nil, &net.OpError{Op: "dial", Net: network, Err: os.ErrDeadlineExceeded}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	defer o.client.CloseIdleConnections()
	out, err := update(t, o, srv.URL+"/2.0")
	if err != nil || !strings.Contains(out, "resumes in the background") {
		t.Fatalf("update with the link down: %q %v", out, err)
	}
	if st := o.UpdateStatus(); st.State != fleetwire.UpdateDownloading || st.Error == "" {
		t.Fatalf("status %+v", st)
	}
	down.Store(false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); o.RunPending(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for o.UpdateStatus().State != fleetwire.UpdateInstalled {
		if time.Now().After(deadline) {
			t.Fatalf("not installed once the link was back: %+v", o.UpdateStatus())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
