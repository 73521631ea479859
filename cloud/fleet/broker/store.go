package broker

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/internal/metrics"
)

// Buckets of the broker store. Keys are chosen so everything of one client
// is one prefix scan: clients[id], subs[id 0x00 filter],
// inflight[id 0x00 packetID(2 bytes BE)], retained[topic].
var (
	bucketClients  = []byte("clients")
	bucketSubs     = []byte("subs")
	bucketInflight = []byte("inflight")
	bucketRetained = []byte("retained")
)

// storeHook persists sessions, subscriptions, inflight messages and retained
// messages in bbolt, replacing mochi's bolt hook, which loses the packet id
// of inflight messages (see the package doc).
//
// What it deliberately does not store: the inline client (the cloud's own
// in-process subscriptions are re-made at start), inbound QoS 1 PUBACK
// entries (mochi creates and deletes them within one call; after a crash the
// sender resends the PUBLISH anyway), and $SYS info (statistics only).
type storeHook struct {
	mqtt.HookBase
	db  *bolt.DB
	log *slog.Logger

	writeErrors *metrics.Counter
	badRecords  *metrics.Counter
}

func openStore(path string, log *slog.Logger, reg *metrics.Registry) (*storeHook, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open broker store %s: %w", path, err)
	}
	// Hooks run on each client's goroutine; Batch coalesces the commits of
	// concurrent clients into one fsync'd transaction.
	db.MaxBatchDelay = 2 * time.Millisecond
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketClients, bucketSubs, bucketInflight, bucketRetained, bucketPublishing} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init broker store %s: %w", path, err)
	}
	return &storeHook{
		db:          db,
		log:         log,
		writeErrors: reg.Counter("phaseless_fleet_broker_store_write_errors_total", "writes to the broker's bbolt store that failed"),
		badRecords:  reg.Counter("phaseless_fleet_broker_store_bad_records_total", "undecodable records skipped when the broker restored its store"),
	}, nil
}

func (h *storeHook) ID() string { return "phaseless-bbolt-store" }

func (h *storeHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnSessionEstablished, mqtt.OnDisconnect, mqtt.OnSubscribed, mqtt.OnUnsubscribed,
		mqtt.OnRetainMessage, mqtt.OnRetainedExpired, mqtt.OnWillSent, mqtt.OnQosPublish,
		mqtt.OnQosComplete, mqtt.OnQosDropped, mqtt.OnClientExpired, mqtt.OnPublish, mqtt.OnPublished,
		mqtt.StoredClients, mqtt.StoredSubscriptions, mqtt.StoredInflightMessages, mqtt.StoredRetainedMessages:
		return true
	}
	return false
}

// Stop closes the database; mochi calls it once from Server.Close.
func (h *storeHook) Stop() error { return h.db.Close() }

func clientPrefix(id string) []byte { return append([]byte(id), 0) }

func subKey(id, filter string) []byte { return append(clientPrefix(id), filter...) }

func inflightKey(id string, packetID uint16) []byte {
	return binary.BigEndian.AppendUint16(clientPrefix(id), packetID)
}

func (h *storeHook) update(fn func(tx *bolt.Tx) error) {
	if err := h.db.Batch(fn); err != nil {
		h.writeErrors.Inc()
		h.log.Error("broker store write failed", "err", err)
	}
}

func put(tx *bolt.Tx, bucket, key []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return tx.Bucket(bucket).Put(key, b)
}

func deletePrefix(tx *bolt.Tx, bucket, prefix []byte) error {
	c := tx.Bucket(bucket).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// forgetClient removes everything stored for a client id.
func forgetClient(tx *bolt.Tx, id string) error {
	if err := tx.Bucket(bucketClients).Delete([]byte(id)); err != nil {
		return err
	}
	if err := deletePrefix(tx, bucketSubs, clientPrefix(id)); err != nil {
		return err
	}
	return deletePrefix(tx, bucketInflight, clientPrefix(id))
}

func storedClient(cl *mqtt.Client) storage.Client {
	props := cl.Properties.Props.Copy(false)
	return storage.Client{
		ID:              cl.ID,
		T:               storage.ClientKey,
		Remote:          cl.Net.Remote,
		Listener:        cl.Net.Listener,
		Username:        cl.Properties.Username,
		Clean:           cl.Properties.Clean,
		ProtocolVersion: cl.Properties.ProtocolVersion,
		Properties: storage.ClientProperties{
			SessionExpiryInterval:     props.SessionExpiryInterval,
			SessionExpiryIntervalFlag: props.SessionExpiryIntervalFlag,
			AuthenticationMethod:      props.AuthenticationMethod,
			AuthenticationData:        props.AuthenticationData,
			RequestProblemInfo:        props.RequestProblemInfo,
			RequestProblemInfoFlag:    props.RequestProblemInfoFlag,
			RequestResponseInfo:       props.RequestResponseInfo,
			ReceiveMaximum:            props.ReceiveMaximum,
			TopicAliasMaximum:         props.TopicAliasMaximum,
			User:                      props.User,
			MaximumPacketSize:         props.MaximumPacketSize,
		},
		Will: storage.ClientWill(cl.Properties.Will),
	}
}

// storedMessage keeps what mochi's bolt hook drops: the PacketID.
func storedMessage(cl *mqtt.Client, pk packets.Packet, kind string) storage.Message {
	props := pk.Properties.Copy(false)
	return storage.Message{
		T:           kind,
		Client:      cl.ID,
		Origin:      pk.Origin,
		FixedHeader: pk.FixedHeader,
		TopicName:   pk.TopicName,
		Payload:     pk.Payload,
		Created:     pk.Created,
		PacketID:    pk.PacketID,
		Properties: storage.MessageProperties{
			PayloadFormat:          props.PayloadFormat,
			PayloadFormatFlag:      props.PayloadFormatFlag,
			MessageExpiryInterval:  props.MessageExpiryInterval,
			ContentType:            props.ContentType,
			ResponseTopic:          props.ResponseTopic,
			CorrelationData:        props.CorrelationData,
			SubscriptionIdentifier: props.SubscriptionIdentifier,
			User:                   props.User,
		},
	}
}

// OnSessionEstablished records the client. A clean start abandons whatever
// an earlier session of this id left in the store (mochi has already dropped
// it in memory; the client cannot have subscribed yet).
func (h *storeHook) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	if cl.Net.Inline {
		return
	}
	h.update(func(tx *bolt.Tx) error {
		if cl.Properties.Clean {
			if err := forgetClient(tx, cl.ID); err != nil {
				return err
			}
		}
		return put(tx, bucketClients, []byte(cl.ID), storedClient(cl))
	})
}

func (h *storeHook) OnWillSent(cl *mqtt.Client, _ packets.Packet) {
	if cl.Net.Inline {
		return
	}
	h.update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketClients).Get([]byte(cl.ID)) == nil {
			return nil // already expired and forgotten
		}
		return put(tx, bucketClients, []byte(cl.ID), storedClient(cl))
	})
}

// OnDisconnect forgets sessions that end with the connection. A session
// taken over by a new connection lives on under the same id.
func (h *storeHook) OnDisconnect(cl *mqtt.Client, _ error, expire bool) {
	if cl.Net.Inline || !expire || errors.Is(cl.StopCause(), packets.ErrSessionTakenOver) {
		return
	}
	h.update(func(tx *bolt.Tx) error { return forgetClient(tx, cl.ID) })
}

func (h *storeHook) OnClientExpired(cl *mqtt.Client) {
	h.update(func(tx *bolt.Tx) error { return forgetClient(tx, cl.ID) })
}

func (h *storeHook) OnSubscribed(cl *mqtt.Client, pk packets.Packet, reasonCodes []byte) {
	if cl.Net.Inline {
		return
	}
	h.update(func(tx *bolt.Tx) error {
		for i, f := range pk.Filters {
			if i >= len(reasonCodes) || reasonCodes[i] >= packets.ErrUnspecifiedError.Code {
				continue // refused (e.g. by the ACL): nothing to restore
			}
			sub := storage.Subscription{
				T:                 storage.SubscriptionKey,
				Client:            cl.ID,
				Filter:            f.Filter,
				Identifier:        f.Identifier,
				RetainHandling:    f.RetainHandling,
				Qos:               reasonCodes[i],
				RetainAsPublished: f.RetainAsPublished,
				NoLocal:           f.NoLocal,
			}
			if err := put(tx, bucketSubs, subKey(cl.ID, f.Filter), sub); err != nil {
				return err
			}
		}
		return nil
	})
}

func (h *storeHook) OnUnsubscribed(cl *mqtt.Client, pk packets.Packet) {
	if cl.Net.Inline {
		return
	}
	h.update(func(tx *bolt.Tx) error {
		for _, f := range pk.Filters {
			if err := tx.Bucket(bucketSubs).Delete(subKey(cl.ID, f.Filter)); err != nil {
				return err
			}
		}
		return nil
	})
}

// OnRetainMessage stores retained messages of every publisher, the inline
// client included: the cloud's desired configs are retained and must survive.
func (h *storeHook) OnRetainMessage(cl *mqtt.Client, pk packets.Packet, r int64) {
	h.update(func(tx *bolt.Tx) error {
		if r == -1 {
			return tx.Bucket(bucketRetained).Delete([]byte(pk.TopicName))
		}
		return put(tx, bucketRetained, []byte(pk.TopicName), storedMessage(cl, pk, storage.RetainedKey))
	})
}

func (h *storeHook) OnRetainedExpired(topic string) {
	h.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketRetained).Delete([]byte(topic)) })
}

func (h *storeHook) OnQosPublish(cl *mqtt.Client, pk packets.Packet, _ int64, _ int) {
	if cl.Net.Inline || pk.FixedHeader.Type == packets.Puback {
		return
	}
	h.update(func(tx *bolt.Tx) error {
		return put(tx, bucketInflight, inflightKey(cl.ID, pk.PacketID), storedMessage(cl, pk, storage.InflightKey))
	})
}

// OnQosComplete deletes a finished inflight message. mochi also calls it for
// the inbound QoS 1 acks that OnQosPublish skipped; the read-only check
// spares those a committed (fsync'd) transaction.
func (h *storeHook) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	if cl.Net.Inline {
		return
	}
	key := inflightKey(cl.ID, pk.PacketID)
	var present bool
	_ = h.db.View(func(tx *bolt.Tx) error {
		present = tx.Bucket(bucketInflight).Get(key) != nil
		return nil
	})
	if present {
		h.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketInflight).Delete(key) })
	}
}

func (h *storeHook) OnQosDropped(cl *mqtt.Client, pk packets.Packet) { h.OnQosComplete(cl, pk) }

// decodeStored decodes one stored record; a bad record is skipped and
// counted, never fatal, so one torn value cannot keep the broker down.
func decodeStored[T any](h *storeHook, bucket, key, val []byte) (T, bool) {
	var v T
	if err := json.Unmarshal(val, &v); err != nil {
		h.badRecords.Inc()
		h.log.Warn("skipping undecodable broker store record", "bucket", string(bucket), "key", fmt.Sprintf("%q", key), "err", err)
		return v, false
	}
	return v, true
}

func readAll[T any](h *storeHook, bucket []byte, keep func(k []byte, v *T) bool) ([]T, error) {
	var out []T
	err := h.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, val []byte) error {
			v, ok := decodeStored[T](h, bucket, k, val)
			if ok && keep(k, &v) {
				out = append(out, v)
			}
			return nil
		})
	})
	return out, err
}

func (h *storeHook) StoredClients() ([]storage.Client, error) {
	return readAll(h, bucketClients, func(k []byte, c *storage.Client) bool {
		c.ID = string(k) // the key is authoritative
		return c.ID != ""
	})
}

func (h *storeHook) StoredSubscriptions() ([]storage.Subscription, error) {
	return readAll(h, bucketSubs, func(k []byte, s *storage.Subscription) bool {
		id, _, ok := bytes.Cut(k, []byte{0})
		s.Client = string(id)
		return ok && s.Filter != "" && mqtt.IsValidFilter(s.Filter, false)
	})
}

// StoredInflightMessages restores inflight messages with the packet id of
// their key, the id the client saw before the restart; a resend with that id
// is what MQTT requires ([MQTT-4.4.0-1]).
func (h *storeHook) StoredInflightMessages() ([]storage.Message, error) {
	return readAll(h, bucketInflight, func(k []byte, m *storage.Message) bool {
		id, pid, ok := bytes.Cut(k, []byte{0})
		if !ok || len(pid) != 2 || binary.BigEndian.Uint16(pid) == 0 {
			h.badRecords.Inc()
			return false
		}
		m.Client = string(id)
		m.PacketID = binary.BigEndian.Uint16(pid)
		return true
	})
}

func (h *storeHook) StoredRetainedMessages() ([]storage.Message, error) {
	return readAll(h, bucketRetained, func(k []byte, m *storage.Message) bool {
		m.TopicName = string(k)
		return m.TopicName != ""
	})
}
