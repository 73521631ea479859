package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// Config layers: fleet-wide defaults and label groups (fleetapi.MergeConfig
// has the precedence). A device's published desired config is the merge of
// the layers that apply to it and its own overrides, recomputed in the same
// bbolt transaction as whatever changed an input — a layer, the device's
// labels, its board (from its status) or its overrides — so the version a
// device sees goes up exactly when its merged values change.

// ConfigLayer is fleetapi's.
type ConfigLayer = fleetapi.ConfigLayer

// bucketConfigs holds scope → ConfigLayer (JSON).
var bucketConfigs = []byte("configs")

func layersTx(tx *bolt.Tx) (map[string]*ConfigLayer, error) {
	out := map[string]*ConfigLayer{}
	b := tx.Bucket(bucketConfigs)
	if b == nil {
		return out, nil
	}
	err := b.ForEach(func(k, v []byte) error {
		l := new(ConfigLayer)
		if err := json.Unmarshal(v, l); err != nil {
			return fmt.Errorf("config layer %s: %w: %v", k, errCorrupt, err)
		}
		out[string(k)] = l
		return nil
	})
	return out, err
}

// remerge recomputes d's desired config from layers and reports whether
// it changed (and so got a new version).
func remerge(d *Device, layers map[string]*ConfigLayer) bool {
	adoptLegacyOverrides(d)
	values, sources := fleetapi.MergeConfig(d, layers)
	d.ConfigSources = sources
	if d.Desired == nil {
		if len(values) == 0 {
			return false
		}
		d.Desired = &fleetwire.DesiredConfig{}
	}
	if maps.Equal(values, d.Desired.Values) && d.Desired.Version > 0 {
		return false
	}
	d.Desired = &fleetwire.DesiredConfig{Version: d.Desired.Version + 1, Values: values}
	return true
}

// remergeTx is remerge with the layers stored in tx; it returns a copy of
// d for the caller to use after the transaction.
func remergeTx(tx *bolt.Tx, d *Device) (dev *Device, changed bool, err error) {
	layers, err := layersTx(tx)
	if err != nil {
		return nil, false, err
	}
	changed = remerge(d, layers)
	cp := *d
	return &cp, changed, nil
}

// adoptLegacyOverrides makes the values of a device whose config was set
// before layers existed (a fleet.db from an older cloud: desired values,
// no sources) its overrides, which is what they were.
func adoptLegacyOverrides(d *Device) {
	if d.Overrides == nil && d.ConfigSources == nil && d.Desired != nil && len(d.Desired.Values) > 0 {
		d.Overrides = maps.Clone(d.Desired.Values)
	}
}

// updateDeviceConfig is updateDevice that re-merges the device's config
// after fn, in the same transaction; changed says whether the desired
// config got a new version. The device's PendingCommands are counted in
// that transaction too.
func (s *store) updateDeviceConfig(id string, now time.Time, create bool, fn func(*Device) error) (dev *Device, changed bool, err error) {
	err = s.db.Batch(func(tx *bolt.Tx) error {
		dev, changed = nil, false
		dt := newDeviceTx(tx, now)
		d, err := dt.get(id, create)
		if err != nil || d == nil {
			return err
		}
		if err := fn(d); err != nil {
			return err
		}
		if dev, changed, err = remergeTx(tx, d); err != nil {
			return err
		}
		cmds, err := commandsTx(tx, id)
		if err != nil {
			return err
		}
		dev.PendingCommands = pendingOf(cmds)
		return dt.flush()
	})
	return dev, changed, err
}

// applyLayer applies u to scope's layer in layers and returns it; an
// emptied layer leaves layers (it would only clutter the list) and the
// caller deletes it from the store.
func applyLayer(layers map[string]*ConfigLayer, scope string, u ConfigUpdate, now time.Time) *ConfigLayer {
	l := layers[scope]
	if l == nil {
		l = &ConfigLayer{Scope: scope}
	}
	l.Values = fleetapi.ApplyUpdate(l.Values, u)
	l.Version++
	l.Updated = now
	if len(l.Values) == 0 {
		delete(layers, scope)
	} else {
		layers[scope] = l
	}
	return l
}

// setLayer applies u to one layer and re-merges every device, in one
// transaction. It returns the layer and the devices whose desired config
// changed.
func (s *store) setLayer(scope string, u ConfigUpdate, now time.Time) (*ConfigLayer, []*Device, error) {
	var layer *ConfigLayer
	var changed []*Device
	err := s.db.Update(func(tx *bolt.Tx) error {
		layer, changed = nil, nil
		layers, err := layersTx(tx)
		if err != nil {
			return err
		}
		l := applyLayer(layers, scope, u, now)
		b, err := tx.CreateBucketIfNotExists(bucketConfigs)
		if err != nil {
			return err
		}
		if len(l.Values) == 0 {
			err = b.Delete([]byte(scope))
		} else {
			var v []byte
			if v, err = json.Marshal(l); err == nil {
				err = b.Put([]byte(scope), v)
			}
		}
		if err != nil {
			return err
		}
		dt := newDeviceTx(tx, now)
		c := tx.Bucket(bucketDevices).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			d, err := dt.get(string(k), false)
			if err != nil {
				return err
			}
			if remerge(d, layers) {
				cp := *d
				changed = append(changed, &cp)
			} else {
				delete(dt.devs, d.ID) // unchanged: nothing to write
			}
		}
		layer = l
		return dt.flush()
	})
	return layer, changed, err
}

// SetConfigLayer changes the fleet defaults (scope "fleet") or a label
// group ("board=rk3588", "region=eu", "cohort=beta", any label) and
// publishes the new desired config of every device whose merged values
// changed. Groups may name labels no device has yet: they apply once one
// does.
func (m *Manager) SetConfigLayer(ctx context.Context, scope string, u ConfigUpdate) (*ConfigLayer, error) {
	if _, _, err := fleetapi.ParseScope(scope); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if err := checkKeys(u); err != nil {
		return nil, err
	}
	if err := m.fence(ctx); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotWriter, err)
	}
	l, changed, err := m.st.setLayer(scope, u, m.now())
	if err != nil {
		return nil, err
	}
	for _, d := range changed {
		m.sendDesired(d) // fenced above; queued: reconcile re-sends any the broker could not take
	}
	m.log.Info("config layer changed", "scope", scope, "version", l.Version, "devices_changed", len(changed))
	return l, nil
}

// ConfigLayers lists the layers in precedence order, each with how many
// devices it applies to now.
func (m *Manager) ConfigLayers() ([]ConfigLayer, error) {
	layers, err := m.st.layers()
	if err != nil {
		return nil, err
	}
	devs, err := m.st.devices()
	if err != nil {
		return nil, err
	}
	scopes := make([]string, 0, len(layers))
	for s := range layers {
		scopes = append(scopes, s)
	}
	fleetapi.SortScopes(scopes)
	out := make([]ConfigLayer, 0, len(scopes))
	for _, s := range scopes {
		l := *layers[s]
		for _, d := range devs {
			if s == fleetapi.ScopeFleet {
				l.Devices++
			} else if lab, v, _ := fleetapi.ParseScope(s); fleetapi.DeviceLabel(d, lab) == v {
				l.Devices++
			}
		}
		out = append(out, l)
	}
	return out, nil
}

func checkKeys(u ConfigUpdate) error {
	keys := make([]string, 0, len(u.Values))
	for k := range u.Values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "" {
			return fmt.Errorf("%w: empty config key", ErrBadRequest)
		}
		if v := u.Values[k]; (k == fleetapi.ConfigRouterAlpha || k == fleetapi.ConfigRouterDelta) && v != nil {
			if _, err := fleetapi.RouterShare(k, *v); err != nil {
				return fmt.Errorf("%w: %v", ErrBadRequest, err)
			}
		}
	}
	return nil
}

func (m *Manager) configRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/fleet/config", func(w http.ResponseWriter, _ *http.Request) {
		ls, err := m.ConfigLayers()
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		writeJSON(w, http.StatusOK, ls)
	})
	mux.HandleFunc("PUT /v1/fleet/config/{scope}", func(w http.ResponseWriter, r *http.Request) {
		var u ConfigUpdate
		if !decodeBody(w, r, &u) {
			return
		}
		l, err := m.SetConfigLayer(r.Context(), r.PathValue("scope"), u)
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		writeJSON(w, http.StatusOK, l)
	})
}
