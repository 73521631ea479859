package agent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/phaseless/phaseless/agent/ota"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/models/textfeat"
	bolt "go.etcd.io/bbolt"
)

// SelfCheck exercises, on the device itself, the parts of the agent that
// depend on the platform: the storage engine (mmap, fsync), signature
// verification, the router's ONNX predictor and the built-in engine's
// forward pass on this CPU. It is what `phaseless-agent selfcheck` runs and
// what the emulated-ARM test calls, so a broken cross-build shows up before it
// ships.
func SelfCheck(ctx context.Context, w io.Writer) error {
	fmt.Fprintf(w, "platform %s/%s, %d CPUs, %s\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	checks := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"bbolt", checkBolt},
		{"ed25519", checkSignature},
		{"predictor", checkPredictor},
		{"engine", checkEngine},
	}
	for _, c := range checks {
		if err := c.fn(ctx); err != nil {
			fmt.Fprintf(w, "FAIL %s: %v\n", c.name, err)
			return fmt.Errorf("selfcheck %s: %w", c.name, err)
		}
		fmt.Fprintf(w, "ok   %s\n", c.name)
	}
	fmt.Fprintln(w, "selfcheck passed")
	return nil
}

func checkBolt(context.Context) error {
	dir, err := os.MkdirTemp("", "phaseless-selfcheck")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := bolt.Open(filepath.Join(dir, "check.db"), 0o600, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	want := []byte("phaseless")
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("check"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), want)
	}); err != nil {
		return err
	}
	return db.View(func(tx *bolt.Tx) error {
		if got := tx.Bucket([]byte("check")).Get([]byte("k")); !bytes.Equal(got, want) {
			return fmt.Errorf("read back %q, want %q", got, want)
		}
		for err := range tx.Check() {
			return err
		}
		return nil
	})
}

func checkSignature(context.Context) error {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	msg := []byte("bundle manifest")
	sig := ed25519.Sign(priv, msg)
	if !ed25519.Verify(pub, msg, sig) {
		return fmt.Errorf("valid signature rejected")
	}
	sig[0] ^= 1
	if ed25519.Verify(pub, msg, sig) {
		return fmt.Errorf("corrupted signature accepted")
	}
	return nil
}

// checkPredictor runs the shipped router model on an easy and a hard
// request: both answers must be probabilities (a broken float path on a
// board shows up as NaN or garbage here).
func checkPredictor(context.Context) error {
	m, err := predictor.Default()
	if err != nil {
		return err
	}
	easy, err := m.Predict(textfeat.Extract("turn on the air conditioning"))
	if err != nil {
		return err
	}
	hard, err := m.Predict(textfeat.Extract("Prove that every bounded monotone sequence of real numbers converges, then derive the rate for a_n = (1+1/n)^n."))
	if err != nil {
		return err
	}
	if easy < 0 || easy > 1 || hard < 0 || hard > 1 {
		return fmt.Errorf("probabilities out of range: %g, %g", easy, hard)
	}
	return nil
}

// checkEngine generates a few tokens with the default model through the
// engine's scheduler, the same code path requests take.
func checkEngine(ctx context.Context) error {
	m, err := defaultModel()
	if err != nil {
		return err
	}
	eng, err := lm.NewEngine(m, lm.EngineConfig{MaxBatch: 1, StepTokens: 64})
	if err != nil {
		return err
	}
	defer eng.Close()
	return ota.EngineAnswers(ctx, eng)
}
