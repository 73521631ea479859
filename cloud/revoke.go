package cloud

import (
	"context"

	"github.com/phaseless/phaseless/transport/pki"
)

// watchRevocations rereads the PKI directory's deny list (phaselessctl pki
// revoke) until ctx ends and cuts off each newly revoked device at once:
// its QUIC connections and its MQTT session are closed; the handshakes and
// the broker's auth hook refuse it from then on (they read the same list).
//
// With an external Mosquitto (--mqtt-url with --mqtt-dynsec) the broker is
// told through its dynamic security plugin instead, which kicks and
// refuses the device there; at start every device already on the list is
// disabled too, in case it was revoked while this cloud was down.
func (c *Cloud) watchRevocations(ctx context.Context) {
	revoked := c.metrics.Counter("phaseless_devices_revoked_total", "devices newly found on the PKI deny list since start")
	errs := c.metrics.Counter("phaseless_deny_list_errors_total", "failed rereads of the PKI deny list (the previous list stays in force)")
	brokerErrs := c.metrics.Counter("phaseless_broker_revoke_errors_total", "revoked devices the external broker's dynamic security plugin could not be told about (retried at the next start)")
	c.mu.Lock()
	dynsec := (c.fleet != nil || c.standby != nil) && c.cfg.MQTTDynsec
	c.mu.Unlock()
	tellBroker := func(id string) bool {
		m := c.fleetWriter()
		if !dynsec || m == nil { // a standby leaves the broker to the writer
			return false
		}
		if err := m.RevokeOnBroker(ctx, id); err != nil {
			brokerErrs.Inc()
			c.log.Error("revoke on the external broker", "device", id, "err", err)
			return false
		}
		return true
	}
	if dynsec {
		for _, id := range c.deny.IDs() {
			tellBroker(id)
		}
	}
	c.deny.Watch(ctx, pki.DefaultWatchInterval, func(ids []string) {
		c.mu.Lock()
		q, b := c.quic, c.broker
		c.mu.Unlock()
		for _, id := range ids {
			revoked.Inc()
			conns, mqtt := 0, false
			if q != nil {
				conns = q.DisconnectDevice(id)
			}
			if b != nil {
				mqtt = b.DisconnectDevice(id)
			}
			mqtt = tellBroker(id) || mqtt
			c.log.Warn("device revoked", "device", id, "quic_connections_closed", conns, "mqtt_disconnected", mqtt)
		}
	}, func(err error) {
		errs.Inc()
		c.log.Error("deny list", "err", err)
	})
}
