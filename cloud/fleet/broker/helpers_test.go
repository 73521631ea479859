package broker

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testPKI is a throwaway fleet CA with a server certificate for 127.0.0.1.
type testPKI struct {
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	pool   *x509.CertPool
	server tls.Certificate
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test fleet CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &testPKI{ca: ca, caKey: key, pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.server = p.issue(t, "phaseless-cloud", true)
	return p
}

func (p *testPKI) issue(t testing.TB, cn string, server bool) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// clientTLS is a device's side of the fleet PKI: a certificate with CN cn.
func (p *testPKI) clientTLS(t testing.TB, cn string) *tls.Config {
	return &tls.Config{RootCAs: p.pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{p.issue(t, cn, false)}}
}

func (p *testPKI) serverTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: p.pool}
}

// mqttClient is a real paho MQTT v5 client for tests, with the messages it
// received collected in order.
type mqttClient struct {
	*paho.Client
	connack *paho.Connack

	mu   sync.Mutex // guards msgs
	msgs []*paho.Publish
	got  chan struct{}
}

type dialOpts struct {
	user, pass string
	tls        *tls.Config
	persistent bool // CleanStart false with a one-hour session
	manualAck  bool // never acknowledge (keeps QoS 1 messages inflight)
	will       *paho.WillMessage
}

// dial connects; a refused CONNACK is returned as the connack with an error.
func dial(t testing.TB, addr, id string, o dialOpts) (*mqttClient, error) {
	t.Helper()
	var conn net.Conn
	var err error
	if o.tls != nil {
		var tc *tls.Conn
		tc, err = tls.Dial("tcp", addr, o.tls)
		if err == nil {
			conn = packets.NewThreadSafeConn(tc)
		}
	} else {
		conn, err = net.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	c := &mqttClient{got: make(chan struct{}, 1024)}
	c.Client = paho.NewClient(paho.ClientConfig{
		ClientID:                   id,
		Conn:                       conn,
		EnableManualAcknowledgment: o.manualAck,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			c.mu.Lock()
			c.msgs = append(c.msgs, pr.Packet)
			c.mu.Unlock()
			c.got <- struct{}{}
			return true, nil
		}},
	})
	cp := &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: !o.persistent, WillMessage: o.will}
	if o.user != "" {
		cp.Username, cp.UsernameFlag = o.user, true
		cp.Password, cp.PasswordFlag = []byte(o.pass), true
	}
	if o.persistent {
		exp := uint32(3600)
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: &exp}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, cp)
	c.connack = ca
	if err != nil {
		conn.Close()
		// paho's Connect leaves its goroutines to end with the connection.
		return c, err
	}
	t.Cleanup(func() { c.close() })
	return c, nil
}

func (c *mqttClient) close() {
	_ = c.Disconnect(&paho.Disconnect{ReasonCode: 0})
	<-c.Done()
}

// waitMsgs waits until n messages arrived (a generous hang guard, not a
// timing assertion) and returns them.
func (c *mqttClient) waitMsgs(t testing.TB, n int) []*paho.Publish {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		c.mu.Lock()
		if len(c.msgs) >= n {
			out := append([]*paho.Publish(nil), c.msgs...)
			c.mu.Unlock()
			return out
		}
		c.mu.Unlock()
		select {
		case <-c.got:
		case <-deadline:
			c.mu.Lock()
			defer c.mu.Unlock()
			t.Fatalf("got %d messages, want %d", len(c.msgs), n)
		}
	}
}

// hangGuard bounds one exchange with the broker: a guard against a hang,
// not a timing check, so it is far above what a 1.3 MB publish over TLS
// takes under the race detector on a loaded 2-core machine.
const hangGuard = time.Minute

func publish(t testing.TB, c *mqttClient, topic, payload string, retain bool) (*paho.PublishResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	return c.Publish(ctx, &paho.Publish{QoS: 1, Topic: topic, Payload: []byte(payload), Retain: retain})
}

func subscribe(t testing.TB, c *mqttClient, filter string) (*paho.Suback, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	return c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
}

// passwordsFor builds a password set with password "pw-"+user for each user.
func passwordsFor(t testing.TB, users ...string) *Passwords {
	t.Helper()
	var lines []string
	for _, u := range users {
		l, err := HashPassword(u, "pw-"+u)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	p, err := ParsePasswords(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func startBroker(t testing.TB, cfg Config) *Broker {
	t.Helper()
	if cfg.TCPAddr == "" && cfg.TLSAddr == "" {
		cfg.TCPAddr = "127.0.0.1:0"
	}
	if cfg.TLS != nil && cfg.TLSAddr == "" {
		cfg.TLSAddr = "127.0.0.1:0"
	}
	b, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// needTool returns the path of an external tool, skipping the test when it
// is absent unless CI is set (then the test fails: CI installs it).
func needTool(t testing.TB, path string) string {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if p, err := exec.LookPath(path[strings.LastIndex(path, "/")+1:]); err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is required in CI (apt-get install mosquitto)", path)
	}
	t.Skipf("%s not installed", path)
	return ""
}
