package ota

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestOTAUpdateCommand drives the fleet's update commands against real
// bundles served over HTTP: a good one lands in the inactive slot on trial
// and is committed; a mis-signed one, one for another board and an older one
// are refused and leave the slots as they were.
func TestOTAUpdateCommand(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	_, otherPriv, _ := ed25519.GenerateKey(nil)
	dir := t.TempDir()
	pubPath := filepath.Join(dir, "ota-pub.pem")
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: firmware.PublicKeyPEMType, Bytes: pub}), 0o644); err != nil {
		t.Fatal(err)
	}
	bundles := map[string][]byte{}
	add := func(name string, key ed25519.PrivateKey, version, board string) {
		var b bytes.Buffer
		files := map[string][]byte{"bin/phaseless-agent": []byte("agent " + version)}
		if err := firmware.Write(&b, key, version, board, files, []string{"bin/phaseless-agent"}); err != nil {
			t.Fatal(err)
		}
		bundles["/"+name] = b.Bytes()
	}
	add("good", priv, "2.0", "rpi4")
	add("missigned", otherPriv, "3.0", "rpi4")
	add("otherboard", priv, "3.0", "jetson")
	add("older", priv, "1.0", "rpi4")
	var rb bytes.Buffer
	if err := firmware.WriteManifest(&rb, priv, firmware.Manifest{Version: "1.0", Board: "rpi4", RollbackFrom: "2.0"},
		map[string][]byte{"bin/phaseless-agent": []byte("agent 1.0")}, []string{"bin/phaseless-agent"}); err != nil {
		t.Fatal(err)
	}
	bundles["/rollback"] = rb.Bytes()
	// elsewhere serves the same bundles from an origin the device does not
	// allow; it counts what it is asked for.
	var elsewhereHits atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhereHits.Add(1)
		w.Write(bundles[r.URL.Path])
	}))
	defer elsewhere.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, elsewhere.URL+"/good", http.StatusFound)
			return
		}
		if b, ok := bundles[r.URL.Path]; ok {
			w.Write(b)
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()

	restarted := make(chan struct{}, 1)
	cfg := Config{DataDir: t.TempDir(), Board: "rpi4", OTAPub: pubPath, Origins: []string{srv.URL}, Slot: "a", Restart: func() { restarted <- struct{}{} }}
	o, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := func(name string, fn func(context.Context, fleetwire.Command) (string, error), args map[string]string) (string, error) {
		return fn(context.Background(), fleetwire.Command{ID: name, Name: name, Args: args})
	}
	if _, err := run("update", o.Update, map[string]string{"url": srv.URL + "/missing"}); err == nil {
		t.Fatal("a 404 installed something")
	}
	// Only the allowed origin is fetched from, redirects included
	// (issue 27): a good bundle elsewhere is never asked for.
	for _, u := range []string{elsewhere.URL + "/good", srv.URL + "/redirect", strings.Replace(srv.URL, "http://", "http://user:pw@", 1) + "/good"} {
		if _, err := run("update", o.Update, map[string]string{"url": u}); err == nil || !strings.Contains(err.Error(), "origin") {
			t.Errorf("update from %s: %v, want refused for its origin", u, err)
		}
	}
	if n := elsewhereHits.Load(); n != 0 {
		t.Fatalf("the device fetched %d times from an origin it does not allow", n)
	}
	if st := o.slots.State(); st.Trial != "" {
		t.Fatalf("a refused origin installed a slot: %+v", st)
	}
	out, err := run("update", o.Update, map[string]string{"url": srv.URL + "/good"})
	if err != nil || !strings.Contains(out, "slot b") {
		t.Fatalf("good bundle: %q %v", out, err)
	}
	got, err := os.ReadFile(filepath.Join(o.slots.Path("b"), "bin", "phaseless-agent"))
	if err != nil || string(got) != "agent 2.0" {
		t.Fatalf("slot b holds %q, %v", got, err)
	}
	select { // the agent exits so the supervisor starts slot b
	case <-restarted:
	case <-time.After(10 * time.Second):
		t.Fatal("an installed update did not ask for a restart")
	}
	// The process that installed slot b still runs slot a: committing a
	// build that never booted is refused (the bug this replaced).
	if _, err := run("ota-commit", o.Commit, nil); err == nil || !strings.Contains(err.Error(), "has not booted") {
		t.Fatalf("ota-commit from slot a: %v", err)
	}
	// After the restart the supervisor starts slot b, which may commit itself.
	cfg.Slot, cfg.Restart = "b", nil
	o, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run("ota-commit", o.Commit, nil); err != nil {
		t.Fatal(err)
	}
	if slot, version := o.slots.Running(); slot != "b" || version != "2.0" {
		t.Fatalf("running %s %s after commit", slot, version)
	}
	for name, want := range map[string]error{"missigned": firmware.ErrBadSignature, "otherboard": firmware.ErrWrongBoard, "older": firmware.ErrNotNewer} {
		if _, err := run("update", o.Update, map[string]string{"url": srv.URL + "/" + name}); !errors.Is(err, want) {
			t.Errorf("%s: err %v, want %v", name, err, want)
		}
	}
	if st := o.slots.State(); st.Trial != "" || st.Active != "b" {
		t.Fatalf("refused bundles changed the slots: %+v", st)
	}
	// A rollback is signed intent, never a command argument (issue 27): an
	// older bundle with rollback=true is refused; a bundle whose signed
	// manifest is a rollback from the running 2.0 is installed.
	if _, err := run("update", o.Update, map[string]string{"url": srv.URL + "/older", "rollback": "true"}); err == nil {
		t.Fatal("rollback=true on the command installed an older bundle")
	}
	if st := o.slots.State(); st.Trial != "" || st.Active != "b" {
		t.Fatalf("rollback=true changed the slots: %+v", st)
	}
	if _, err := run("update", o.Update, map[string]string{"url": srv.URL + "/rollback"}); err != nil {
		t.Fatalf("signed rollback: %v", err)
	}
	if st := o.slots.State(); st.Trial != "a" || st.Versions["a"] != "1.0" {
		t.Fatalf("signed rollback: slots %+v", st)
	}
	if _, err := run("ota-rollback", o.Rollback, nil); err != nil {
		t.Fatal(err)
	}

	// Without a trusted key nothing is installed, whatever is offered.
	cfg.OTAPub, cfg.DataDir = "", t.TempDir()
	cfg.Slot = "a"
	keyless, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run("update", keyless.Update, map[string]string{"url": srv.URL + "/good"}); err == nil {
		t.Fatal("an agent without --ota-pub installed a bundle")
	}

	// Nor without a supervisor: the installed slot would never start.
	cfg.OTAPub, cfg.DataDir = pubPath, t.TempDir()
	cfg.Slot = ""
	unsupervised, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run("update", unsupervised.Update, map[string]string{"url": srv.URL + "/good"}); err == nil || !strings.Contains(err.Error(), "supervisor") {
		t.Fatalf("an unsupervised agent installed a bundle: %v", err)
	}
}
