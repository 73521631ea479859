package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"
	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/firmware"
)

// buildVersion builds this agent for the host with a version stamped in;
// with a model, that GGUF file is embedded instead of the shipped edge
// model (go build -overlay replaces models/edgemodel/edge.gguf).
func buildVersion(t *testing.T, version string, model ...string) []byte {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "phaseless-agent")
	args := []string{"build", "-tags", agentTags, "-trimpath", "-ldflags", "-s -w -X github.com/phaseless/phaseless/internal/cli.Version=" + version, "-o", bin}
	if len(model) > 0 {
		shipped, err1 := filepath.Abs("../../../models/edgemodel/edge.gguf")
		other, err2 := filepath.Abs(model[0])
		raw, err3 := json.Marshal(map[string]map[string]string{"Replace": {shipped: other}})
		overlay := filepath.Join(t.TempDir(), "overlay.json")
		if err := errors.Join(err1, err2, err3, os.WriteFile(overlay, raw, 0o644)); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-overlay", overlay)
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", version, err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSupervisedRolloutEndToEnd is a device's whole update path with real
// processes: `phaseless-agent supervise` runs the factory agent, which is
// managed over MQTT by a real fleet manager; a staged rollout sends it a
// signed bundle of a newer agent build, the agent installs it and exits, the
// supervisor boots the new slot on trial and commits it once it answers
// /readyz, and the fleet sees the new version. A second rollout ships a
// build that cannot start: the supervisor rolls it back, the agent reports
// the rollback, and the rollout halts by itself. A third ships a build that
// embeds a worse edge model with a probe set: its probe gate fails, it is
// rolled back and the rollout halts (it commits when the gate is removed).
func TestSupervisedRolloutEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent twice and runs it")
	}
	factory := filepath.Join(t.TempDir(), "phaseless-agent")
	if err := os.WriteFile(factory, buildVersion(t, "1.0.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	next := buildVersion(t, "2.0.0")

	pub, priv, _ := ed25519.GenerateKey(nil)
	dir := t.TempDir()
	pubPath := filepath.Join(dir, "ota-pub.pem")
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: firmware.PublicKeyPEMType, Bytes: pub}), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := broker.Start(broker.Config{TCPAddr: "127.0.0.1:0", DevAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var mgr *fleet.Manager
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mgr.ArtifactHandler().ServeHTTP(w, r) }))
	defer srv.Close()
	mgr, err = fleet.Open(fleet.Config{DataDir: t.TempDir(), Broker: b, PublicURL: srv.URL, OTAPub: pub, RolloutInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dataDir := t.TempDir()
	sup := exec.Command(factory, "supervise", "--data-dir", dataDir, "--health", "http://"+addr+"/readyz", "--",
		"--listen", addr, "--device-id", "car-1", "--board", "rk3588", "--mqtt", "mqtt://"+b.TCPAddr(),
		"--ota-pub", pubPath, "--ota-origin", srv.URL, "--local-concurrency", "1")
	var logs syncBuffer
	sup.Stdout, sup.Stderr = &logs, &logs
	sup.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sup.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- sup.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("supervisor exited with %v", err)
			}
		case <-time.After(30 * time.Second):
			syscall.Kill(-sup.Process.Pid, syscall.SIGKILL)
			t.Error("supervisor did not stop on SIGTERM")
		}
		if t.Failed() {
			t.Logf("supervisor and agent logs:\n%s", logs.String())
		}
	}()

	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Minute); !cond(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	status := func() (version, slot string, rolledBack string) {
		d, err := mgr.Device("car-1")
		if err != nil || d.Status == nil || d.State() != "online" {
			return "", "", ""
		}
		return d.Status.Version, d.Status.Slot, d.Status.RolledBack[firmware.KindAgent]
	}
	wait("the factory agent online", func() bool { v, _, _ := status(); return v == "1.0.0" })

	rollout := func(version string, payload []byte, probes ...[]byte) *fleet.Rollout {
		t.Helper()
		files, order := map[string][]byte{"phaseless-agent": payload}, []string{"phaseless-agent"}
		if len(probes) > 0 {
			files[firmware.ProbeSetFile] = probes[0]
			order = append(order, firmware.ProbeSetFile)
		}
		var bb bytes.Buffer
		if err := firmware.Write(&bb, priv, version, "rk3588", files, order); err != nil {
			t.Fatal(err)
		}
		art, err := mgr.PutArtifact(&bb)
		if err != nil {
			t.Fatal(err)
		}
		r, err := mgr.CreateRollout(context.Background(), fleet.RolloutSpec{Artifact: art.ID, Stages: []float64{1}, MaxFailures: new(0.0)})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r1 := rollout("2.0.0", next)
	wait("rollout of 2.0.0 done", func() bool { r, _ := mgr.Rollout(r1.ID); return r.State != fleet.RolloutRunning })
	if r, _ := mgr.Rollout(r1.ID); r.State != fleet.RolloutDone {
		t.Fatalf("rollout 1 is %s (%s): %+v", r.State, r.Reason, r.Devices["car-1"])
	}
	if v, slot, _ := status(); v != "2.0.0" || slot != "b" {
		t.Fatalf("after rollout 1 the device runs %s from slot %q", v, slot)
	}
	slots, err := firmware.OpenSlots(filepath.Join(dataDir, "ota"), "ignored")
	if err != nil {
		t.Fatal(err)
	}
	if st := slots.State(); st.Active != "b" || st.Trial != "" {
		t.Fatalf("slot state after a healthy update: %+v", st)
	}

	// A build that cannot start (here: not a program at all) is rolled back
	// by the supervisor and never committed.
	r2 := rollout("3.0.0", []byte("#!/bin/sh\nexit 1\n"))
	wait("rollout of the broken 3.0.0 to halt", func() bool { r, _ := mgr.Rollout(r2.ID); return r.State != fleet.RolloutRunning })
	r, _ := mgr.Rollout(r2.ID)
	if r.State != fleet.RolloutHalted || r.Devices["car-1"].State != fleet.DeviceFailed {
		t.Fatalf("rollout 2 is %s (%s): %+v", r.State, r.Reason, r.Devices["car-1"])
	}
	wait("the device back on 2.0.0", func() bool { v, _, rb := status(); return v == "2.0.0" && rb == "3.0.0" })
	slots, _ = firmware.OpenSlots(filepath.Join(dataDir, "ota"), "ignored")
	if st := slots.State(); st.Active != "b" || st.Trial != "" {
		t.Fatalf("slot state after a failed update: %+v", st)
	}
	t.Logf("rollout 2: %s", r.Devices["car-1"].Error)

	// A build that starts but embeds a worse edge model (the shipped
	// recipe stopped at step 600) and carries a probe set: the installing
	// agent scores its own engine on the set; the trial build's /readyz
	// (the supervisor's health check) is not ready until it has scored its
	// own, which is lower, so the trial gives up before the supervisor
	// commits it, the supervisor boots slot b again, and the device reports
	// the rollback with both scores.
	worse := buildVersion(t, "4.0.0", "../../testdata/edge-step600.gguf")
	r3 := rollout("4.0.0", worse, incarProbes(t, priv))
	wait("rollout of the worse-model 4.0.0 to halt", func() bool { r, _ := mgr.Rollout(r3.ID); return r.State != fleet.RolloutRunning })
	r, _ = mgr.Rollout(r3.ID)
	if r.State != fleet.RolloutHalted || r.Devices["car-1"].State != fleet.DeviceFailed {
		t.Fatalf("rollout 3 is %s (%s): %+v", r.State, r.Reason, r.Devices["car-1"])
	}
	wait("the device back on 2.0.0", func() bool { v, _, rb := status(); return v == "2.0.0" && rb == "4.0.0" })
	d, err := mgr.Device("car-1")
	if err != nil {
		t.Fatal(err)
	}
	g := d.Status.ProbeGates[firmware.KindAgent]
	if g.Version != "4.0.0" || g.Pass || !strings.Contains(g.Result, "installed 1.000") {
		t.Fatalf("probe gate in the status: %+v", g)
	}
	slots, _ = firmware.OpenSlots(filepath.Join(dataDir, "ota"), "ignored")
	if st := slots.State(); st.Active != "b" || st.Trial != "" {
		t.Fatalf("slot state after the failed probe gate: %+v", st)
	}
	t.Logf("rollout 3: %s", g.Result)
}

// incarProbes is agent/testdata/probes-incar.jsonl as a probe set with
// margin 0.1, signed with key.
func incarProbes(t *testing.T, key ed25519.PrivateKey) []byte {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/probes-incar.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	set := firmware.ProbeSet{Name: "incar", Margin: 0.1}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var p firmware.Probe
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatal(err)
		}
		set.Probes = append(set.Probes, p)
	}
	probes, err := firmware.SignProbeSet(key, set)
	if err != nil {
		t.Fatal(err)
	}
	return probes
}

// syncBuffer is a strings.Builder the command's stdout and stderr copiers
// may write at once.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
