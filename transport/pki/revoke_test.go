package pki

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fleetWithDenyList is a dev PKI with car-1 and car-2 and its (empty) deny list.
func fleetWithDenyList(t *testing.T) (string, *DenyList) {
	t.Helper()
	dir := t.TempDir()
	if err := EnsureDev(dir, "car-1", "car-2"); err != nil {
		t.Fatal(err)
	}
	d, err := LoadDenyList(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, d
}

func TestRevokeAndDenyList(t *testing.T) {
	dir, d := fleetWithDenyList(t)
	if d.Revoked("car-1") {
		t.Fatal("revoked before anything was")
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rev, err := Revoke(dir, "car-1", "stolen\nin Lyon", now)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, DeviceCertFile("car-1")), filepath.Join(dir, DeviceKeyFile("car-1")))
	if err != nil {
		t.Fatal(err)
	}
	if rev.Serial != cert.Leaf.SerialNumber.Text(16) || rev.Reason != "stolen in Lyon" || !rev.At.Equal(now) {
		t.Fatalf("revocation %+v", rev)
	}
	if _, err := Revoke(dir, "car-1", "", now); !errors.Is(err, ErrAlreadyRevoked) {
		t.Fatalf("second revoke: %v", err)
	}
	if _, err := Revoke(dir, "car-9", "never enrolled", now); err != nil { // no certificate: serial "-"
		t.Fatal(err)
	}
	if _, err := Revoke(dir, "../x", "", now); err == nil {
		t.Fatal("revoked a bad id")
	}
	added, err := d.Reload()
	if err != nil || strings.Join(added, ",") != "car-1,car-9" || !d.Revoked("car-1") || d.Revoked("car-2") {
		t.Fatalf("reload: added %v err %v", added, err)
	}
	if added, err := d.Reload(); err != nil || added != nil {
		t.Fatalf("unchanged file reloaded: %v %v", added, err)
	}
	// A broken edit is an error and the list in force stays.
	if err := os.WriteFile(filepath.Join(dir, RevokedFile), []byte("car-1 zz not-a-time\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Reload(); err == nil || !d.Revoked("car-1") {
		t.Fatalf("broken file: err %v, car-1 revoked %v", err, d.Revoked("car-1"))
	}
	var nilList *DenyList
	if nilList.Revoked("car-1") {
		t.Fatal("a nil list denies")
	}
}

// The handshake refuses a revoked device's certificate and still admits the
// others; the list is read per handshake, so a revocation applies to the
// next connection without rebuilding the TLS configuration.
func TestDenyRevokedHandshake(t *testing.T) {
	dir, d := fleetWithDenyList(t)
	st, err := ServerTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	DenyRevoked(st, d)
	try := func(id string) error {
		ct, err := DeviceTLS(dir, id)
		if err != nil {
			t.Fatal(err)
		}
		ct.ServerName = "localhost"
		_, err = handshake(t, st, ct)
		return err
	}
	if err := try("car-1"); err != nil {
		t.Fatalf("before revocation: %v", err)
	}
	if _, err := Revoke(dir, "car-1", "stolen", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := try("car-1"); !errors.Is(err, ErrRevoked) {
		t.Fatalf("revoked device's handshake: %v, want ErrRevoked", err)
	}
	if err := try("car-2"); err != nil {
		t.Fatalf("another device: %v", err)
	}
}

func TestDenyListWatch(t *testing.T) {
	dir := t.TempDir()
	d, err := LoadDenyList(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan []string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Watch(ctx, 10*time.Millisecond, func(ids []string) { got <- ids }, nil)
	}()
	if _, err := Revoke(dir, "car-3", "", time.Now()); err != nil {
		t.Fatal(err)
	}
	select {
	case ids := <-got:
		if len(ids) != 1 || ids[0] != "car-3" {
			t.Fatalf("watch reported %v", ids)
		}
	case <-time.After(30 * time.Second): // hang guard only
		t.Fatal("watch never reported the revocation")
	}
	cancel()
	<-done
}

func TestParseRevocationsRejects(t *testing.T) {
	for _, text := range []string{
		"car-1\n", "car-1 - \n", "../etc - 2026-12-01T12:00:00Z\n", "car-1 xyz 2026-12-01T12:00:00Z\n",
		"car-1 - yesterday\n", "car-1 - 0001-01-01T00:00:00Z\n", strings.Repeat("x", 5000) + "\n",
	} {
		if _, err := ParseRevocations(strings.NewReader(text)); err == nil {
			t.Errorf("accepted %q", text)
		}
	}
	list, err := ParseRevocations(strings.NewReader("# c\n\ncar-1 ABC1 2026-12-01T12:00:00Z lost  on a train\n"))
	if err != nil || len(list) != 1 || list[0].Serial != "abc1" || list[0].Reason != "lost on a train" {
		t.Fatalf("%+v %v", list, err)
	}
}

func FuzzParseRevocations(f *testing.F) {
	f.Add("# Revoked devices\ncar-1 1f2e 2026-12-01T12:00:00Z stolen\ncar-2 - 2026-12-01T12:00:01Z\n")
	f.Add("car-1 - 2026-12-01T12:00:00+02:00\n\n#x\n")
	f.Fuzz(func(t *testing.T, text string) {
		list, err := ParseRevocations(strings.NewReader(text))
		if err != nil {
			return
		}
		for _, r := range list {
			if r.ID == "" || r.Serial == "" || r.At.IsZero() || strings.ContainsAny(r.Reason, "\n\r") {
				t.Fatalf("bad entry %+v", r)
			}
		}
	})
}
