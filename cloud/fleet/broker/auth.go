package broker

import (
	"crypto/tls"
	"log/slog"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// authHook authenticates connections and enforces the fleet ACL.
//
// The ACL is computed from the client alone (its id and username), never from
// per-connection state, because mochi also checks it for offline clients with
// persistent sessions (queued deliveries) and for clients restored from the
// store after a restart, neither of which went through authentication in this
// process.
type authHook struct {
	mqtt.HookBase
	topics    fleetwire.Topics
	passwords *Passwords
	admins    map[string]bool
	devAuth   bool
	revoked   func(deviceID string) bool // nil: nobody is
	log       *slog.Logger

	authFail   *metrics.LabeledCounter
	aclDenied  *metrics.LabeledCounter
	pubRefused *metrics.LabeledCounter // retain or size rule broken on an allowed topic
}

func (h *authHook) ID() string { return "phaseless-fleet-auth" }

func (h *authHook) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck || b == mqtt.OnPublish
}

// OnConnectAuthenticate admits a client as one of:
//   - a device by TLS client certificate: CN = device id = client id; a
//     username, if sent, must equal the CN (so a device cannot claim an
//     admin name);
//   - a device by password: username = device id = client id;
//   - an admin (Config.Admins) by password, with any client id;
//   - with DevAuth, any client whose client id is a valid device id and
//     whose username is empty or equal to it.
//
// A device on the deny list is refused whichever way it authenticates:
// each way made its client id its device id.
func (h *authHook) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	if !h.authenticate(cl, pk) {
		return false
	}
	if pk.Connect.WillFlag && !h.isAdminName(string(pk.Connect.Username), cl) {
		// mochi publishes a will without an ACL check (sendLWT), so a will
		// is held to the device's publish rules here, at connect.
		if why := h.checkDeviceWrite(cl.ID, pk.Connect.WillTopic, pk.Connect.WillRetain, len(pk.Connect.WillPayload)); why != "" {
			return h.deny(cl, "will: "+why)
		}
	}
	if h.revoked != nil && !h.admins[string(pk.Connect.Username)] && h.revoked(cl.ID) {
		return h.deny(cl, "device revoked")
	}
	return true
}

func (h *authHook) authenticate(cl *mqtt.Client, pk packets.Packet) bool {
	user := string(pk.Connect.Username)
	if cn, ok := peerCN(cl); ok {
		switch {
		case h.admins[cn]:
			return h.deny(cl, "certificate CN is an admin name")
		case fleetwire.ValidateDeviceID(cn) != nil:
			return h.deny(cl, "certificate CN is not a device id")
		case cl.ID != cn:
			return h.deny(cl, "client id differs from certificate CN")
		case user != "" && user != cn:
			return h.deny(cl, "username differs from certificate CN")
		}
		return true
	}
	if h.admins[user] {
		if h.passwords.Verify(user, pk.Connect.Password) {
			return true
		}
		return h.deny(cl, "bad admin password")
	}
	if h.devAuth {
		if fleetwire.ValidateDeviceID(cl.ID) != nil || (user != "" && user != cl.ID) {
			return h.deny(cl, "client id is not a device id or differs from username")
		}
		return true
	}
	switch {
	case user == "":
		return h.deny(cl, "no credentials")
	case fleetwire.ValidateDeviceID(user) != nil:
		return h.deny(cl, "username is not a device id")
	case cl.ID != user:
		return h.deny(cl, "client id differs from username")
	case !h.passwords.Verify(user, pk.Connect.Password):
		return h.deny(cl, "bad username or password")
	}
	return true
}

func (h *authHook) deny(cl *mqtt.Client, why string) bool {
	h.authFail.With(why).Inc()
	h.log.Warn("MQTT connection refused", "client", cl.ID, "remote", cl.Net.Remote, "listener", cl.Net.Listener, "reason", why)
	return false
}

// peerCN returns the CN of a verified TLS client certificate.
func peerCN(cl *mqtt.Client) (string, bool) {
	tc, ok := cl.Net.Conn.(*tls.Conn)
	if !ok {
		return "", false
	}
	st := tc.ConnectionState()
	if len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return "", false
	}
	return st.VerifiedChains[0][0].Subject.CommonName, true
}

// OnACLCheck lets admins anywhere and devices only under their own subtree.
// Authentication made client id = device id for every device, so the id is
// the identity here.
func (h *authHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	if cl.Net.Inline || h.isAdmin(cl) {
		return true
	}
	if h.revoked != nil && h.revoked(cl.ID) {
		// Also stops deliveries queued in a revoked device's session.
		h.aclDenied.With("revoked").Inc()
		return false
	}
	if h.topics.DeviceMay(cl.ID, topic, write) {
		return true
	}
	dir := "read"
	if write {
		dir = "write"
	}
	h.aclDenied.With(dir).Inc()
	h.log.Debug("MQTT ACL denied", "client", cl.ID, "topic", topic, "write", write)
	return false
}

// OnPublish holds a device's publish to the retain and size rules of its
// topic (fleetwire.DeviceWrites); OnACLCheck has already refused topics
// outside the table. An MQTT v5 QoS 1 publish is answered with a PUBACK
// reason code; anything else is dropped (mochi would route it otherwise).
func (h *authHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline || h.isAdmin(cl) {
		return pk, nil
	}
	why := h.checkDeviceWrite(cl.ID, pk.TopicName, pk.FixedHeader.Retain, len(pk.Payload))
	if why == "" {
		return pk, nil
	}
	h.pubRefused.With(why).Inc()
	h.log.Debug("MQTT publish refused", "client", cl.ID, "topic", pk.TopicName, "retain", pk.FixedHeader.Retain, "bytes", len(pk.Payload), "reason", why)
	if cl.Properties.ProtocolVersion != 5 || pk.FixedHeader.Qos == 0 {
		return pk, packets.ErrRejectPacket
	}
	if why == denyRetain {
		return pk, packets.ErrNotAuthorized
	}
	return pk, packets.ErrQuotaExceeded
}

// Reasons checkDeviceWrite gives (the publish_refused metric's labels).
const (
	denyTopic  = "write"
	denyRetain = "retain"
	denySize   = "size"
)

// checkDeviceWrite returns why device id may not publish this message, or "".
func (h *authHook) checkDeviceWrite(id, topic string, retain bool, size int) string {
	w, ok := h.topics.DeviceWriteRule(id, topic)
	switch {
	case !ok:
		return denyTopic
	case retain && !w.Retain:
		return denyRetain
	case size > w.MaxBytes:
		return denySize
	}
	return ""
}

// isAdminName: a password-authenticated admin (certificates never carry one).
func (h *authHook) isAdminName(user string, cl *mqtt.Client) bool {
	_, cert := peerCN(cl)
	return !cert && h.admins[user]
}

// isAdmin: the username of a connected or restored client was verified by
// OnConnectAuthenticate (certificate clients carry no admin username).
func (h *authHook) isAdmin(cl *mqtt.Client) bool {
	return len(cl.Properties.Username) > 0 && h.admins[string(cl.Properties.Username)]
}
