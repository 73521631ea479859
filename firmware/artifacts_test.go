package firmware

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/phaseless/phaseless/internal/crashtest"
)

func artifactBundle(t testing.TB, version string) *Verified {
	t.Helper()
	pub, priv := newKey(t)
	var b bytes.Buffer
	files := map[string][]byte{"predictor.onnx": bytes.Repeat([]byte(version+"\n"), 32<<10/len(version))}
	if err := WriteKind(&b, priv, KindPredictor, version, "rpi4", files, []string{"predictor.onnx"}); err != nil {
		t.Fatal(err)
	}
	v, err := Open(&b, Policy{TrustedKey: pub, Board: "rpi4", anyVersion: true})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestArtifactsStates walks install, activate, fail and the fallback of a
// failed current version.
func TestArtifactsStates(t *testing.T) {
	dir := t.TempDir()
	a, err := OpenArtifacts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.State() != (ArtifactState{}) {
		t.Fatalf("fresh state %+v", a.State())
	}
	for _, v := range []string{"1.1", "1.2"} {
		if _, err := a.Install(artifactBundle(t, v)); err != nil {
			t.Fatal(err)
		}
		if err := a.Activate(v); err != nil {
			t.Fatal(err)
		}
	}
	if st := a.State(); st.Current != "1.2" || st.Previous != "1.1" {
		t.Fatalf("state %+v", st)
	}
	if _, err := a.Install(artifactBundle(t, "1.2")); err == nil {
		t.Fatal("reinstalled the version in force")
	}
	// A candidate that fails its health check is recorded and removed.
	if _, err := a.Install(artifactBundle(t, "1.3")); err != nil {
		t.Fatal(err)
	}
	if err := a.Fail("1.3"); err != nil {
		t.Fatal(err)
	}
	if st := a.State(); st.Current != "1.2" || st.Previous != "1.1" || st.Failed != "1.3" {
		t.Fatalf("after a failed candidate %+v", st)
	}
	if _, err := os.Stat(a.Path("1.3")); !os.IsNotExist(err) {
		t.Fatalf("failed candidate kept: %v", err)
	}
	// The version in force stops loading: the previous one comes back.
	if err := a.Fail("1.2"); err != nil {
		t.Fatal(err)
	}
	a2, err := OpenArtifacts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st := a2.State(); st.Current != "1.1" || st.Failed != "1.2" {
		t.Fatalf("after the current failed %+v", st)
	}
	if _, err := VerifyInstalled(a2.Path("1.1")); err != nil {
		t.Fatal(err)
	}
	// A damaged file is found.
	if err := os.WriteFile(filepath.Join(a2.Path("1.1"), "predictor.onnx"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyInstalled(a2.Path("1.1")); err == nil {
		t.Fatal("damaged install verified")
	}
}

// TestArtifactsVersionWithV: a version signed as "v1.2" (ParseVersion takes
// the "v") installs, and the store opens on it again; it was once set aside
// on the next start, so the device silently went back to its built-in
// artifact.
func TestArtifactsVersionWithV(t *testing.T) {
	dir := t.TempDir()
	a, err := OpenArtifacts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Install(artifactBundle(t, "v1.2")); err != nil {
		t.Fatal(err)
	}
	if err := a.Activate("v1.2"); err != nil {
		t.Fatal(err)
	}
	if re, err := OpenArtifacts(dir); err != nil || re.Discarded != nil || re.State().Current != "v1.2" {
		t.Fatalf("reopened on v1.2: %+v, discarded %v, %v", re.State(), re.Discarded, err)
	}
}

// TestKillDuringArtifactInstall kills an agent stand-in that installs,
// activates and fails router-model versions in a loop. After every kill the
// store opens, no half-done install is left, every version the state names
// has exactly its files, and no acknowledged activation is lost.
func TestKillDuringArtifactInstall(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "predictor")
	activated := 0
	crashtest.Run(t, crashtest.Config{
		Cycles: crashtest.Cycles(t, 30), // 100 with PHASELESS_CRASH_CYCLES=100
		Arg:    dir,
		MinRun: 10 * time.Millisecond,
		MaxRun: 200 * time.Millisecond,
		Child: func(dir string, ack *crashtest.Acker) {
			a, err := OpenArtifacts(dir)
			if err != nil {
				crashtest.Fail("open: %v", err)
			}
			rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 3))
			next := max(minorOf(a.State().Current), minorOf(a.State().Previous), minorOf(a.State().Failed)) + 1
			for ; ; next++ {
				v := fmt.Sprintf("1.%d", next)
				if _, err := a.Install(artifactBundle(t, v)); err != nil {
					crashtest.Fail("install: %v", err)
				}
				if rng.IntN(4) == 0 {
					if err := a.Fail(v); err != nil {
						crashtest.Fail("fail: %v", err)
					}
					continue
				}
				if err := a.Activate(v); err != nil {
					crashtest.Fail("activate: %v", err)
				}
				ack.Ack("activate %s", v)
			}
		},
		Verify: func(t *testing.T, _ int, lines, _ []string) {
			for _, l := range lines {
				var v string
				if _, err := fmt.Sscanf(l, "activate %s", &v); err != nil {
					t.Fatalf("bad line %q", l)
				}
				activated = max(activated, minorOf(v))
			}
			a, err := OpenArtifacts(dir)
			if err != nil {
				t.Fatalf("reopen after kill: %v", err)
			}
			st := a.State()
			if got := minorOf(st.Current); got < activated {
				t.Fatalf("current 1.%d, but 1.%d was activated (state %+v)", got, activated, st)
			}
			for _, v := range []string{st.Current, st.Previous} {
				if v == "" {
					continue
				}
				m, err := VerifyInstalled(a.Path(v))
				if err != nil || m.Version != v {
					t.Fatalf("state %+v names %s: %v (manifest %s)", st, v, err, m.Version)
				}
			}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if filepath.Ext(e.Name()) == ".incoming" {
					t.Fatalf("half-done install %s left after open", e.Name())
				}
			}
		},
	})
}
