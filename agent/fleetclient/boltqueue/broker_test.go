package boltqueue

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/agent/fleetclient/internal/brokertest"
)

// TestAutopahoDeliversQueueThroughRealBrokers fills the queue while no
// client runs (as a device that was offline and restarted), damages two
// entries, then lets autopaho drain it into a real broker: every intact
// message arrives once, in order, and the damaged ones are reported and
// skipped instead of blocking the queue.
func TestAutopahoDeliversQueueThroughRealBrokers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) string
	}{
		{"mochi", func(t *testing.T) string { return brokertest.StartMochi(t).URL() }},
		{"mosquitto", func(t *testing.T) string { return brokertest.StartMosquitto(t).URL() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			brokerURL := tc.start(t)
			testDrain(t, brokerURL)
		})
	}
}

func testDrain(t *testing.T, brokerURL string) {
	const n = 200
	topic := "boltqueue/test/" + strconv.FormatInt(time.Now().UnixNano(), 36)
	path := filepath.Join(t.TempDir(), "q.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() }) // after the clients' cleanups (LIFO)
	q, err := New(db, "out", Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		var b bytes.Buffer
		p := &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(strconv.Itoa(i))}
		if _, err := p.Packet().WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		if i == 10 {
			enqueue(t, q, "this is not an MQTT packet") // autopaho quarantines it
		}
		if err := q.Enqueue(&b); err != nil {
			t.Fatal(err)
		}
	}
	// Flip a bit in message 20 on disk (id 22: one id per message plus the
	// garbage entry, ids start at 1).
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("out"))
		v := append([]byte(nil), b.Get(idKey(22))...)
		v[len(v)-1] ^= 0x40
		return b.Put(idKey(22), v)
	}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u, _ := url.Parse(brokerURL)

	var mu sync.Mutex
	var got []string
	all := make(chan struct{})
	sub := connect(ctx, t, autopaho.ClientConfig{
		ServerUrls: []*url.URL{u},
		KeepAlive:  30,
		ClientConfig: paho.ClientConfig{
			ClientID: "sub-" + topic[len(topic)-6:],
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, string(pr.Packet.Payload))
				if len(got) == n-1 {
					close(all)
				}
				return true, nil
			}},
		},
	})
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}}); err != nil {
		t.Fatal(err)
	}

	connect(ctx, t, autopaho.ClientConfig{
		ServerUrls:            []*url.URL{u},
		KeepAlive:             30,
		SessionExpiryInterval: 60,
		Queue:                 q,
		ClientConfig:          paho.ClientConfig{ClientID: "pub-" + topic[len(topic)-6:]},
	})
	select {
	case <-all:
	case <-ctx.Done():
		mu.Lock()
		t.Fatalf("received %d of %d messages", len(got), n-1)
	}
	mu.Lock()
	defer mu.Unlock()
	want := 0
	for _, s := range got {
		if want == 20 {
			want++ // the bit-flipped one
		}
		if s != strconv.Itoa(want) {
			t.Fatalf("received %v; out of order or duplicated at %q, want %d", got, s, want)
		}
		want++
	}
	for deadline := time.Now().Add(10 * time.Second); q.Stats().Entries != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if st := q.Stats(); st.Entries != 0 || st.Corrupt != 2 {
		t.Fatalf("queue stats after drain = %+v, want empty with 2 quarantined", st)
	}
}

func connect(ctx context.Context, t *testing.T, cfg autopaho.ClientConfig) *autopaho.ConnectionManager {
	t.Helper()
	cfg.ReconnectBackoff = autopaho.NewConstantBackoff(100 * time.Millisecond)
	cm, err := autopaho.NewConnection(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cm.Disconnect(dctx); err != nil {
			t.Errorf("disconnect %s: %v", cfg.ClientID, err)
		}
	})
	if err := cm.AwaitConnection(ctx); err != nil {
		t.Fatal(fmt.Errorf("connect %s: %w", cfg.ClientID, err))
	}
	return cm
}
