package agent

import (
	"context"
	"net"
	"slices"
	"time"
)

// A car moves between networks — home Wi-Fi to LTE, one modem address to
// the next after a cell change — and each move leaves the uplink's socket
// on a path that no longer exists (its NAT binding, or the address itself,
// is gone). QUIC can move a connection to a new path without a new
// handshake (RFC 9000 §9, quic.Client.Migrate), so requests in flight go on;
// the agent just has to notice the move. It polls the device's interface
// addresses, because that works the same on every board without netlink
// or root.

// netAddrs lists the device's network addresses; a different list means
// the device moved to another network.
type netAddrs func() ([]string, error)

// interfaceAddrs is the device's addresses, sorted, loopback left out.
func interfaceAddrs() ([]string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.IsLoopback() {
			continue
		}
		out = append(out, a.String())
	}
	slices.Sort(out)
	return out, nil
}

// watchNetwork migrates the uplink each time the device's addresses change,
// every `every`, until ctx ends.
func (a *Agent) watchNetwork(ctx context.Context, every time.Duration, list netAddrs) {
	last, _ := list()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now, err := list()
		if err != nil || slices.Equal(now, last) {
			continue
		}
		last = now
		if !a.cloud.Link().Connected {
			continue // the redial will use the new network anyway
		}
		mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = a.cloud.Migrate(mctx)
		cancel()
		if err != nil {
			a.mMigrations.With("failed").Inc()
			a.log.Warn("network changed; the cloud connection did not move to it", "addrs", now, "err", err)
			continue
		}
		a.mMigrations.With("ok").Inc()
		a.log.Info("network changed; the cloud connection moved to it", "addrs", now, "local", a.cloud.Link().LocalAddr)
	}
}
