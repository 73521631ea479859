package ota

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/crashtest"
	"github.com/phaseless/phaseless/models/predictor"
)

// openRouter is what the agent does at start for the router model: the
// shipped one, replaced by what the fleet installed under dataDir.
func openRouter(dataDir string) (*Updater, *predictor.Swappable, error) {
	m, err := predictor.Default()
	if err != nil {
		return nil, nil, err
	}
	pred := predictor.NewSwappable(m)
	u, err := Open(Config{DataDir: dataDir, Board: "rpi4"})
	if err != nil {
		return nil, nil, err
	}
	if _, err := u.OpenArtifacts(context.Background(), Targets{Router: pred}); err != nil {
		return nil, nil, err
	}
	return u, pred, nil
}

// TestKillDuringRouterInstall kills a process over and over while it
// installs router-model bundles (some broken) through the hot-swap path:
// after every kill the router the next start opens on the same data
// directory passes predictor.Validate and runs a version no older than the
// last one whose install was acknowledged.
func TestKillDuringRouterInstall(t *testing.T) {
	dir := t.TempDir()
	activated := 0
	crashtest.Run(t, crashtest.Config{
		Cycles: crashtest.Cycles(t, 12), // 100 with PHASELESS_CRASH_CYCLES=100
		Arg:    dir,
		MinRun: 20 * time.Millisecond,
		MaxRun: 400 * time.Millisecond,
		Child: func(dataDir string, ack *crashtest.Acker) {
			u, _, err := openRouter(dataDir)
			if err != nil {
				crashtest.Fail("start: %v", err)
			}
			h := u.hot[firmware.KindPredictor]
			pub, priv, _ := ed25519.GenerateKey(nil)
			minor := func(v string) int { n, _ := strconv.Atoi(strings.TrimPrefix(v, "1.")); return n }
			start := max(minor(h.version()), minor(h.state().Failed))
			for n := start + 1; ; n++ {
				v := fmt.Sprintf("1.%d", n)
				data := predictor.Shipped()
				if n%4 == 0 {
					data = []byte("broken")
				}
				var b bytes.Buffer
				if err := firmware.WriteKind(&b, priv, firmware.KindPredictor, v, "rpi4", map[string][]byte{"router.onnx": data}, []string{"router.onnx"}); err != nil {
					crashtest.Fail("sign: %v", err)
				}
				vb, err := firmware.Open(&b, firmware.Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: h.version()})
				if err != nil {
					crashtest.Fail("open %s: %v", v, err)
				}
				if _, err := h.install(context.Background(), vb); err == nil {
					ack.Ack("activate %s", v)
				} else if n%4 != 0 {
					crashtest.Fail("install %s: %v", v, err)
				}
			}
		},
		Verify: func(t *testing.T, _ int, lines, _ []string) {
			for _, l := range lines {
				n, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimPrefix(l, "activate "), "1."))
				activated = max(activated, n)
			}
			u, pred, err := openRouter(dir)
			if err != nil {
				t.Fatalf("the router does not open after the kill: %v", err)
			}
			if err := predictor.Validate(pred); err != nil {
				t.Fatalf("router after the kill: %v", err)
			}
			got, _ := strconv.Atoi(strings.TrimPrefix(u.hot[firmware.KindPredictor].version(), "1."))
			if got < activated {
				t.Fatalf("runs router 1.%d, but 1.%d was acknowledged", got, activated)
			}
		},
	})
}
