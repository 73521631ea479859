package agent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// bundleShop signs bundles with a fleet key and serves them over HTTP.
type bundleShop struct {
	pub     ed25519.PublicKey
	priv    ed25519.PrivateKey
	pubPath string
	srv     *httptest.Server

	mu      sync.Mutex // guards bundles
	bundles map[string][]byte
}

func newBundleShop(t *testing.T) *bundleShop {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(nil)
	s := &bundleShop{pub: pub, priv: priv, bundles: map[string][]byte{}, pubPath: filepath.Join(t.TempDir(), "ota-pub.pem")}
	if err := os.WriteFile(s.pubPath, pem.EncodeToMemory(&pem.Block{Type: firmware.PublicKeyPEMType, Bytes: pub}), 0o644); err != nil {
		t.Fatal(err)
	}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		b, ok := s.bundles[r.URL.Path]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// add signs one file as a bundle of kind and returns its URL.
func (s *bundleShop) add(t *testing.T, key ed25519.PrivateKey, kind, version, board, file string, data []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := firmware.WriteKind(&b, key, kind, version, board, map[string][]byte{file: data}, []string{file}); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("/%s-%s-%d", kind, version, len(s.bundles))
	s.mu.Lock()
	s.bundles[name] = b.Bytes()
	s.mu.Unlock()
	return s.srv.URL + name
}

// tinyGGUF is a small random-weight model, quick to load and answer.
func tinyGGUF(t testing.TB, seed uint64) []byte {
	t.Helper()
	r, err := lm.ParseRecipe("f32")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := lm.WriteRandom(&b, lm.Config{Vocab: 300, Dim: 64, Layers: 1, Heads: 2, KVHeads: 1, FFN: 128, ContextLen: 256}, seed, nil, r); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func update(a *Agent, url string) (string, error) {
	return a.ota.Update(context.Background(), fleetwire.Command{ID: url, Name: "update", Args: map[string]string{"url": url}})
}

// TestHotSwapArtifacts sends router-model and edge-model bundles through
// the update command, as a rollout does: a good one is verified,
// health-checked and swapped in without a restart while requests keep
// being answered; a broken one fails its health check, is reported rolled
// back and changes nothing; mis-signed, foreign and older ones are refused.
// A restart keeps what was installed, and an install damaged on disk gives
// way to the previous one.
func TestHotSwapArtifacts(t *testing.T) {
	shop := newBundleShop(t)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	cfg := testConfig(t)
	cfg.Board, cfg.OTAPub, cfg.OTAOrigins, cfg.Predictor = "rpi4", shop.pubPath, cli.StringList{shop.srv.URL}, "" // the shipped router and edge model
	a, url := startAgent(t, cfg)
	ask := func() {
		t.Helper()
		resp := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"turn on the air conditioning"}],"max_tokens":4}`, "x-phaseless-route", "local")
		if c := readJSON[chatResp](t, resp.Body); resp.StatusCode != 200 || c.Usage.CompletionTokens < 1 {
			t.Fatalf("local answer: %d %+v", resp.StatusCode, c)
		}
	}
	ask()

	// Requests keep flowing through every install below.
	stop := make(chan struct{})
	var load sync.WaitGroup
	load.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := postJSON(url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"open the window"}],"max_tokens":3}`)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("request during installs: %d", resp.StatusCode)
				return
			}
		}
	})

	shipped := a.pred.Current()
	out, err := update(a, shop.add(t, shop.priv, firmware.KindPredictor, "1.1", "rpi4", "router.onnx", predictor.Shipped()))
	if err != nil || !strings.Contains(out, "swapped in") {
		t.Fatalf("router 1.1: %q %v", out, err)
	}
	v11 := a.pred.Current()
	if v11 == shipped {
		t.Fatal("router 1.1 was not swapped in")
	}
	running, rolledBack := a.ota.Artifacts()
	if running[firmware.KindPredictor] != "1.1" || rolledBack[firmware.KindPredictor] != "" {
		t.Fatalf("reported %v rolled back %v", running, rolledBack)
	}
	// A file that is no model fails its health check: rolled back, 1.1 serves.
	_, err = update(a, shop.add(t, shop.priv, firmware.KindPredictor, "1.2", "rpi4", "router.onnx", []byte("not onnx")))
	if err == nil || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("broken router: %v", err)
	}
	running, rolledBack = a.ota.Artifacts()
	if a.pred.Current() != v11 || running[firmware.KindPredictor] != "1.1" || rolledBack[firmware.KindPredictor] != "1.2" {
		t.Fatalf("after a failed health check: serving changed %v, reported %v, rolled back %v", a.pred.Current() != v11, running, rolledBack)
	}
	for name, c := range map[string]struct {
		url  string
		want error
	}{
		"mis-signed":  {shop.add(t, otherKey, firmware.KindPredictor, "2.0", "rpi4", "router.onnx", predictor.Shipped()), firmware.ErrBadSignature},
		"other board": {shop.add(t, shop.priv, firmware.KindPredictor, "2.0", "jetson", "router.onnx", predictor.Shipped()), firmware.ErrWrongBoard},
		"older":       {shop.add(t, shop.priv, firmware.KindPredictor, "1.0", "rpi4", "router.onnx", predictor.Shipped()), firmware.ErrNotNewer},
	} {
		if _, err := update(a, c.url); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if a.pred.Current() != v11 {
		t.Fatal("a refused bundle changed the router")
	}
	// With a fleet key, an unsigned file cannot go round the manifest check.
	if _, err := a.reloadPredictor(context.Background(), fleetwire.Command{Name: "reload-predictor", Args: map[string]string{"path": "../models/predictor/predictor.onnx"}}); err == nil || a.pred.Current() != v11 {
		t.Fatalf("reload-predictor of an unsigned file on an agent with a fleet key: %v", err)
	}

	// The edge model: a new GGUF answers from then on.
	before, _ := a.engine.swap.Current()
	if out, err := update(a, shop.add(t, shop.priv, firmware.KindModel, "2.0", "rpi4", "edge.gguf", tinyGGUF(t, 7))); err != nil {
		t.Fatalf("edge model 2.0: %q %v", out, err)
	}
	if now, _ := a.engine.swap.Current(); now == before {
		t.Fatal("edge model 2.0 not swapped in")
	}
	ask()
	if _, err := update(a, shop.add(t, shop.priv, firmware.KindModel, "2.1", "rpi4", "edge.gguf", []byte("GGUF but not really"))); err == nil {
		t.Fatal("a broken edge model was swapped in")
	}
	running, rolledBack = a.ota.Artifacts()
	if running[firmware.KindModel] != "2.0" || rolledBack[firmware.KindModel] != "2.1" {
		t.Fatalf("edge model reported %v rolled back %v", running, rolledBack)
	}
	close(stop)
	load.Wait()
	ask()

	// A restart runs what the fleet installed.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a2, _ := startAgent(t, cfg)
	_, probe := a2.engine.swap.Current()
	if r2, _ := a2.ota.Artifacts(); r2[firmware.KindPredictor] != "1.1" || r2[firmware.KindModel] != "2.0" || probe != nil {
		t.Fatalf("after restart: %v", r2)
	}
	if err := a2.Close(); err != nil {
		t.Fatal(err)
	}
	// Damage router 1.1 on disk: the next start falls back to the shipped one.
	dir := filepath.Join(cfg.DataDir, "artifacts", firmware.KindPredictor, "1.1")
	if err := os.WriteFile(filepath.Join(dir, "router.onnx"), []byte("bit rot"), 0o644); err != nil {
		t.Fatal(err)
	}
	a3, _ := startAgent(t, cfg)
	r3, rb3 := a3.ota.Artifacts()
	if r3[firmware.KindPredictor] != "" || rb3[firmware.KindPredictor] != "1.1" || a3.pred.Source() != "predictor" {
		t.Fatalf("after damage: running %v rolled back %v source %s", r3, rb3, a3.pred.Source())
	}
}
