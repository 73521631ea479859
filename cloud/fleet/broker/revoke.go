package broker

import "github.com/mochi-mqtt/server/v2/packets"

// DisconnectDevice closes device id's connection, if it has one, with an
// MQTT v5 DISCONNECT "not authorized": called when its certificate is
// revoked. Its reconnects are refused by Config.Revoked. It reports
// whether a connection was closed.
func (b *Broker) DisconnectDevice(id string) bool {
	cl, ok := b.srv.Clients.Get(id)
	if !ok || cl.Net.Inline || cl.Closed() {
		return false
	}
	_ = b.srv.DisconnectClient(cl, packets.ErrNotAuthorized)
	return true
}
