// Package brokertest starts real MQTT brokers for the device-side fleet
// tests: an embedded mochi-mqtt broker on a loopback port, and an external
// Mosquitto process with a generated config. Only tests import it, so the
// agent binary never links a broker.
package brokertest

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/phaseless/phaseless/internal/mochilisten"
)

// Mochi is an embedded broker that a test can stop and restart on the same
// address (a restarted mochi without a storage hook forgets sessions and
// retained messages, like a broker that lost its disk).
type Mochi struct {
	t     testing.TB
	Addr  string            // host:port, fixed across restarts
	tls   *tls.Config       // nil: plain TCP
	users map[string]string // nil: anyone may connect

	mu  sync.Mutex // guards srv
	srv *mqtt.Server
}

// StartMochi starts a broker on a random loopback port; it stops at test
// cleanup.
func StartMochi(t testing.TB) *Mochi { return StartMochiTLS(t, nil) }

// StartMochiTLS starts a broker whose listener speaks TLS with cfg (for
// example transport/pki.ServerTLS, which requires device certificates).
func StartMochiTLS(t testing.TB, cfg *tls.Config) *Mochi {
	t.Helper()
	m := &Mochi{t: t, tls: cfg}
	m.start("127.0.0.1:0")
	t.Cleanup(m.Stop)
	return m
}

// StartMochiUsers starts a broker that admits only the given
// username/password pairs.
func StartMochiUsers(t testing.TB, users map[string]string) *Mochi {
	t.Helper()
	m := &Mochi{t: t, users: users}
	m.start("127.0.0.1:0")
	t.Cleanup(m.Stop)
	return m
}

// URL is the broker URL for clients.
func (m *Mochi) URL() string {
	if m.tls != nil {
		return "tls://" + m.Addr
	}
	return "mqtt://" + m.Addr
}

func (m *Mochi) start(addr string) {
	m.t.Helper()
	srv := mqtt.New(&mqtt.Options{
		InlineClient: true,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if m.users == nil {
		if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
			m.t.Fatal(err)
		}
	} else {
		ledger := &auth.Ledger{ACL: auth.ACLRules{{}}} // any topic once admitted
		for u, p := range m.users {
			ledger.Auth = append(ledger.Auth, auth.AuthRule{Username: auth.RString(u), Password: auth.RString(p), Allow: true})
		}
		if err := srv.AddHook(new(auth.Hook), &auth.Options{Ledger: ledger}); err != nil {
			m.t.Fatal(err)
		}
	}
	// Rebinding the same port right after a stop can race the kernel
	// releasing it; retry briefly (a hang guard, not a timing assumption).
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if ln, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		m.t.Fatalf("mochi listen %s: %v", addr, err)
	}
	if m.tls != nil {
		ln = tls.NewListener(ln, m.tls)
	}
	// Not mochi's TCP listener: its Close can deadlock (mochi-mqtt/server#488),
	// which hung this package in CI.
	if err := srv.AddListener(mochilisten.New(srv, "tcp", ln)); err != nil {
		m.t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		m.t.Fatal(err)
	}
	m.mu.Lock()
	m.srv = srv
	m.Addr = ln.Addr().String()
	m.mu.Unlock()
}

// Stop closes the broker and all client connections. Safe to call twice.
func (m *Mochi) Stop() {
	m.mu.Lock()
	srv := m.srv
	m.srv = nil
	m.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// Restart starts a fresh broker on the same address after Stop.
func (m *Mochi) Restart() {
	m.t.Helper()
	m.Stop()
	m.start(m.Addr)
}

// Server is the running mochi server (nil while stopped).
func (m *Mochi) Server() *mqtt.Server {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.srv
}

// MosquittoPath is where Debian's mosquitto package installs the broker.
const MosquittoPath = "/usr/sbin/mosquitto"

// Mosquitto is an external broker process.
type Mosquitto struct {
	t    testing.TB
	Addr string
	conf string

	mu  sync.Mutex // guards cmd
	cmd *exec.Cmd
}

// StartMosquitto runs mosquitto on a free loopback port with anonymous
// access. Without the binary the test is skipped, unless CI is set, where
// a missing broker is a failure.
func StartMosquitto(t testing.TB) *Mosquitto {
	t.Helper()
	if _, err := os.Stat(MosquittoPath); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mosquitto not installed at %s (CI installs the Debian package)", MosquittoPath)
		}
		t.Skipf("mosquitto not installed at %s", MosquittoPath)
	}
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	conf := filepath.Join(t.TempDir(), "mosquitto.conf")
	body := strings.Join([]string{
		"listener " + port + " 127.0.0.1",
		"allow_anonymous true",
		"persistence false",
		"log_dest stderr",
		"log_type error",
		"log_type warning",
		"",
	}, "\n")
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	m := &Mosquitto{t: t, Addr: addr, conf: conf}
	m.start()
	t.Cleanup(m.Stop)
	return m
}

func (m *Mosquitto) start() {
	m.t.Helper()
	var stderr strings.Builder
	cmd := exec.Command(MosquittoPath, "-c", m.conf)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		m.t.Fatalf("start mosquitto: %v", err)
	}
	m.mu.Lock()
	m.cmd = cmd
	m.mu.Unlock()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", m.Addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("mosquitto did not listen on %s: %v\n%s", m.Addr, err, stderr.String())
		}
	}
}

// URL is the broker URL for clients.
func (m *Mosquitto) URL() string { return "mqtt://" + m.Addr }

// Stop kills the broker and waits for it. Safe to call twice.
func (m *Mosquitto) Stop() {
	m.mu.Lock()
	cmd := m.cmd
	m.cmd = nil
	m.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// Restart starts the broker again on the same port after Stop.
func (m *Mosquitto) Restart() {
	m.t.Helper()
	m.Stop()
	m.start()
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// String describes the broker for test logs.
func (m *Mochi) String() string { return fmt.Sprintf("mochi %s", m.Addr) }
