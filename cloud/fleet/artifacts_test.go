package fleet

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/firmware"
)

// TestPostArtifactChecksPayloads uploads a signed bundle and the same bundle
// with one payload byte flipped over the real admin handler (issue 27: the
// corrupted one answered "verified": true, since only the signed manifest
// was checked). The corrupted one is refused with a 400 and not stored,
// with the fleet key and without it.
func TestPostArtifactChecksPayloads(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	var b bytes.Buffer
	if err := firmware.WriteKind(&b, priv, firmware.KindPredictor, "1.1", "rpi4", map[string][]byte{"router.onnx": bytes.Repeat([]byte("onnx"), 1000)}, []string{"router.onnx"}); err != nil {
		t.Fatal(err)
	}
	good := b.Bytes()
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-100] ^= 1 // inside the payload; the manifest and signature are intact
	for _, key := range []ed25519.PublicKey{pub, nil} {
		m := openManager(t, Config{DataDir: t.TempDir(), Broker: startBroker(t, broker.Config{DevAuth: true}), OTAPub: key})
		srv := httptest.NewServer(m.Handler())
		post := func(body []byte) (int, string) {
			resp, err := http.Post(srv.URL+"/v1/fleet/artifacts", "application/octet-stream", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			out, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(out)
		}
		if status, body := post(corrupt); status != http.StatusBadRequest || !strings.Contains(body, "does not match") {
			t.Errorf("key %v: corrupted payload: %d %s, want 400 naming the mismatch", key != nil, status, body)
		}
		status, body := post(good)
		if status != http.StatusCreated || strings.Contains(body, `"verified": true`) != (key != nil) {
			t.Errorf("key %v: good bundle: %d %s", key != nil, status, body)
		}
		sum := sha256.Sum256(corrupt)
		if _, err := m.Artifact(hex.EncodeToString(sum[:])); !errors.Is(err, ErrUnknownArtifact) {
			t.Errorf("key %v: the corrupted bundle was stored: %v", key != nil, err)
		}
		if files, _ := filepath.Glob(filepath.Join(m.cfg.DataDir, "artifacts", "*")); len(files) != 1 {
			t.Errorf("key %v: artifacts directory holds %v, want only the good bundle", key != nil, files)
		}
		srv.Close()
	}
}

// BenchmarkPutArtifact stores a signed 64 MiB bundle: the cost of reading
// every payload back through firmware.Check on top of writing and fsyncing
// the upload.
func BenchmarkPutArtifact(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 4<<20)
	var buf bytes.Buffer
	if err := firmware.WriteKind(&buf, priv, firmware.KindModel, "1.0", "rpi4", map[string][]byte{"edge.gguf": payload}, []string{"edge.gguf"}); err != nil {
		b.Fatal(err)
	}
	bundle := buf.Bytes()
	m := openManager(b, Config{DataDir: b.TempDir(), Broker: startBroker(b, broker.Config{DevAuth: true}), OTAPub: pub})
	b.SetBytes(int64(len(bundle)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.PutArtifact(bytes.NewReader(bundle)); err != nil {
			b.Fatal(err)
		}
	}
}
