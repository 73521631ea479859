package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/phaseless/phaseless/internal/crashtest"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestKillWithQueuedQoS1LosesNothing kills a broker (kill -9) while a
// publisher sends QoS 1 messages for a device that is offline with a
// persistent session, many times over one broker store. After every kill a
// fresh broker on the same store delivers to that device every message
// whose PUBACK the publisher had received, and bbolt's check is clean.
func TestKillWithQueuedQoS1LosesNothing(t *testing.T) {
	dir := t.TempDir()
	topic := fleetwire.Topics{}.Device("dev-off", fleetwire.SuffixCmd)
	cfgIn := func(dir string) Config {
		return Config{StorePath: filepath.Join(dir, "broker.db"), PasswordFile: filepath.Join(dir, "passwd"), Admins: []string{"ops"}}
	}
	acked := map[string]bool{}
	delivered := map[string]int{}
	crashtest.Run(t, crashtest.Config{
		Progress: true,                    // the test checks that something was acknowledged
		Cycles:   crashtest.Cycles(t, 15), // 100 with PHASELESS_CRASH_CYCLES=100
		Arg:      dir,
		MaxRun:   200 * time.Millisecond,
		Setup: func(t *testing.T) {
			var lines []string
			for _, u := range []string{"dev-off", "ops"} {
				l, err := HashPassword(u, "pw-"+u)
				if err != nil {
					t.Fatal(err)
				}
				lines = append(lines, l)
			}
			if err := os.WriteFile(filepath.Join(dir, "passwd"), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			b := startBroker(t, cfgIn(dir))
			off, err := dial(t, b.TCPAddr(), "dev-off", dialOpts{user: "dev-off", pass: "pw-dev-off", persistent: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := subscribe(t, off, topic); err != nil {
				t.Fatal(err)
			}
			off.close()
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
		},
		Child: func(dir string, ack *crashtest.Acker) {
			cfg := cfgIn(dir)
			cfg.TCPAddr = "127.0.0.1:0"
			b, err := Start(cfg)
			if err != nil {
				crashtest.Fail("start: %v", err)
			}
			var wg sync.WaitGroup
			for p := range 2 {
				wg.Go(func() {
					ops, err := dial(t, b.TCPAddr(), fmt.Sprint("ops-", p), dialOpts{user: "ops", pass: "pw-ops"})
					if err != nil {
						crashtest.Fail("dial: %v", err)
					}
					for n := 0; ; n++ {
						m := fmt.Sprintf("%d-%d-%d", os.Getpid(), p, n)
						if _, err := publish(t, ops, topic, m, false); err != nil {
							crashtest.Fail("publish: %v", err)
						}
						ack.Ack("%s", m)
					}
				})
			}
			wg.Wait()
		},
		Verify: func(t *testing.T, _ int, lines, _ []string) {
			want := 0
			for _, l := range lines {
				acked[l] = true
			}
			for m := range acked {
				if delivered[m] == 0 {
					want++
				}
			}
			b := startBroker(t, cfgIn(dir))
			off, err := dial(t, b.TCPAddr(), "dev-off", dialOpts{user: "dev-off", pass: "pw-dev-off", persistent: true})
			if err != nil {
				t.Fatal(err)
			}
			// Everything still undelivered that was acknowledged must come;
			// unacknowledged messages the broker had stored may come too.
			for {
				got := off.waitMsgs(t, want)
				missing := 0
				for m := range acked {
					if delivered[m] == 0 && !contains(got, m) {
						missing++
					}
				}
				if missing == 0 {
					for _, p := range got {
						delivered[string(p.Payload)]++
					}
					break
				}
				want = len(got) + missing
			}
			// paho acknowledges after its handler returns: leave only once
			// the broker has every acknowledgement, or the next round sees
			// this round's messages again.
			waitFor(t, "acknowledgements", func() bool {
				cl, ok := b.srv.Clients.Get("dev-off")
				return ok && cl.State.Inflight.Len() == 0
			})
			off.close()
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			crashtest.CheckBolt(t, cfgIn(dir).StorePath)
		},
	})
	dups := 0
	for _, n := range delivered {
		dups += n - 1
	}
	t.Logf("%d acknowledged, %d delivered, %d delivered again (QoS 1 allows it)", len(acked), len(delivered), dups)
	if len(acked) == 0 {
		t.Fatal("nothing acknowledged")
	}
}

func contains(msgs []*paho.Publish, payload string) bool {
	for _, p := range msgs {
		if string(p.Payload) == payload {
			return true
		}
	}
	return false
}
