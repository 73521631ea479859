// Package redistest runs a real redis-server for tests: the admission
// store's own tests (cloud/admit) and the coordinator's multi-replica tests
// (cloud) both need one, and a fake would not show what Redis actually does
// with the Lua scripts and expiries.
//
// Without the redis-server binary a test skips, except under CI (the CI
// environment variable set), where a missing binary fails the test: CI
// installs it, so its absence there is a broken setup, not an optional
// dependency.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Start runs redis-server on a free loopback port, without persistence, for
// the rest of t, and returns its URL (redis://127.0.0.1:PORT/0). The server
// is killed when t ends.
func Start(t testing.TB) string {
	t.Helper()
	url, _ := StartKillable(t)
	return url
}

// StartKillable is Start that also returns kill, which ends the server at
// once (SIGKILL) and waits for it: a Redis that dies under a running test.
// Calling kill twice is harmless.
func StartKillable(t testing.TB) (url string, kill func()) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server not installed (CI must have it): %v", err)
		}
		t.Skip("redis-server not installed")
	}
	// The free port is found by listening and closing, so another process
	// can take it before redis-server binds it: then redis exits before it
	// is ready, and another port is tried.
	for range 5 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// The reader drains redis' log until the process exits (Wait closes
		// the pipe), so redis never blocks on a full pipe.
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
			if ok {
				var once sync.Once
				kill := func() {
					once.Do(func() {
						cmd.Process.Kill()
						cmd.Wait()
					})
				}
				t.Cleanup(kill)
				return fmt.Sprintf("redis://127.0.0.1:%d/0", port), kill
			}
			cmd.Wait() // the port was taken between Close and Start: try another
		case <-time.After(20 * time.Second): // hang guard only
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("redis-server did not become ready")
		}
	}
	t.Fatal("could not start redis-server on a free port in 5 tries")
	return "", nil
}
