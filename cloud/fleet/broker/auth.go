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

	authFail  *metrics.LabeledCounter
	aclDenied *metrics.LabeledCounter
}

func (h *authHook) ID() string { return "phaseless-fleet-auth" }

func (h *authHook) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck
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

// isAdmin: the username of a connected or restored client was verified by
// OnConnectAuthenticate (certificate clients carry no admin username).
func (h *authHook) isAdmin(cl *mqtt.Client) bool {
	return len(cl.Properties.Username) > 0 && h.admins[string(cl.Properties.Username)]
}
