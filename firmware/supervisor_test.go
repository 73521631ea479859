package firmware

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The supervisor tests run real processes: this test binary re-executed in
// a role. A slot's "agent" is a copy of the test binary plus a mode file
// that says how it behaves; the factory agent (slot a before any update) is
// the test binary itself and always behaves.
const (
	envRole   = "FIRMWARE_TEST_ROLE"   // "agent" or "updater"
	envAddr   = "FIRMWARE_TEST_ADDR"   // where a fake agent serves /readyz
	envDir    = "FIRMWARE_TEST_DIR"    // the updater's slot directory
	envBundle = "FIRMWARE_TEST_BUNDLE" // the updater's bundle file
	envPub    = "FIRMWARE_TEST_PUB"    // the updater's trusted key, hex
)

func TestMain(m *testing.M) {
	switch os.Getenv(envRole) {
	case "agent":
		fakeAgent()
	case "updater":
		updater()
	default:
		os.Exit(m.Run())
	}
}

// fakeAgent behaves as its slot's mode file says: "good" (or no file)
// answers /readyz 200, "crash" exits at once, "unready" answers 503. POST
// /exit makes it exit 0, as the real agent does after installing an update.
func fakeAgent() {
	self, _ := os.Executable()
	mode := "good"
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(self), "mode")); err == nil {
		mode = string(b)
	}
	if mode == "crash" {
		os.Exit(3)
	}
	ln, err := net.Listen("tcp", os.Getenv(envAddr))
	if err != nil {
		os.Exit(4)
	}
	exit := make(chan struct{}, 1)
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/exit":
			exit <- struct{}{}
		case mode == "good":
			fmt.Fprintf(w, "%s %s", os.Getenv(EnvSlot), os.Getenv(EnvSlotVersion))
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	select {
	case <-term:
	case <-exit:
	}
	os.Exit(0)
}

// updater does what a device does for one update, start to finish: verify
// and install the bundle, then boot the trial under the supervisor until it
// is committed or rolled back. The crash test kills it anywhere on the way.
func updater() {
	slots, err := OpenSlots(os.Getenv(envDir), "1.0")
	if err != nil {
		os.Exit(5)
	}
	raw, err := os.ReadFile(os.Getenv(envBundle))
	if err != nil {
		os.Exit(6)
	}
	pub, _ := hex.DecodeString(os.Getenv(envPub))
	_, running := slots.Running()
	v, err := Open(bytes.NewReader(raw), Policy{TrustedKey: ed25519.PublicKey(pub), Board: "rpi4", RunningVersion: running})
	if err != nil {
		os.Exit(7)
	}
	if _, err := slots.Install(v); err != nil {
		os.Exit(8)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sup := testSupervisor(slots, os.Getenv(envAddr))
	go func() {
		for slots.State().Trial != "" {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	if err := sup.Run(ctx); err != nil {
		os.Exit(9)
	}
	os.Exit(0)
}

func testSupervisor(slots *Slots, addr string) *Supervisor {
	self, _ := os.Executable()
	client := &http.Client{}
	return &Supervisor{
		Slots:        slots,
		Factory:      self,
		Env:          []string{envRole + "=agent", envAddr + "=" + addr},
		TrialTimeout: time.Minute,
		ProbeEvery:   10 * time.Millisecond,
		RestartDelay: 10 * time.Millisecond, MaxRestartDelay: 200 * time.Millisecond,
		StopGrace: 5 * time.Second,
		Healthy: func(ctx context.Context) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("readyz: %s", resp.Status)
			}
			return nil
		},
	}
}

// agentBundle is a signed bundle whose agent is this test binary behaving
// as mode says.
func agentBundle(t testing.TB, priv ed25519.PrivateKey, version, mode string) []byte {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	files := map[string][]byte{"phaseless-agent": bin, "mode": []byte(mode)}
	if err := Write(&b, priv, version, "rpi4", files, []string{"phaseless-agent", "mode"}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitFor polls cond; the bound only keeps a broken build from hanging.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// serving reports the "slot version" the fake agent at addr answers with.
func serving(addr string) string {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}

func TestSupervisorCommitsOnlyHealthyTrials(t *testing.T) {
	pub, priv := newKey(t)
	slots, err := OpenSlots(t.TempDir(), "1.0")
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	sup := testSupervisor(slots, addr)
	sup.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitFor(t, "the factory agent", func() bool { return serving(addr) == "a 1.0" })

	install := func(version, mode string) {
		t.Helper()
		v, err := Open(bytes.NewReader(agentBundle(t, priv, version, mode)), Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "1.0"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := slots.Install(v); err != nil {
			t.Fatal(err)
		}
		http.Post("http://"+addr+"/exit", "text/plain", nil) // the agent restarts into it
	}
	settled := func() bool { return slots.State().Trial == "" }

	install("2.0", "good")
	waitFor(t, "slot b committed", func() bool { return settled() && slots.State().Active == "b" })
	if got := serving(addr); got != "b 2.0" {
		t.Fatalf("after commit the agent serving is %q, want b 2.0", got)
	}

	// An update that crashes at start never becomes the committed slot.
	install("3.0", "crash")
	waitFor(t, "the crashing trial rolled back", func() bool { return settled() && serving(addr) == "b 2.0" })
	if st := slots.State(); st.Active != "b" {
		t.Fatalf("a crashing update was committed: %+v", st)
	}

	// Nor does one whose binary was damaged on disk after install.
	v, err := Open(bytes.NewReader(agentBundle(t, priv, "4.0", "good")), Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "1.0"})
	if err != nil {
		t.Fatal(err)
	}
	slot, err := slots.Install(v)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(slots.Path(slot), "phaseless-agent")
	f, err := os.OpenFile(bin, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff}, 100)
	f.Close()
	http.Post("http://"+addr+"/exit", "text/plain", nil)
	waitFor(t, "the damaged trial rolled back", func() bool { return settled() && serving(addr) == "b 2.0" })
	if st := slots.State(); st.Active != "b" {
		t.Fatalf("a damaged update was committed: %+v", st)
	}
}

func TestSupervisorRollsBackTrialThatNeverGetsReady(t *testing.T) {
	pub, priv := newKey(t)
	slots, err := OpenSlots(t.TempDir(), "1.0")
	if err != nil {
		t.Fatal(err)
	}
	v, err := Open(bytes.NewReader(agentBundle(t, priv, "2.0", "unready")), Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "1.0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slots.Install(v); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	sup := testSupervisor(slots, addr)
	sup.TrialTimeout = 200 * time.Millisecond // this agent never gets ready, however fast the machine
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	waitFor(t, "the factory agent after rollback", func() bool { return serving(addr) == "a 1.0" })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := slots.State(); st.Active != "a" || st.Trial != "" {
		t.Fatalf("state after an unready trial: %+v", st)
	}
}

// TestUpdateSurvivesKill9 kills a device's whole update — download and
// verify, install, the switch to the trial slot, its first boot, the commit —
// with SIGKILL at a random moment, cycle after cycle, then reboots the
// device under a fresh supervisor: the committed slot is always runnable and
// the device always ends up serving a working agent, never the crashing
// builds some cycles ship. PHASELESS_CRASH_CYCLES sets the number of cycles
// (default 12; CI's full run uses 100).
func TestUpdateSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	cycles := 12
	if n, err := strconv.Atoi(os.Getenv("PHASELESS_CRASH_CYCLES")); err == nil && n > 0 {
		cycles = n
	}
	pub, priv := newKey(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	self, _ := os.Executable()
	rng := rand.New(rand.NewPCG(1, 2))
	// Where the kills landed, read off the state each one left: before the
	// switch (no trial), on trial (installed, booting or being probed), or
	// after the commit or rollback.
	landed := map[string]int{}
	for i := range cycles {
		mode := "good"
		if rng.IntN(10) < 3 {
			mode = "crash"
		}
		version := fmt.Sprintf("1.%d", i+1)
		bundlePath := filepath.Join(t.TempDir(), "b.plota")
		if err := os.WriteFile(bundlePath, agentBundle(t, priv, version, mode), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), envRole+"=updater", envDir+"="+dir, envBundle+"="+bundlePath,
			envAddr+"="+addr, envPub+"="+fmt.Sprintf("%x", []byte(pub)))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // kill the agents it started too
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		window := 400 * time.Millisecond
		after := time.Duration(rng.Int64N(int64(window)))
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(after):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // agents of an updater that exited by itself

		// The state file is whole and the committed slot can start.
		slots, err := OpenSlots(dir, "1.0")
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		st := slots.State()
		switch {
		case st.Trial != "":
			landed["on trial"]++
		case st.Versions[st.Active] == version:
			landed["committed"]++
		case st.Versions[otherSlot(st.Active)] == version:
			landed["rolled back"]++
		default:
			landed["before the switch"]++
		}
		probe := &Supervisor{Slots: slots, Factory: self}
		probe.setDefaults()
		if _, err := probe.executable(st.Active); err != nil {
			t.Fatalf("cycle %d: committed slot %s cannot start: %v (state %+v)", i, st.Active, err, st)
		}
		if st.Versions[st.Active] != "1.0" && mode == "crash" && st.Versions[st.Active] == version {
			t.Fatalf("cycle %d: the crashing build %s was committed", i, version)
		}

		// Reboot: a fresh supervisor settles any trial and serves.
		sup := testSupervisor(slots, addr)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- sup.Run(ctx) }()
		waitFor(t, "a working agent after reboot", func() bool {
			return slots.State().Trial == "" && serving(addr) != ""
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if st := slots.State(); mode == "crash" && st.Versions[st.Active] == version {
			t.Fatalf("cycle %d: the crashing build %s was committed after reboot", i, version)
		}
	}
	t.Logf("%d cycles; where the kills landed: %v", cycles, landed)
}

func otherSlot(s string) string {
	if s == "a" {
		return "b"
	}
	return "a"
}
