package broker

import (
	"fmt"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
	bolt "go.etcd.io/bbolt"
)

// bucketPublishing journals each QoS 1 publish from a client between the
// moment mochi accepts it and the moment it has been handed to every
// subscriber: publishing  client id 0x00 packet id(2 BE) → storage.Message.
//
// mochi sends the PUBACK before it routes the message (server.go
// processPublish: WritePacket(ack), then publishToSubscribers), and only
// routing puts it in an offline subscriber's stored inflight. A broker
// killed between the two had acknowledged a message that was nowhere on
// disk (TestKillWithQueuedQoS1LosesNothing lost 2 of 36). With the journal
// written before the PUBACK, a restart routes whatever was cut off again:
// QoS 1 may then deliver twice, never zero times.
var bucketPublishing = []byte("publishing")

// OnPublish journals a client's QoS 1 publish before mochi acknowledges it.
// A failed write refuses the message (an MQTT v5 publisher gets an error
// reason code and resends) rather than acknowledge what is not on disk.
func (h *storeHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline || pk.FixedHeader.Qos == 0 {
		return pk, nil
	}
	err := h.db.Batch(func(tx *bolt.Tx) error {
		return put(tx, bucketPublishing, inflightKey(cl.ID, pk.PacketID), storedMessage(cl, pk, storage.InflightKey))
	})
	if err != nil {
		h.writeErrors.Inc()
		h.log.Error("broker store: journal publish", "client", cl.ID, "err", err)
		return pk, packets.ErrImplementationSpecificError
	}
	return pk, nil
}

// OnPublished drops the journal entry once every subscriber has the message
// (a stored inflight for each persistent one). mochi reads a client's next
// packet only after this returns, so the packet id is not reused before.
func (h *storeHook) OnPublished(cl *mqtt.Client, pk packets.Packet) {
	if cl.Net.Inline || pk.FixedHeader.Qos == 0 {
		return
	}
	h.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPublishing).Delete(inflightKey(cl.ID, pk.PacketID))
	})
}

// replayJournal routes again every publish a killed broker had accepted but
// not finished routing, as if its publisher sent it now, and clears the
// journal. The retain flag is kept only where no retained message for the
// topic is stored: a newer one from another client must not be replaced.
func (h *storeHook) replayJournal(srv *mqtt.Server) (int, error) {
	msgs, err := readAll(h, bucketPublishing, func([]byte, *storage.Message) bool { return true })
	if err != nil {
		return 0, fmt.Errorf("broker store: read journal: %w", err)
	}
	for _, m := range msgs {
		pk := m.ToPacket()
		pk.FixedHeader.Type = packets.Publish
		if pk.FixedHeader.Retain {
			_ = h.db.View(func(tx *bolt.Tx) error {
				pk.FixedHeader.Retain = tx.Bucket(bucketRetained).Get([]byte(pk.TopicName)) == nil
				return nil
			})
		}
		// An inline client under the publisher's id: the same Origin (so
		// NoLocal holds), no ACL check (it passed when first received).
		if err := srv.InjectPacket(srv.NewClient(nil, mqtt.LocalListener, m.Origin, true), pk); err != nil {
			return 0, fmt.Errorf("broker store: replay %q from %s: %w", pk.TopicName, m.Origin, err)
		}
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	err = h.db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketPublishing); err != nil {
			return err
		}
		_, err := tx.CreateBucket(bucketPublishing)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("broker store: clear journal: %w", err)
	}
	return len(msgs), nil
}
