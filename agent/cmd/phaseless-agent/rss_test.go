package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// readKiB reads a process's resident set (VmRSS) or peak (VmHWM) in KiB.
func readKiB(pid int, field string) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func rssKiB(t *testing.T, pid int, field string) int {
	t.Helper()
	n, err := readKiB(pid, field)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAgentRSS measures the built agent's memory: idle after start, and the
// peak while 50 clients stream at once through the local engine. It logs
// the numbers (docs/agent.md quotes them) and fails only past a generous
// bound that a leak or a per-stream buffer would cross.
func TestAgentRSS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agent")
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI runs on Linux with /proc; the agent's memory is measured there")
		}
		t.Skip("needs /proc")
	}
	bin := filepath.Join(t.TempDir(), "phaseless-agent")
	if out, err := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--listen", addr, "--data-dir", t.TempDir(), "--local-concurrency", "16")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	base := "http://" + addr
	for {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("agent not ready\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// One request first, so "idle" includes what serving at all allocates.
	if resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`)); err == nil {
		resp.Body.Close()
	}
	time.Sleep(500 * time.Millisecond)
	idle := rssKiB(t, cmd.Process.Pid, "VmRSS")

	const streams = 50
	var wg sync.WaitGroup
	peak := 0 // written by the sampler only, read after it stopped
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if r, err := readKiB(cmd.Process.Pid, "VmRSS"); err == nil && r > peak {
				peak = r
			}
		}
	})
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams}}
	for i := range streams {
		wg.Go(func() {
			body := fmt.Sprintf(`{"messages":[{"role":"user","content":"stream %d: describe the route to the airport"}],"max_tokens":256,"stream":true}`, i)
			resp, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("stream %d: status %d", i, resp.StatusCode)
			}
		})
	}
	wg.Wait()
	close(stop)
	sampler.Wait()
	hwm := rssKiB(t, cmd.Process.Pid, "VmHWM")
	t.Logf("agent RSS: idle %.1f MiB; %d concurrent streams: sampled peak %.1f MiB, VmHWM %.1f MiB", float64(idle)/1024, streams, float64(peak)/1024, float64(hwm)/1024)
	if hwm > 512<<10 {
		t.Errorf("peak RSS %d KiB over 512 MiB", hwm)
	}
}
