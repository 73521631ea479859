package broker

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	mochibolt "github.com/mochi-mqtt/server/v2/hooks/storage/bolt"
	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/internal/mochilisten"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestRestartWithQoS1Inflight restarts the broker while QoS 1 messages are
// in flight to persistent-session subscribers, both offline (queued) and
// online but not yet acknowledging, and checks each arrives exactly once
// after the restart with its original packet id, and that the session then
// carries on (no "missing packet id" loop).
func TestRestartWithQoS1Inflight(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "broker.db")
	pw := passwordsFor(t, "dev-off", "dev-on", "dev-ret", "ops")
	cfg := Config{StorePath: store, Passwords: pw, Admins: []string{"ops"}}
	tp := fleetwire.Topics{}
	offTopic, onTopic := tp.Device("dev-off", fleetwire.SuffixCmd), tp.Device("dev-on", fleetwire.SuffixCmd)

	b1 := startBroker(t, cfg)
	off, err := dial(t, b1.TCPAddr(), "dev-off", dialOpts{user: "dev-off", pass: "pw-dev-off", persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := subscribe(t, off, offTopic); err != nil {
		t.Fatal(err)
	}
	off.close() // offline from here: its messages are queued in its session
	on, err := dial(t, b1.TCPAddr(), "dev-on", dialOpts{user: "dev-on", pass: "pw-dev-on", persistent: true, manualAck: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := subscribe(t, on, onTopic); err != nil {
		t.Fatal(err)
	}
	ops, err := dial(t, b1.TCPAddr(), "ops", dialOpts{user: "ops", pass: "pw-ops"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := publish(t, ops, offTopic, fmt.Sprintf("off-%d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := publish(t, ops, onTopic, "on-0", false); err != nil {
		t.Fatal(err)
	}
	retTopic := tp.Device("dev-ret", fleetwire.SuffixConfigDesired)
	if _, err := publish(t, ops, retTopic, `{"version":7}`, true); err != nil {
		t.Fatal(err)
	}
	first := on.waitMsgs(t, 1)[0] // received, never acknowledged
	if first.PacketID == 0 {
		t.Fatal("packet id 0")
	}
	ops.close()
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	<-on.Done()

	// What the store holds: four inflight messages, each with a packet id.
	st := inflightInStore(t, store)
	if len(st) != 4 {
		t.Fatalf("stored inflight: %v", st)
	}
	for k, id := range st {
		if id == 0 {
			t.Fatalf("%s stored without packet id", k)
		}
	}

	b2 := startBroker(t, cfg)
	on2, err := dial(t, b2.TCPAddr(), "dev-on", dialOpts{user: "dev-on", pass: "pw-dev-on", persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if !on2.connack.SessionPresent {
		t.Fatal("dev-on: session not restored")
	}
	got := on2.waitMsgs(t, 1)
	if string(got[0].Payload) != "on-0" || got[0].PacketID != first.PacketID {
		t.Fatalf("resent %q id %d, want on-0 id %d", got[0].Payload, got[0].PacketID, first.PacketID)
	}
	off2, err := dial(t, b2.TCPAddr(), "dev-off", dialOpts{user: "dev-off", pass: "pw-dev-off", persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if !off2.connack.SessionPresent {
		t.Fatal("dev-off: session not restored")
	}
	// Exactly once each. Not in order: mochi resends a session's inflight
	// messages sorted by uint16(Created seconds) over a map, so messages of
	// the same second come back in random order (with or without a restart;
	// see docs/fleet-cloud.md). The fleet payloads are versioned or carry ids
	// for this reason.
	gotOff := off2.waitMsgs(t, 3)
	seen := map[string]bool{}
	for _, m := range gotOff {
		seen[string(m.Payload)] = true
	}
	if len(gotOff) != 3 || !seen["off-0"] || !seen["off-1"] || !seen["off-2"] {
		t.Fatalf("offline messages after restart: %d, %v", len(gotOff), seen)
	}
	// Retained messages (the cloud's desired configs) survived as well.
	ret, err := dial(t, b2.TCPAddr(), "dev-ret", dialOpts{user: "dev-ret", pass: "pw-dev-ret"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := subscribe(t, ret, retTopic); err != nil {
		t.Fatal(err)
	}
	if got := ret.waitMsgs(t, 1); string(got[0].Payload) != `{"version":7}` || !got[0].Retain {
		t.Fatalf("retained after restart: %q retain=%v", got[0].Payload, got[0].Retain)
	}
	ret.close()
	// The sessions carry on: a new message to each arrives, nothing is
	// repeated, and the acknowledged messages left the store.
	ops2, err := dial(t, b2.TCPAddr(), "ops", dialOpts{user: "ops", pass: "pw-ops"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c     *mqttClient
		topic string
		n     int
	}{{on2, onTopic, 2}, {off2, offTopic, 4}} {
		if _, err := publish(t, ops2, tc.topic, "after", false); err != nil {
			t.Fatal(err)
		}
		msgs := tc.c.waitMsgs(t, tc.n)
		if len(msgs) != tc.n || string(msgs[tc.n-1].Payload) != "after" {
			t.Fatalf("%s: %d messages, last %q", tc.topic, len(msgs), msgs[len(msgs)-1].Payload)
		}
	}
	// Subscriptions survived the restart too (they delivered "after").
	// paho acknowledges after its handler returns, so wait for the broker to
	// have processed the acks before disconnecting.
	for _, id := range []string{"dev-on", "dev-off"} {
		waitFor(t, id+" acks", func() bool {
			cl, ok := b2.srv.Clients.Get(id)
			return ok && cl.State.Inflight.Len() == 0
		})
	}
	ops2.close()
	on2.close()
	off2.close()
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}
	if st := inflightInStore(t, store); len(st) != 0 {
		t.Fatalf("inflight left after acks: %v", st)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// inflightInStore reads the inflight bucket of a closed store.
func inflightInStore(t *testing.T, path string) map[string]uint16 {
	t.Helper()
	h, err := openStore(path, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	msgs, err := h.StoredInflightMessages()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint16{}
	for _, m := range msgs {
		out[fmt.Sprintf("%s/%d", m.Client, m.PacketID)] = m.PacketID
	}
	if err := h.db.View(func(tx *bolt.Tx) error { return firstErr(tx.Check()) }); err != nil {
		t.Fatalf("store check: %v", err)
	}
	return out
}

func firstErr(c <-chan error) error {
	for err := range c {
		return err
	}
	return nil
}

// TestUpstreamBoltHookDropsPacketID documents why storeHook exists: mochi's
// own bolt hook stores the same queued message without its packet id. If
// this test starts failing, upstream fixed the bug and the replacement could
// be retired.
func TestUpstreamBoltHookDropsPacketID(t *testing.T) {
	srv := mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	upstream := new(mochibolt.Hook)
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddHook(upstream, &mochibolt.Options{Path: filepath.Join(t.TempDir(), "upstream.db")}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.AddListener(mochilisten.New(srv, "tcp", ln)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	sub, err := dial(t, ln.Addr().String(), "sub", dialOpts{persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := subscribe(t, sub, "t/1"); err != nil {
		t.Fatal(err)
	}
	sub.close()
	if err := srv.Publish("t/1", []byte("x"), false, 1); err != nil {
		t.Fatal(err)
	}
	// The inline publish stores synchronously.
	msgs, err := upstream.StoredInflightMessages()
	if err != nil {
		t.Fatal(err)
	}
	cl, _ := srv.Clients.Get("sub")
	inMemory := cl.State.Inflight.GetAll(false)
	if len(msgs) != 1 || len(inMemory) != 1 || inMemory[0].PacketID == 0 || msgs[0].PacketID != 0 {
		t.Fatalf("upstream stored %d messages (id %v), in memory %d; expected the known bug: stored id 0 for in-memory id != 0", len(msgs), msgs, len(inMemory))
	}
}
