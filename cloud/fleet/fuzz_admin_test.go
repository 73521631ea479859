package fleet

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// fuzzManager is a real Manager on an embedded broker for a fuzz target.
func fuzzManager(f *testing.F) *Manager {
	b, err := broker.Start(broker.Config{TCPAddr: "127.0.0.1:0", DevAuth: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { b.Close() })
	m, err := Open(Config{DataDir: f.TempDir(), Broker: b, MaxRecords: 1000})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { m.Close() })
	return m
}

// FuzzAdminBodies sends arbitrary bodies (and device ids) to the admin
// routes that take one. A bad body is a 400 in the API's error shape,
// never a 500 or a panic; an accepted config reads back as stored.
func FuzzAdminBodies(f *testing.F) {
	f.Add(false, "car-1", []byte(`{"values":{"model":"edge.gguf","route":null},"merge":true}`))
	f.Add(false, "car-1", []byte(`{"values":{"":"x"}}`))
	f.Add(false, "car-1", []byte(`{"values":{"a":"b"},"extra":1}`))
	f.Add(false, "../../x", []byte(`{"values":{}}`))
	f.Add(true, "car-1", []byte(`{"name":"reload-model","args":{"path":"/tmp/x"}}`))
	f.Add(true, "car-1", []byte(`{"name":""}`))
	f.Add(true, "car-1", []byte(`{"name":"x"} {"name":"y"}`))
	f.Add(true, "car-1", []byte(`[`))
	m := fuzzManager(f)
	h := m.Handler()
	f.Fuzz(func(t *testing.T, command bool, id string, body []byte) {
		path, method := "/v1/fleet/devices/"+url.PathEscape(id)+"/config", http.MethodPut
		if command {
			path, method = "/v1/fleet/devices/"+url.PathEscape(id)+"/commands", http.MethodPost
		}
		u, err := url.Parse(path)
		if err != nil {
			return
		}
		req := httptest.NewRequest(method, "/", bytes.NewReader(body))
		req.URL = u
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusAccepted, http.StatusServiceUnavailable:
		case http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusNotFound, http.StatusMethodNotAllowed:
			return // the mux's own answer for an id that is not one clean path segment
		case http.StatusBadRequest:
			var e apiError
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Message == "" || e.Error.Type != "invalid_request_error" {
				t.Fatalf("400 not in the API's error shape: %s", rec.Body)
			}
			return
		default:
			t.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
		}
		if command {
			return
		}
		var cu ConfigUpdate
		_ = json.Unmarshal(body, &cu)
		dev, err := m.Device(id)
		if err != nil || dev.Desired == nil {
			t.Fatalf("config accepted but device %q reads %+v, %v", id, dev, err)
		}
		for k, v := range cu.Values {
			if got, ok := dev.Desired.Values[k]; (v == nil) == ok || (v != nil && got != *v) {
				t.Fatalf("config %q: stored %q (present %v), sent %v", k, got, ok, v)
			}
		}
	})
}

// FuzzStoredRecords writes arbitrary bytes where fleet.db keeps a device, a
// seq set and a command (what a torn or foreign write leaves), then runs
// every read and the next ingest: corrupt values are errors or skipped,
// never a panic, and bbolt's structure stays intact.
func FuzzStoredRecords(f *testing.F) {
	f.Add(uint8(0), []byte(`{"id":"car-1","telemetry":{"last_seq":5}}`))
	f.Add(uint8(0), []byte(`{"telemetry":{"stored":"many"}}`))
	f.Add(uint8(1), []byte{3, 1, 0})
	f.Add(uint8(1), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add(uint8(2), []byte(`{"device_id":"car-1","id":"c1","name":"x","state":"pending","issued_at":"2026-01-01T00:00:00Z"}`))
	f.Add(uint8(2), []byte(`{"issued_at":"yesterday"}`))
	f.Add(uint8(3), []byte(`{"device_id":"car-1","seq":1}`))
	f.Add(uint8(3), []byte(`not json`))
	buckets := [][]byte{bucketDevices, bucketSeen, bucketCommands, bucketRecords}
	keys := [][]byte{[]byte("car-1"), []byte("car-1"), commandKey("car-1", "c1"), recordKey(time.Unix(0, 1), 1)}
	f.Fuzz(func(t *testing.T, which uint8, value []byte) {
		i := int(which) % len(buckets)
		st, err := openStore(t.TempDir() + "/fleet.db")
		if err != nil {
			t.Fatal(err)
		}
		defer st.db.Close()
		if err := st.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(buckets[i]).Put(keys[i], value) }); err != nil {
			t.Fatal(err)
		}
		_, _ = st.device("car-1")
		_, _ = st.devices()
		_, _ = st.command("car-1", "c1")
		_, _ = st.counts()
		_ = st.export(time.Time{}, "car-1", func([]byte) error { return nil })
		_, _ = st.ingest("car-1", benchBatch("car-1", 1), time.Unix(100, 0), 10, time.Hour)
		_, _ = st.prune(time.Unix(100, 0), 1, time.Hour)
		_, _ = st.commandResult("car-1", &fleetwire.CommandResult{ID: "c1", OK: true}, time.Unix(100, 0))
		if err := st.db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				return err
			}
			return nil
		}); err != nil {
			t.Fatalf("fleet.db structure broken: %v", err)
		}
	})
}
