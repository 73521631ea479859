package cloud

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet"

	"github.com/phaseless/phaseless/transport/pki"
)

// watchRevocations rereads the PKI directory's deny list (phaselessctl pki
// revoke) until ctx ends and cuts off each newly revoked device at once:
// its QUIC connections and its MQTT session are closed; the handshakes and
// the broker's auth hook refuse it from then on (they read the same list).
//
// With an external Mosquitto (--mqtt-url with --mqtt-dynsec) the broker is
// told through its dynamic security plugin instead, which kicks and
// refuses the device there; every device already on the list is disabled
// too whenever this cloud becomes the fleet's writer (at start, or when a
// standby takes over), in case it was revoked while no writer told the
// broker: this cloud was down, or a standby then.
func (c *Cloud) watchRevocations(ctx context.Context) {
	revoked := c.metrics.Counter("phaseless_devices_revoked_total", "devices newly found on the PKI deny list since start")
	errs := c.metrics.Counter("phaseless_deny_list_errors_total", "failed rereads of the PKI deny list (the previous list stays in force)")
	brokerErrs := c.metrics.Counter("phaseless_broker_revoke_errors_total", "revoked devices the external broker's dynamic security plugin could not be told about (retried every second while this cloud is the fleet's writer)")
	c.mu.Lock()
	dynsec := (c.fleet != nil || c.standby != nil) && c.cfg.MQTTDynsec
	c.mu.Unlock()
	var failedMu sync.Mutex
	failed := map[string]bool{} // ids the broker could not be told about yet
	tellBroker := func(id string) bool {
		m := c.fleetWriter()
		if !dynsec || m == nil { // a standby leaves the broker to the writer
			return false
		}
		err := m.RevokeOnBroker(ctx, id)
		failedMu.Lock()
		if err != nil {
			failed[id] = true
		} else {
			delete(failed, id)
		}
		failedMu.Unlock()
		if err != nil {
			brokerErrs.Inc()
			c.log.Error("revoke on the external broker", "device", id, "err", err)
			return false
		}
		return true
	}
	retry := func() []string {
		failedMu.Lock()
		defer failedMu.Unlock()
		return slices.Collect(maps.Keys(failed))
	}
	var sweeping sync.WaitGroup
	defer sweeping.Wait()
	if dynsec {
		sweeping.Go(func() { c.sweepRevoked(ctx, tellBroker, retry) })
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

// sweepRevoked tells the broker about every device on the deny list each
// time a new Manager steers the fleet from this process, and again about
// those it could not be told about (retry), at the deny list's reread
// interval until ctx ends.
func (c *Cloud) sweepRevoked(ctx context.Context, tellBroker func(id string) bool, retry func() []string) {
	t := time.NewTicker(pki.DefaultWatchInterval)
	defer t.Stop()
	var swept *fleet.Manager
	for {
		ids := retry()
		if m := c.fleetWriter(); m != nil && m != swept {
			swept, ids = m, c.deny.IDs()
		}
		for _, id := range ids {
			tellBroker(id)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
