package broker

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/internal/metrics"
)

func FuzzParsePasswords(f *testing.F) {
	f.Add("dev-1:$7$101$cXKNF2XXUt4wgzKe$MYcSUWVG8laKeYX/KAHJNzneAXSM3oitoy9KMQMQpvGLaowUmKxs91mplXq3yiMqP8mywXJqs6+utGoEdNf9vQ==", "secret")
	f.Add("a:$6$AAAA$"+strings.Repeat("A", 86)+"==", "x")
	f.Add("# c\n\nb:$7$1$$", "")
	f.Fuzz(func(t *testing.T, file, pw string) {
		p, err := ParsePasswords(strings.NewReader(file))
		if err != nil {
			return
		}
		for u := range p.users {
			p.Verify(u, []byte(pw)) // must not panic
		}
	})
}

// FuzzStoreRestore writes arbitrary bytes as stored records and restores
// them: a torn or foreign value must be skipped and counted, never panic or
// fail the broker's start.
func FuzzStoreRestore(f *testing.F) {
	f.Add([]byte("dev-1\x00\x00\x01"), []byte(`{"payload":"eA==","fixedheader":{"type":3,"qos":1}}`))
	f.Add([]byte("dev-1\x00phaseless/dev/dev-1/cmd"), []byte(`{"filter":"phaseless/dev/dev-1/cmd","qos":1}`))
	f.Add([]byte("dev-1"), []byte(`{"id":"dev-1","clean":false}`))
	f.Add([]byte("x"), []byte("{"))
	f.Add([]byte("\x00"), []byte(`{"filter":"#/x"}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, key, val []byte) {
		if len(key) == 0 || len(key) > bolt.MaxKeySize {
			return
		}
		h, err := openStore(filepath.Join(dir, "f.db"), slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		defer h.Stop()
		err = h.db.Update(func(tx *bolt.Tx) error {
			for _, b := range [][]byte{bucketClients, bucketSubs, bucketInflight, bucketRetained} {
				if err := tx.Bucket(b).Put(key, val); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.StoredClients(); err != nil {
			t.Fatal(err)
		}
		if _, err := h.StoredSubscriptions(); err != nil {
			t.Fatal(err)
		}
		msgs, err := h.StoredInflightMessages()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if m.PacketID == 0 {
				t.Fatal("restored inflight message with packet id 0")
			}
			m.ToPacket()
		}
		if _, err := h.StoredRetainedMessages(); err != nil {
			t.Fatal(err)
		}
	})
}
