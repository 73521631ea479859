package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/pem"
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

// buildVersion builds this agent for the host with a version stamped in.
func buildVersion(t *testing.T, version string) []byte {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "phaseless-agent")
	cmd := exec.Command("go", "build", "-tags", agentTags, "-trimpath", "-ldflags", "-s -w -X github.com/phaseless/phaseless/internal/cli.Version="+version, "-o", bin, ".")
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
// the rollback, and the rollout halts by itself.
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

	rollout := func(version string, payload []byte) *fleet.Rollout {
		t.Helper()
		var bb bytes.Buffer
		if err := firmware.Write(&bb, priv, version, "rk3588", map[string][]byte{"phaseless-agent": payload}, []string{"phaseless-agent"}); err != nil {
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
