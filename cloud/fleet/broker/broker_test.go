package broker

import (
	"bytes"
	"crypto/tls"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

func TestPasswordFileFromMosquittoPasswd(t *testing.T) {
	tool := needTool(t, "/usr/bin/mosquitto_passwd")
	path := filepath.Join(t.TempDir(), "passwd")
	for i, args := range [][]string{
		{"-c", "-b", path, "dev-1", "secret-1"},           // $7$ PBKDF2-SHA512 (2.0 default)
		{"-H", "sha512", "-b", path, "dev-2", "secret-2"}, // $6$ salted SHA-512 (1.x)
	} {
		if out, err := exec.Command(tool, args...).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_passwd %d: %v: %s", i, err, out)
		}
	}
	p, err := LoadPasswords(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Len() != 2 {
		t.Fatalf("users: %d", p.Len())
	}
	for _, c := range []struct {
		user, pw string
		ok       bool
	}{{"dev-1", "secret-1", true}, {"dev-2", "secret-2", true}, {"dev-1", "secret-2", false}, {"dev-3", "secret-1", false}, {"dev-2", "", false}} {
		if got := p.Verify(c.user, []byte(c.pw)); got != c.ok {
			t.Errorf("Verify(%s, %s) = %v, want %v", c.user, c.pw, got, c.ok)
		}
	}
}

func TestHashPasswordRoundTrip(t *testing.T) {
	line, err := HashPassword("dev-9", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(line, "dev-9:$7$101$") {
		t.Fatalf("line %q", line)
	}
	p, err := ParsePasswords(strings.NewReader("# comment\n\n" + line + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verify("dev-9", []byte("s3cret")) || p.Verify("dev-9", []byte("s3cres")) {
		t.Fatal("verify mismatch")
	}
	for _, bad := range []string{"dev-1:plaintext", "nocolon", ":$7$101$AAAA$AAAA", "dev:$7$x$AAAA$AAAA", "dev:$6$AAAA$AAAA"} {
		if _, err := ParsePasswords(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"no auth", Config{TCPAddr: "127.0.0.1:0"}, "PasswordFile"},
		{"bad addr", Config{TCPAddr: "nope", DevAuth: true}, "TCPAddr"},
		{"tls addr without cert", Config{TLSAddr: "127.0.0.1:0", DevAuth: true}, "TLS"},
		{"bad prefix", Config{DevAuth: true, Prefix: "x"}, "Prefix"},
		{"empty admin", Config{DevAuth: true, Admins: []string{""}}, "Admins"},
		{"missing password file", Config{TCPAddr: "127.0.0.1:0", PasswordFile: "/nonexistent/passwd"}, "PasswordFile"},
		{"negative read buffer", Config{DevAuth: true, ReadBufferBytes: -1}, "ReadBufferBytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Start(c.cfg)
			if err == nil || !strings.Contains(err.Error(), `"`+c.field+`"`) {
				t.Fatalf("err = %v, want field %q", err, c.field)
			}
		})
	}
}

// TestAuthAndACL uses real MQTT clients against the broker: devices get in
// only with their own credentials and client id, and may publish and
// subscribe only under their own dev/{id}/.
func TestAuthAndACL(t *testing.T) {
	reg := metrics.NewRegistry()
	b := startBroker(t, Config{Passwords: passwordsFor(t, "dev-a", "dev-b", "ops"), Admins: []string{"ops"}, Metrics: reg})
	addr := b.TCPAddr()
	tp := fleetwire.Topics{}

	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct {
			name, id, user, pass string
		}{
			{"wrong password", "dev-a", "dev-a", "pw-dev-b"},
			{"client id is not the username", "dev-b", "dev-a", "pw-dev-a"},
			{"no credentials", "dev-a", "", ""},
			{"unknown user", "dev-c", "dev-c", "pw-dev-c"},
			{"admin with wrong password", "ops", "ops", "pw-dev-a"},
		} {
			t.Run(c.name, func(t *testing.T) {
				cl, err := dial(t, addr, c.id, dialOpts{user: c.user, pass: c.pass})
				if err == nil {
					t.Fatal("connected")
				}
				if cl == nil || cl.connack == nil || cl.connack.ReasonCode != 0x86 {
					t.Fatalf("want CONNACK 0x86 (bad username or password), got %+v err %v", cl, err)
				}
			})
		}
	})

	admin, err := dial(t, addr, "ops-console", dialOpts{user: "ops", pass: "pw-ops"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := subscribe(t, admin, tp.DeviceFilter(fleetwire.SuffixTelemetry)); err != nil {
		t.Fatal(err)
	}
	devA, err := dial(t, addr, "dev-a", dialOpts{user: "dev-a", pass: "pw-dev-a"})
	if err != nil {
		t.Fatal(err)
	}

	// Denied publish first: MQTT orders messages per connection, so when the
	// allowed one arrives at the admin, the denied one would have too.
	resp, err := publish(t, devA, tp.Device("dev-b", fleetwire.SuffixTelemetry), "forged", false)
	if err == nil || resp == nil || resp.ReasonCode != 0x87 {
		t.Fatalf("publish as dev-b: want PUBACK 0x87 (not authorized), got %+v %v", resp, err)
	}
	if _, err := publish(t, devA, tp.Device("dev-a", fleetwire.SuffixTelemetry), "mine", false); err != nil {
		t.Fatal(err)
	}
	msgs := admin.waitMsgs(t, 1)
	if len(msgs) != 1 || string(msgs[0].Payload) != "mine" || msgs[0].Topic != tp.Device("dev-a", fleetwire.SuffixTelemetry) {
		t.Fatalf("admin got %d messages, first %q", len(msgs), msgs[0].Payload)
	}

	for _, filter := range []string{tp.Device("dev-b", fleetwire.SuffixCmd), tp.DeviceFilter(fleetwire.SuffixCmd), "#", "$SYS/#", "phaseless/dev/dev-a"} {
		sa, err := subscribe(t, devA, filter)
		if err == nil || sa == nil || sa.Reasons[0] != 0x87 {
			t.Errorf("subscribe %q: want SUBACK 0x87, got %+v %v", filter, sa, err)
		}
	}
	for _, filter := range []string{tp.Device("dev-a", fleetwire.SuffixCmd), tp.Device("dev-a", "#"), tp.Fleet("#")} {
		if _, err := subscribe(t, devA, filter); err != nil {
			t.Errorf("subscribe %q: %v", filter, err)
		}
	}
	// The cloud's in-process publish reaches the device under its own tree.
	if err := b.Publish(tp.Device("dev-a", fleetwire.SuffixCmd), []byte("do"), false); err != nil {
		t.Fatal(err)
	}
	if got := devA.waitMsgs(t, 1); string(got[0].Payload) != "do" {
		t.Fatalf("device got %q", got[0].Payload)
	}
	if v := reg.LabeledCounter("phaseless_fleet_broker_acl_denied_total", "", "direction").With("write").Value(); v != 1 {
		t.Errorf("acl denied writes = %v, want 1", v)
	}
}

// TestMessagesPastReadBuffer: the per-connection read buffer (256 bytes by
// default, issue 37) only batches reads. Messages far larger than it, and
// small ones between them, arrive whole and in order, both ways: a device's
// largest telemetry batch to a subscriber, and the cloud's publish to the
// device.
func TestMessagesPastReadBuffer(t *testing.T) {
	b := startBroker(t, Config{DevAuth: true, Passwords: passwordsFor(t, "ops"), Admins: []string{"ops"}})
	tp := fleetwire.Topics{}
	admin, err := dial(t, b.TCPAddr(), "ops-console", dialOpts{user: "ops", pass: "pw-ops"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := subscribe(t, admin, tp.DeviceFilter(fleetwire.SuffixTelemetry)); err != nil {
		t.Fatal(err)
	}
	dev, err := dial(t, b.TCPAddr(), "dev-big", dialOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := subscribe(t, dev, tp.Device("dev-big", fleetwire.SuffixCmd)); err != nil {
		t.Fatal(err)
	}
	// The topic and header take some of the MaxTelemetryBytes.
	big := make([]byte, fleetwire.MaxTelemetryBytes-200)
	for i := range big {
		big[i] = byte(i*7 + i>>11)
	}
	want := []string{"a", string(big), "bc", string(big[1000:1300]), "def"}
	for _, p := range want {
		if _, err := publish(t, dev, tp.Device("dev-big", fleetwire.SuffixTelemetry), p, false); err != nil {
			t.Fatalf("publish %d bytes: %v", len(p), err)
		}
	}
	for i, m := range admin.waitMsgs(t, len(want)) {
		if string(m.Payload) != want[i] {
			t.Errorf("message %d: got %d bytes, want %d (or different content)", i, len(m.Payload), len(want[i]))
		}
	}
	if err := b.Publish(tp.Device("dev-big", fleetwire.SuffixCmd), big, false); err != nil {
		t.Fatal(err)
	}
	if got := dev.waitMsgs(t, 1); !bytes.Equal(got[0].Payload, big) {
		t.Errorf("device got %d bytes, want the %d sent", len(got[0].Payload), len(big))
	}
}

func TestDevAuth(t *testing.T) {
	b := startBroker(t, Config{DevAuth: true, Passwords: passwordsFor(t, "ops"), Admins: []string{"ops"}})
	if _, err := dial(t, b.TCPAddr(), "dev-x", dialOpts{}); err != nil {
		t.Fatalf("dev auth device: %v", err)
	}
	if _, err := dial(t, b.TCPAddr(), "not a device id", dialOpts{}); err == nil {
		t.Fatal("invalid device id admitted")
	}
	// An admin name still needs its password in dev mode.
	if _, err := dial(t, b.TCPAddr(), "ops", dialOpts{user: "ops", pass: "guess"}); err == nil {
		t.Fatal("admin without password admitted")
	}
}

func TestTLSClientCertificates(t *testing.T) {
	pki := newTestPKI(t)
	b := startBroker(t, Config{TLS: pki.serverTLS(), Passwords: passwordsFor(t, "dev-p", "ops"), Admins: []string{"ops"}})
	if b.TCPAddr() == "" || b.TLSAddr() == "" {
		t.Fatal("want both listeners")
	}
	clientTLS := func(cn string) *tls.Config {
		c := &tls.Config{RootCAs: pki.pool, ServerName: "127.0.0.1"}
		if cn != "" {
			c.Certificates = []tls.Certificate{pki.issue(t, cn, false)}
		}
		return c
	}
	tp := fleetwire.Topics{}
	dev, err := dial(t, b.TLSAddr(), "dev-c", dialOpts{tls: clientTLS("dev-c")})
	if err != nil {
		t.Fatalf("device with certificate: %v", err)
	}
	if _, err := publish(t, dev, tp.Device("dev-c", fleetwire.SuffixStatus), "{}", true); err != nil {
		t.Fatal(err)
	}
	if resp, err := publish(t, dev, tp.Device("dev-d", fleetwire.SuffixStatus), "{}", true); err == nil || resp.ReasonCode != 0x87 {
		t.Fatalf("cert device publishing as another: %+v %v", resp, err)
	}
	for _, c := range []struct{ name, cn, id, user, pass string }{
		{"client id differs from CN", "dev-c", "dev-e", "", ""},
		{"admin username with a device cert", "dev-c", "dev-c", "ops", "pw-ops"},
		{"CN is an admin name", "ops", "ops", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := dial(t, b.TLSAddr(), c.id, dialOpts{tls: clientTLS(c.cn), user: c.user, pass: c.pass}); err == nil {
				t.Fatal("admitted")
			}
		})
	}
	if _, err := dial(t, b.TLSAddr(), "dev-p", dialOpts{tls: clientTLS(""), user: "dev-p", pass: "pw-dev-p"}); err != nil {
		t.Fatalf("password over TLS: %v", err)
	}
	// A certificate from another CA fails the handshake.
	other := newTestPKI(t)
	bad := &tls.Config{RootCAs: pki.pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{other.issue(t, "dev-c", false)}}
	if _, err := dial(t, b.TLSAddr(), "dev-c", dialOpts{tls: bad}); err == nil {
		t.Fatal("foreign certificate admitted")
	}
}
