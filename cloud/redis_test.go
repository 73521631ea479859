package cloud

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startRedis runs a real redis-server on a free loopback port; without the
// binary it skips, except under CI where it must be installed.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server not installed (CI must have it): %v", err)
		}
		t.Skip("redis-server not installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && strings.Contains(sc.Text(), "Ready to accept connections") {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Wait()
			t.Fatal("redis-server exited before it was ready")
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("redis-server did not become ready")
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return fmt.Sprintf("redis://127.0.0.1:%d/0", port)
}

// TestCloudReplicasShareBudget: two coordinator replicas on one Redis see
// one budget per tenant: what one spends, the other cannot.
func TestCloudReplicasShareBudget(t *testing.T) {
	url := startRedis(t)
	keys := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(keys, []byte("sk-shared-key-1 shared 1000\nsk-solo-key-01 solo 1000\n"), 0o600)
	replica := func() *Cloud {
		return startCloud(t, func(cfg *Config) {
			cfg.Dev, cfg.APIKeys, cfg.Redis, cfg.BuiltinWorkers = false, keys, url, 1
		})
	}
	a, b := replica(), replica()
	remaining := func(c *Cloud, key string) int {
		r := chat(t, c.HTTPAddr(), key, "", "hello there", 50)
		n, err := strconv.Atoi(r.header.Get("x-burst-budget-remaining"))
		if r.status != 200 || err != nil {
			t.Fatalf("status %d, remaining %q: %s", r.status, r.header.Get("x-burst-budget-remaining"), r.body)
		}
		return n
	}
	// What replica B reports for a tenant nobody used: 1000 - this request's charge.
	fresh := remaining(b, "sk-solo-key-01")
	// The shared tenant spends on A first; B must see that spending.
	remaining(a, "sk-shared-key-1")
	shared := remaining(b, "sk-shared-key-1")
	// A spent at least its ~30 prompt tokens; refill in this test's
	// fraction of a second is a few tokens (1000 per minute).
	if shared > fresh-20 {
		t.Fatalf("replica B reports %d remaining for the shared tenant, %d for a fresh one: it did not see A's spending", shared, fresh)
	}
}
