package firmware

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/internal/crashtest"
)

// slotFiles is the content of version v's bundle: a file naming the
// version and a payload big enough that extraction takes a few writes.
func slotFiles(v string) map[string][]byte {
	return map[string][]byte{
		"version":   []byte(v),
		"bin/agent": bytes.Repeat([]byte(v+"\n"), 16<<10/len(v)),
	}
}

var slotFileNames = []string{"version", "bin/agent"}

// minorOf is N of a test version 1.N.
func minorOf(v string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(v, "1."))
	return n
}

// TestKillDuringSlotUpdatesAlwaysBootable kills a device that installs,
// boots, commits, rolls back and reinstalls updates in a loop, many times
// over one slot directory. After every kill the state opens, the slot it
// would boot (and the active slot) holds exactly the files of the version
// the state names for it, and no acknowledged Commit is lost.
func TestKillDuringSlotUpdatesAlwaysBootable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "slots")
	committed := 0 // highest minor version whose Commit was acknowledged
	crashtest.Run(t, crashtest.Config{
		Cycles: crashtest.Cycles(t, 40), // 100 with PHASELESS_CRASH_CYCLES=100
		Arg:    dir,
		// Every step fsyncs files, the state and the directory: give the
		// child time for a few of them per life.
		MinRun: 10 * time.Millisecond,
		MaxRun: 250 * time.Millisecond,
		Child: func(dir string, ack *crashtest.Acker) {
			pub, priv := newKey(t)
			s, err := OpenSlots(dir, "1.0")
			if err != nil {
				crashtest.Fail("open: %v", err)
			}
			if _, _, err := s.Boot(); err != nil {
				crashtest.Fail("boot: %v", err)
			}
			rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 2))
			for {
				st := s.State()
				next := 0
				for _, v := range st.Versions {
					next = max(next, minorOf(v))
				}
				version := fmt.Sprintf("1.%d", next+1)
				_, running := s.Running()
				var b bytes.Buffer
				if err := Write(&b, priv, version, "rpi4", slotFiles(version), slotFileNames); err != nil {
					crashtest.Fail("write bundle: %v", err)
				}
				v, err := Open(&b, Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: running, anyVersion: true})
				if err != nil {
					crashtest.Fail("open bundle: %v", err)
				}
				slot, err := s.Install(v)
				if err != nil {
					crashtest.Fail("install: %v", err)
				}
				ack.Ack("install %s %s", slot, version)
				// A reboot onto the trial, then whatever the device decides:
				// commit, roll back, or install again over the trial.
				if _, _, err := s.Boot(); err != nil {
					crashtest.Fail("boot: %v", err)
				}
				switch rng.IntN(3) {
				case 0:
					if err := s.Commit(); err != nil {
						crashtest.Fail("commit: %v", err)
					}
					ack.Ack("commit %s %s", slot, version)
				case 1:
					if err := s.Rollback(); err != nil {
						crashtest.Fail("rollback: %v", err)
					}
				}
			}
		},
		Verify: func(t *testing.T, round int, lines, _ []string) {
			for _, l := range lines {
				var op, slot, version string
				if _, err := fmt.Sscanf(l, "%s %s %s", &op, &slot, &version); err != nil {
					t.Fatalf("bad line %q", l)
				}
				if op == "commit" {
					committed = max(committed, minorOf(version))
				}
			}
			s, err := OpenSlots(dir, "1.0")
			if err != nil {
				t.Fatalf("reopen after kill: %v", err)
			}
			st := s.State()
			running, version := s.Running()
			checkSlot(t, s, running, version)
			checkSlot(t, s, st.Active, st.Versions[st.Active])
			if got := minorOf(st.Versions[st.Active]); got < committed {
				t.Fatalf("active slot %s runs 1.%d, but 1.%d was committed (state %+v)", st.Active, got, committed, st)
			}
		},
	})
}

// checkSlot fails unless slot holds exactly version's files (the factory
// version 1.0 in slot a is the image the device shipped with, no files).
func checkSlot(t *testing.T, s *Slots, slot, version string) {
	t.Helper()
	if slot == "a" && version == "1.0" {
		return
	}
	if slot != "a" && slot != "b" || version == "" {
		t.Fatalf("state names slot %q version %q", slot, version)
	}
	for name, want := range slotFiles(version) {
		got, err := os.ReadFile(filepath.Join(s.Path(slot), filepath.FromSlash(name)))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("slot %s should hold %s: %s: %v (%d bytes, want %d); state %+v", slot, version, name, err, len(got), len(want), s.State())
		}
	}
}
