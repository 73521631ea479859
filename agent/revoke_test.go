package agent

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/transport/pki"
)

// TestRevokedCarIsCutOff is `phaselessctl pki revoke` end to end: the real
// phaseless-cloud binary (QUIC ingress, embedded broker with TLS) and two
// real agents
// connected over QUIC and MQTT; car-1 is put on the deny list in the
// cloud's PKI directory. Without a restart the cloud closes car-1's QUIC
// connection and MQTT session and refuses its redials, so car-1 answers
// locally; car-2 keeps both links.
func TestRevokedCarIsCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs phaseless-cloud")
	}
	pkiDir := t.TempDir()
	if err := pki.EnsureDev(pkiDir, "car-1", "car-2"); err != nil {
		t.Fatal(err)
	}
	quicAddr, tlsAddr := freeUDPAddr(t), freeTCPAddr(t)
	runCloud(t, buildCloud(t), "--dev", "--data-dir", t.TempDir(), "--pki-dir", pkiDir,
		"--http", "127.0.0.1:0", "--quic", quicAddr, "--mqtt", "127.0.0.1:0", "--mqtt-tls", tlsAddr, "--log-level", "warn")

	cars := map[string]*Agent{}
	urls := map[string]string{}
	for _, id := range []string{"car-1", "car-2"} {
		cfg := testConfig(t)
		cfg.Cloud, cfg.DeviceID, cfg.PKIDir, cfg.MQTT = quicAddr, id, pkiDir, "tls://"+tlsAddr
		cars[id], urls[id] = startAgent(t, cfg)
	}
	linked := func(id string) (quicUp, mqttUp bool) {
		return cars[id].cloud.Link().Connected, cars[id].fleet.Connected()
	}
	waitUntil(t, "both cars on QUIC and MQTT", func() bool {
		q1, m1 := linked("car-1")
		q2, m2 := linked("car-2")
		return q1 && m1 && q2 && m2
	})

	if _, err := pki.Revoke(pkiDir, "car-1", "stolen", time.Now()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "car-1 cut off both links", func() bool {
		q, m := linked("car-1")
		return !q && !m
	})
	if le := cars["car-1"].cloud.Link().LastError; !strings.Contains(le, "revoked") {
		t.Errorf("car-1's link error %q does not say it was revoked", le)
	}
	resp := post(t, urls["car-1"]+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`, "x-phaseless-route", "cloud")
	if resp.StatusCode != 200 || resp.Header.Get("x-phaseless-route") != "local" || resp.Header.Get("x-fallback-reason") == "" {
		t.Fatalf("revoked car's cloud request: %d route %q fallback %q", resp.StatusCode, resp.Header.Get("x-phaseless-route"), resp.Header.Get("x-fallback-reason"))
	}
	if q, m := linked("car-1"); q || m {
		t.Fatalf("car-1 reconnected after its revocation: quic %v mqtt %v", q, m)
	}
	if q, m := linked("car-2"); !q || !m {
		t.Fatalf("car-2 lost a link: quic %v mqtt %v", q, m)
	}
	resp = post(t, urls["car-2"]+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`, "x-phaseless-route", "cloud")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("x-phaseless-route"), "cloud") {
		t.Fatalf("car-2's cloud request: %d route %q", resp.StatusCode, resp.Header.Get("x-phaseless-route"))
	}
}

// waitUntil polls cond under a generous hang guard (never a pass on timing).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freeTCPAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
