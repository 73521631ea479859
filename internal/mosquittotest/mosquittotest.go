// Package mosquittotest starts a real Mosquitto for tests: one with its
// dynamic security plugin, administered over MQTT (cloud/fleet.RunDynsec),
// so the cloud's revocation can be tested against the broker a fleet runs.
// Only tests import it.
package mosquittotest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// StartDynsec runs a real Mosquitto with its dynamic security
// plugin, whose only client is the admin the plugin's own tool creates
// (mosquitto_ctrl dynsec init). It returns the broker's mqtt:// URL.
func StartDynsec(t testing.TB, admin, adminPw string) string {
	t.Helper()
	need := func(name string, paths ...string) string {
		for _, p := range paths {
			if m, _ := filepath.Glob(p); len(m) > 0 {
				return m[0]
			}
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is required in CI (apt-get install mosquitto)", name)
		}
		t.Skipf("%s not installed", name)
		return ""
	}
	bin := need("mosquitto", "/usr/sbin/mosquitto")
	ctrl := need("mosquitto_ctrl", "/usr/bin/mosquitto_ctrl")
	plugin := need("mosquitto_dynamic_security.so", "/usr/lib/*/mosquitto_dynamic_security.so", "/usr/lib/mosquitto_dynamic_security.so")
	dir := t.TempDir()
	state := filepath.Join(dir, "dynsec.json")
	if out, err := exec.Command(ctrl, "dynsec", "init", state, admin, adminPw).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_ctrl dynsec init: %v\n%s", err, out)
	}
	port := FreePort(t)
	runAs := ""
	if os.Geteuid() == 0 {
		// As root, mosquitto drops to user "mosquitto", which cannot read the
		// test's private temp dir; keep it as the test's user.
		runAs = "user root\n"
	}
	conf := filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(conf, []byte(runAs+fmt.Sprintf(`listener %d 127.0.0.1
allow_anonymous false
per_listener_settings false
plugin %s
plugin_opt_config_file %s
persistence false
log_dest stderr
log_type error
log_type warning
`, port, plugin, state)), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	Run(t, bin, conf, addr)
	return "mqtt://" + addr
}

// Run starts bin -c conf, whose listener is addr, waits until it accepts
// connections, and kills it at test cleanup (logging its stderr if the
// test failed).
func Run(t testing.TB, bin, conf, addr string) {
	t.Helper()
	cmd := exec.Command(bin, "-c", conf)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("mosquitto stderr:\n%s", stderr.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) { // a hang guard
		select {
		case <-done:
			t.Fatalf("mosquitto exited: %s", stderr.String())
		default:
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("mosquitto did not listen on %s: %s", addr, stderr.String())
		}
	}
}

// Device is one device connection, watched for the broker closing it.
type Device struct {
	c *paho.Client
	// Gone is closed when the broker ends the connection.
	Gone chan struct{}
}

// Connect connects to brokerURL (mqtt://) as client and user id with
// password pw and returns the CONNACK's refusal as an error. The connection
// is closed at test cleanup.
func Connect(t testing.TB, brokerURL, id, pw string) (*Device, error) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(brokerURL, "mqtt://"))
	if err != nil {
		t.Fatal(err)
	}
	d := &Device{Gone: make(chan struct{})}
	closed := false
	end := func() {
		if !closed {
			closed = true
			close(d.Gone)
		}
	}
	d.c = paho.NewClient(paho.ClientConfig{
		Conn: conn, ClientID: id,
		OnServerDisconnect: func(*paho.Disconnect) { end() },
		OnClientError:      func(error) { end() },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := d.c.Connect(ctx, &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true,
		UsernameFlag: true, Username: id, PasswordFlag: true, Password: []byte(pw)})
	if err == nil && ca.ReasonCode != 0 {
		err = fmt.Errorf("connack reason %#x", ca.ReasonCode)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	t.Cleanup(func() { d.c.Disconnect(&paho.Disconnect{}) })
	return d, nil
}

// Client is the device's MQTT client, to publish and subscribe with.
func (d *Device) Client() *paho.Client { return d.c }

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
