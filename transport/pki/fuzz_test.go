package pki

import (
	"crypto"
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
)

// FuzzPEMFiles: the fleet's PEM files come from an operator's disk, a
// copied directory or a provisioning tool. Whatever bytes replace one of
// them, loading is an error or a working configuration, never a panic, and
// a device configuration only ever holds a certificate matching its key.
func FuzzPEMFiles(f *testing.F) {
	good := f.TempDir()
	if err := Init(good, []string{"localhost"}); err != nil {
		f.Fatal(err)
	}
	if err := IssueDevice(good, "car-1"); err != nil {
		f.Fatal(err)
	}
	files := []string{CACertFile, CAKeyFile, ServerCertFile, ServerKeyFile, DeviceCertFile("car-1"), DeviceKeyFile("car-1")}
	orig := map[string][]byte{}
	for i, n := range files {
		b, err := os.ReadFile(filepath.Join(good, n))
		if err != nil {
			f.Fatal(err)
		}
		orig[n] = b
		f.Add(uint8(i), b)
		f.Add(uint8(i), b[:len(b)/2])
		f.Add(uint8(i), append(append([]byte(nil), b...), b...))
	}
	f.Add(uint8(0), orig[DeviceCertFile("car-1")]) // a leaf where the CA goes
	f.Add(uint8(4), orig[CACertFile])              // the CA where the leaf goes
	f.Add(uint8(1), orig[DeviceKeyFile("car-1")])  // another key as the CA key
	f.Add(uint8(2), []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"))
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		dir := t.TempDir()
		for n, b := range orig {
			if err := os.WriteFile(filepath.Join(dir, n), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, files[int(which)%len(files)]), data, 0o600); err != nil {
			t.Fatal(err)
		}
		if cfg, err := DeviceTLS(dir, "car-1"); err == nil {
			checkPair(t, cfg)
		}
		if cfg, err := ServerTLS(dir); err == nil {
			checkPair(t, cfg)
		}
		if ca, key, err := loadCA(dir); err == nil && (ca == nil || key == nil) {
			t.Fatalf("loadCA gave CA %v key %v without an error", ca, key)
		}
	})
}

// checkPair fails unless cfg's certificate parses and its public key is
// the one of its private key (what tls.X509KeyPair promises).
func checkPair(t *testing.T, cfg *tls.Config) {
	t.Helper()
	if len(cfg.Certificates) != 1 || cfg.Certificates[0].Leaf == nil {
		t.Fatalf("configuration without a parsed certificate: %+v", cfg.Certificates)
	}
	c := cfg.Certificates[0]
	pub, ok := c.PrivateKey.(crypto.Signer)
	if !ok {
		t.Fatalf("private key %T", c.PrivateKey)
	}
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if e, ok := pub.Public().(equaler); !ok || !e.Equal(c.Leaf.PublicKey) {
		t.Fatal("certificate does not match its private key")
	}
}
