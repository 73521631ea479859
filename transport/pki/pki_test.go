package pki

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestInitWritesCAAndServer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if err := Init(dir, []string{"cloud.example", "10.1.2.3", "localhost"}); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]os.FileMode{CACertFile: 0o644, CAKeyFile: 0o600, ServerCertFile: 0o644, ServerKeyFile: 0o600} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", f, st.Mode().Perm(), want)
		}
	}
	ca := readCert(t, filepath.Join(dir, CACertFile))
	if !ca.IsCA {
		t.Error("CA certificate is not a CA")
	}
	srv := readCert(t, filepath.Join(dir, ServerCertFile))
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, host := range []string{"localhost", "127.0.0.1", "::1", "cloud.example", "10.1.2.3"} {
		if _, err := srv.Verify(x509.VerifyOptions{DNSName: host, Roots: pool}); err != nil {
			t.Errorf("server certificate not valid for %s: %v", host, err)
		}
	}
	if _, err := srv.Verify(x509.VerifyOptions{DNSName: "other.example", Roots: pool}); err == nil {
		t.Error("server certificate valid for a host it was not issued for")
	}
	if len(srv.DNSNames) != 2 {
		t.Errorf("DNS SANs %v: duplicates not removed", srv.DNSNames)
	}
}

func TestInitRefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	if err := Init(dir, nil); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err := Init(dir, nil); !errors.Is(err, ErrExists) {
		t.Fatalf("second Init: %v, want ErrExists", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if !bytes.Equal(before, after) {
		t.Fatal("CA key changed")
	}
}

func TestIssueDevice(t *testing.T) {
	dir := t.TempDir()
	if err := IssueDevice(dir, "car-1"); err == nil {
		t.Fatal("IssueDevice without a CA succeeded")
	}
	if err := Init(dir, nil); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "a/b", "has space", "x+y"} {
		if err := IssueDevice(dir, bad); err == nil {
			t.Errorf("IssueDevice(%q) accepted a bad id", bad)
		}
	}
	if err := IssueDevice(dir, "car-1"); err != nil {
		t.Fatal(err)
	}
	c := readCert(t, filepath.Join(dir, DeviceCertFile("car-1")))
	if c.Subject.CommonName != "car-1" {
		t.Errorf("CN %q", c.Subject.CommonName)
	}
	if len(c.ExtKeyUsage) != 1 || c.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Errorf("ext key usage %v, want client auth only", c.ExtKeyUsage)
	}
	if st, _ := os.Stat(filepath.Join(dir, DeviceKeyFile("car-1"))); st.Mode().Perm() != 0o600 {
		t.Errorf("device key mode %v", st.Mode().Perm())
	}
	if err := IssueDevice(dir, "car-1"); !errors.Is(err, ErrExists) {
		t.Fatalf("reissue: %v, want ErrExists", err)
	}
}

func TestEnsureDevIsIdempotent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	if err := EnsureDev(dir, "a", "b"); err != nil {
		t.Fatal(err)
	}
	snap := func() map[string][]byte {
		m := map[string][]byte{}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			m[e.Name()], _ = os.ReadFile(filepath.Join(dir, e.Name()))
		}
		return m
	}
	first := snap()
	if len(first) != 8 {
		t.Fatalf("files %d, want 8", len(first))
	}
	if err := EnsureDev(dir, "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	second := snap()
	for name, b := range first {
		if !bytes.Equal(b, second[name]) {
			t.Errorf("%s rewritten", name)
		}
	}
	if _, ok := second[DeviceCertFile("c")]; !ok {
		t.Error("device c not issued")
	}
	// A CA without a server certificate gets one.
	os.Remove(filepath.Join(dir, ServerCertFile))
	if err := EnsureDev(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := ServerTLS(dir); err != nil {
		t.Fatal(err)
	}
}

// handshake runs a real TLS 1.3 handshake over a loopback TCP connection and
// returns the server's error and the device id it saw.
func handshake(t *testing.T, srvCfg, cliCfg *tls.Config) (string, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		id  string
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			res <- result{err: err}
			return
		}
		defer c.Close()
		tc := tls.Server(c, srvCfg)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tc.HandshakeContext(ctx); err != nil {
			res <- result{err: err}
			return
		}
		id, err := DeviceIDFromState(tc.ConnectionState())
		res <- result{id, err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(c, cliCfg)
	_ = tc.Handshake()
	// TLS 1.3 client certificates are checked after the client's handshake
	// returns; a read surfaces the server's alert.
	_ = tc.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, _ = tc.Read(make([]byte, 1))
	tc.Close()
	r := <-res
	return r.id, r.err
}

func TestMutualTLS(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	if err := EnsureDev(dir, "car-7"); err != nil {
		t.Fatal(err)
	}
	if err := EnsureDev(other, "car-7"); err != nil {
		t.Fatal(err)
	}
	srv, err := ServerTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	good, err := DeviceTLS(dir, "car-7")
	if err != nil {
		t.Fatal(err)
	}
	good.ServerName = "localhost"
	id, err := handshake(t, srv, good)
	if err != nil || id != "car-7" {
		t.Fatalf("good device: id %q err %v", id, err)
	}

	foreign, err := DeviceTLS(other, "car-7")
	if err != nil {
		t.Fatal(err)
	}
	foreign.ServerName = "localhost"
	foreign.RootCAs = good.RootCAs // trusts our server, but its certificate is from another CA
	if _, err := handshake(t, srv, foreign); err == nil {
		t.Fatal("certificate from another CA accepted")
	}

	anon := &tls.Config{RootCAs: good.RootCAs, ServerName: "localhost", MinVersion: tls.VersionTLS13}
	if _, err := handshake(t, srv, anon); err == nil {
		t.Fatal("client without certificate accepted")
	}

	// The device does not trust a server from another fleet.
	otherSrv, err := ServerTLS(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, otherSrv, good); err == nil {
		t.Fatal("device accepted a server from another fleet")
	}
}

func TestDeviceIDFromState(t *testing.T) {
	if _, err := DeviceIDFromState(tls.ConnectionState{}); err == nil {
		t.Fatal("no certificate accepted")
	}
	bad := &x509.Certificate{}
	bad.Subject.CommonName = "not/valid"
	if _, err := DeviceIDFromState(tls.ConnectionState{PeerCertificates: []*x509.Certificate{bad}}); err == nil {
		t.Fatal("invalid CN accepted")
	}
}

func TestDeviceTLSMissing(t *testing.T) {
	dir := t.TempDir()
	if err := Init(dir, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := DeviceTLS(dir, "nobody"); err == nil {
		t.Fatal("missing device certificate accepted")
	}
	if _, err := DeviceTLS(dir, "bad id"); err == nil {
		t.Fatal("bad device id accepted")
	}
}
