// Package pgtest runs a throwaway PostgreSQL server for tests: the fleet
// store's PostgreSQL backend (cloud/fleet) is tested against the real
// server, since what it relies on — unique keys, row locks, SKIP LOCKED —
// is the server's behaviour, not the driver's.
//
// Without the server binaries (initdb, postgres) a test skips, except under
// CI (the CI environment variable set), where a missing binary fails the
// test: .ci/run installs Debian's postgresql, so its absence there is a
// broken setup. Run as root (initdb refuses to), the server runs as the
// postgres user that Debian's package creates.
package pgtest

import (
	"context"
	neturl "net/url"

	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// bin finds a PostgreSQL server binary: on PATH, else in Debian's
// versioned directory (the package does not put initdb on PATH).
func bin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) == 0 {
		return "", fmt.Errorf("%s not found on PATH or in /usr/lib/postgresql/*/bin", name)
	}
	return matches[len(matches)-1], nil
}

// Start runs a fresh cluster (fsync off: a test's data need not survive a
// power cut) on a free loopback port for the rest of t and returns the URL
// of its postgres database. The server is stopped when t ends.
func Start(t testing.TB) string {
	t.Helper()
	initdb, err := bin("initdb")
	var postgres string
	if err == nil {
		postgres, err = bin("postgres")
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL not installed (CI must have it): %v", err)
		}
		t.Skipf("PostgreSQL not installed: %v", err)
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cred, err := credential(dir)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	cmd := exec.Command(initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	// A port found by listen-and-close can be taken before the server binds
	// it: then the server exits before it is ready and another is tried.
	for range 5 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		cmd := exec.Command(postgres, "-D", data, "-p", strconv.Itoa(port), "-h", "127.0.0.1", "-k", dir,
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		errPipe, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ready := make(chan bool, 1)
		var log bytes.Buffer
		var logMu sync.Mutex
		go func() { // drains the log until the server exits
			sc := bufio.NewScanner(errPipe)
			ok := false
			for sc.Scan() {
				logMu.Lock()
				log.WriteString(sc.Text() + "\n")
				logMu.Unlock()
				if !ok && strings.Contains(sc.Text(), "ready to accept connections") {
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
				t.Cleanup(func() {
					// SIGINT is the fast shutdown: it ends sessions and exits.
					_ = cmd.Process.Signal(os.Interrupt)
					done := make(chan struct{})
					go func() { cmd.Wait(); close(done) }()
					select {
					case <-done:
					case <-time.After(10 * time.Second):
						cmd.Process.Kill()
						<-done
					}
				})
				return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
			}
			cmd.Wait()
		case <-time.After(30 * time.Second): // hang guard only
			cmd.Process.Kill()
			cmd.Wait()
			logMu.Lock()
			defer logMu.Unlock()
			t.Fatalf("postgres did not become ready:\n%s", log.String())
		}
	}
	t.Fatal("could not start postgres on a free port in 5 tries")
	return ""
}

// credential is nil for an ordinary user; as root it is the postgres
// user's, with dir handed to that user.
func credential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and initdb refuses root: no postgres user to run it as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// CreateDB creates database name on the server at url and returns its URL:
// tests that share one server get a database each.
func CreateDB(t testing.TB, url, name string) string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}
