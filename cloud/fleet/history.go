package fleet

import (
	"sync"
	"time"

	"github.com/phaseless/phaseless/internal/metrics"
	tfleet "github.com/phaseless/phaseless/transport/fleetwire"
)

// historyLen is how many status changes the Manager keeps per device, for the
// dashboard's device view. They are kept in memory only: the store holds the
// last status, which is what reconciliation needs; the history is for an
// operator looking at a device that flaps now.
const historyLen = 32

// StatusEvent is one status message as the cloud received it.
type StatusEvent struct {
	Received time.Time     `json:"received"`
	Status   tfleet.Status `json:"status"`
}

// statusHistory keeps the last historyLen status messages of each device.
type statusHistory struct {
	mu    sync.Mutex // guards byDev
	byDev map[string][]StatusEvent
}

func (h *statusHistory) add(id string, at time.Time, s tfleet.Status) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byDev == nil {
		h.byDev = map[string][]StatusEvent{}
	}
	ev := append(h.byDev[id], StatusEvent{Received: at, Status: s})
	if len(ev) > historyLen {
		ev = append([]StatusEvent(nil), ev[len(ev)-historyLen:]...)
	}
	h.byDev[id] = ev
}

// get returns a copy, newest first.
func (h *statusHistory) get(id string) []StatusEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	ev := h.byDev[id]
	out := make([]StatusEvent, len(ev))
	for i, e := range ev {
		out[len(ev)-1-i] = e
	}
	return out
}

// StatusHistory returns the status messages this process received from the
// device (at most 32, newest first; empty after a restart until the device
// publishes again).
func (m *Manager) StatusHistory(id string) []StatusEvent { return m.history.get(id) }

// registerDeviceGauges exports the registry by state and by version, read at
// scrape time from the store (one read transaction).
func registerDeviceGauges(reg *metrics.Registry, cur func() *Manager) {
	count := func(key func(*Device) string) func(metrics.Emit) {
		return func(emit metrics.Emit) {
			m := cur()
			if m == nil {
				return
			}
			devs, err := m.st.devices()
			if err != nil {
				return
			}
			n := map[string]int{}
			for _, d := range devs {
				n[key(d)]++
			}
			for k, v := range n {
				emit(float64(v), k)
			}
		}
	}
	reg.GaugeVecFunc("phaseless_fleet_devices_by_state", "devices by their last reported state (online, offline, unknown)", []string{"state"},
		count(func(d *Device) string { return d.State() }))
	reg.GaugeVecFunc("phaseless_fleet_devices_by_version", "devices by the agent version of their last status (the installed bundle's once a rollout installed one)", []string{"version"},
		count(func(d *Device) string {
			if v := d.Status.AgentVersion(); v != "" {
				return v
			}
			return "unknown"
		}))
}
