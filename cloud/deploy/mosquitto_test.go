package deploy

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	corev1 "k8s.io/api/core/v1"

	"github.com/phaseless/phaseless/internal/mosquittotest"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestMosquittoACL runs the Mosquitto configuration the project ships
// (k8s/20-mosquitto.yaml: its global options and its ACL file) on a real
// mosquitto and checks what it can enforce of the fleet's publish rules:
// a device writes only its four protocol topics, and nothing over
// max_packet_size. What it cannot (per-topic sizes, per-topic retain) is
// documented in the manifest; the embedded broker enforces those
// (cloud/fleet/broker TestDeviceCannotFillBroker).
func TestMosquittoACL(t *testing.T) {
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		bin = "/usr/sbin/mosquitto"
	}
	passwd := "/usr/bin/mosquitto_passwd"
	for _, p := range []string{bin, passwd} {
		if _, err := os.Stat(p); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is required in CI (apt-get install mosquitto)", p)
			}
			t.Skipf("%s not installed", p)
		}
	}
	var cm *corev1.ConfigMap
	for _, o := range decodeManifests(t) {
		if c, ok := o.v.(*corev1.ConfigMap); ok && o.name == "mosquitto" {
			cm = c
		}
	}
	if cm == nil {
		t.Fatal("no mosquitto ConfigMap")
	}
	// The shipped global options (those before the first listener), with
	// persistence off; then one password listener with the shipped ACL.
	var global []string
	for line := range strings.Lines(cm.Data["mosquitto.conf"]) {
		if strings.HasPrefix(line, "listener ") {
			break
		}
		if !strings.HasPrefix(line, "persistence") {
			global = append(global, line)
		}
	}
	if !slices.ContainsFunc(global, func(l string) bool { return strings.HasPrefix(l, "max_packet_size ") }) {
		t.Fatal("the shipped mosquitto.conf sets no max_packet_size")
	}
	dir := t.TempDir()
	acl, pw := filepath.Join(dir, "acl"), filepath.Join(dir, "passwords")
	if err := os.WriteFile(acl, []byte(cm.Data["acl"]), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, u := range []string{"phaseless-cloud", "car-1"} {
		args := []string{"-b", pw, u, "pw-" + u}
		if i == 0 {
			args = append([]string{"-c"}, args...)
		}
		if out, err := exec.Command(passwd, args...).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_passwd: %v: %s", err, out)
		}
	}
	port := mosquittotest.FreePort(t)
	runAs := ""
	if os.Geteuid() == 0 {
		runAs = "user root\n" // mosquitto's own user cannot read the test's temp dir
	}
	conf := filepath.Join(dir, "mosquitto.conf")
	body := runAs + strings.Join(global, "") + fmt.Sprintf("persistence false\nlistener %d 127.0.0.1\nallow_anonymous false\npassword_file %s\nacl_file %s\nlog_dest stderr\nlog_type error\n", port, pw, acl)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	mosquittotest.Run(t, bin, conf, addr)

	tp := fleetwire.Topics{}
	cloud := mqttDial(t, addr, "phaseless-cloud")
	if _, err := cloud.Subscribe(context.Background(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "phaseless/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	dev := mqttDial(t, addr, "car-1")
	pub := func(c *mqttConn, topic string, payload []byte, retain bool) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-c.Done(): // the broker closed the connection
			case <-time.After(10 * time.Second): // a hang guard
			case <-ctx.Done():
			}
			cancel()
		}()
		// A refused publish may be answered with an error reason; what
		// counts is whether it is delivered.
		_, _ = c.Publish(ctx, &paho.Publish{QoS: 1, Topic: topic, Payload: payload, Retain: retain})
	}
	for _, topic := range []string{
		tp.Device("car-1", "junk"),
		tp.Device("car-1", fleetwire.SuffixConfigDesired),
		tp.Device("car-1", fleetwire.SuffixCmd),
		tp.Device("car-1", fleetwire.SuffixTelemetryAck),
		tp.Device("car-2", fleetwire.SuffixStatus),
		tp.Fleet("announce"),
	} {
		pub(dev, topic, []byte("refused"), true)
	}
	var allowed []string
	for _, w := range fleetwire.DeviceWrites {
		topic := tp.Device("car-1", w.Suffix)
		pub(dev, topic, []byte("ok"), w.Retain)
		allowed = append(allowed, topic)
	}
	// MQTT keeps one connection's order: once the last allowed publish has
	// arrived, any refused one would have arrived before it.
	got := cloud.wait(t, len(allowed))
	for i, m := range got {
		if i >= len(allowed) || m.Topic != allowed[i] {
			t.Errorf("the cloud got %d: %s; want only %v", i, m.Topic, allowed)
		}
	}
	// Over max_packet_size: mosquitto closes the connection.
	big := make([]byte, fleetwire.MaxTelemetryBytes+8<<10)
	pub(dev, tp.Device("car-1", fleetwire.SuffixTelemetry), big, false)
	select {
	case <-dev.Done():
	case <-time.After(20 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("an oversize publish did not close the connection")
	}
	if n := len(cloud.msgs()); n != len(allowed) {
		t.Errorf("the cloud got %d messages after the oversize one, want %d", n, len(allowed))
	}
}

type mqttConn struct {
	*paho.Client
	mu  sync.Mutex // guards got
	got []*paho.Publish
	in  chan struct{}
}

func mqttDial(t *testing.T, addr, user string) *mqttConn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &mqttConn{in: make(chan struct{}, 64)}
	c.Client = paho.NewClient(paho.ClientConfig{ClientID: user, Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			c.mu.Lock()
			c.got = append(c.got, pr.Packet)
			c.mu.Unlock()
			c.in <- struct{}{}
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: user, KeepAlive: 30, CleanStart: true,
		UsernameFlag: true, Username: user, PasswordFlag: true, Password: []byte("pw-" + user)})
	if err != nil || ca.ReasonCode != 0 {
		t.Fatalf("connect %s: %v %+v", user, err, ca)
	}
	t.Cleanup(func() {
		_ = c.Disconnect(&paho.Disconnect{})
		<-c.Done()
	})
	return c
}

func (c *mqttConn) msgs() []*paho.Publish {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

func (c *mqttConn) wait(t *testing.T, n int) []*paho.Publish {
	t.Helper()
	deadline := time.After(20 * time.Second) // a hang guard
	for {
		if m := c.msgs(); len(m) >= n {
			return m
		}
		select {
		case <-c.in:
		case <-deadline:
			t.Fatalf("got %d messages, want %d", len(c.msgs()), n)
		}
	}
}
