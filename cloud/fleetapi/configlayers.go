package fleetapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// A device's desired config is merged from layers, lowest precedence
// first (docs/fleet-cloud.md, "Config layers"):
//
//  1. the fleet-wide defaults (scope "fleet");
//  2. label groups (scope "LABEL=VALUE"): first board (from the device's
//     status), then region, then cohort, then any other label in name
//     order. A device has one value per label, so at most one group per
//     label applies and the order is total;
//  3. the device's calibrated route-threshold (Device.Router, when
//     certified: docs/predictor.md, "Per-device calibration");
//  4. the device's own overrides (fleet config set ID ...).
//
// A later layer's key replaces an earlier one's. The merged values are what
// the cloud publishes as the device's config/desired; its version goes up
// by one whenever they change, whichever layer changed them.

// ScopeFleet names the fleet-wide defaults layer.
const ScopeFleet = "fleet"

// labelPrecedence orders the well-known labels; others follow by name.
var labelPrecedence = map[string]int{"board": 0, "region": 1, "cohort": 2}

// ConfigLayer is one layer of config: the fleet's defaults or a label
// group's values.
type ConfigLayer struct {
	Scope   string            `json:"scope"` // "fleet" or "label=value"
	Values  map[string]string `json:"values"`
	Version uint64            `json:"version"` // the layer's own, +1 per change
	Updated time.Time         `json:"updated"`
	// Devices is filled by the API: how many devices in the registry the
	// layer applies to now.
	Devices int `json:"devices"`
}

// ParseScope checks a layer scope: "fleet" or "label=value" with a
// non-empty label other than "version" (a device's version is not a group:
// a rollout changes it).
func ParseScope(s string) (label, value string, err error) {
	if s == ScopeFleet {
		return "", "", nil
	}
	label, value, ok := strings.Cut(s, "=")
	switch {
	case !ok || label == "" || value == "":
		return "", "", fmt.Errorf("config scope %q: want %q or a label group like board=rk3588, region=eu, cohort=beta", s, ScopeFleet)
	case label == "version":
		return "", "", errors.New(`config scope: "version" is not a group label`)
	case strings.ContainsAny(label, "=/") || strings.Contains(value, "/"):
		return "", "", fmt.Errorf("config scope %q: label and value must not contain '/' or a second '='", s)
	}
	return label, value, nil
}

// SortScopes orders scopes by precedence, lowest first: fleet, then label
// groups by label (board, region, cohort, others by name), then by value.
func SortScopes(scopes []string) {
	rank := func(s string) (int, string, string) {
		if s == ScopeFleet {
			return -1, "", ""
		}
		l, v, _ := strings.Cut(s, "=")
		if p, ok := labelPrecedence[l]; ok {
			return p, l, v
		}
		return len(labelPrecedence), l, v
	}
	sort.Slice(scopes, func(i, j int) bool {
		ri, li, vi := rank(scopes[i])
		rj, lj, vj := rank(scopes[j])
		if ri != rj {
			return ri < rj
		}
		if li != lj {
			return li < lj
		}
		return vi < vj
	})
}

// DeviceLabel is the value of a group label for d: "board" from its
// status, anything else from its operator labels.
func DeviceLabel(d *Device, label string) string {
	if label == "board" {
		if d.Status != nil {
			return d.Status.Board
		}
		return ""
	}
	return d.Labels[label]
}

// SourceDevice is the source named for a key set by the device's own
// overrides.
const SourceDevice = "device"

// MergeConfig merges the layers that apply to d with its overrides, in the
// order above. sources names, per key, the layer whose value won (a scope,
// or SourceDevice).
func MergeConfig(d *Device, layers map[string]*ConfigLayer) (values, sources map[string]string) {
	values, sources = map[string]string{}, map[string]string{}
	scopes := make([]string, 0, len(layers))
	for s := range layers {
		scopes = append(scopes, s)
	}
	SortScopes(scopes)
	for _, s := range scopes {
		if s != ScopeFleet {
			l, v, _ := strings.Cut(s, "=")
			if DeviceLabel(d, l) != v {
				continue
			}
		}
		for k, v := range layers[s].Values {
			values[k], sources[k] = v, s
		}
	}
	if r := d.Router; r != nil && r.Certified {
		// The device's own calibrated threshold beats the layers' (the
		// fleet's is the fallback while too few outcomes certify one);
		// an operator's override on the device still wins.
		values[ConfigRouteThreshold], sources[ConfigRouteThreshold] = strconv.FormatFloat(r.Threshold, 'f', -1, 64), SourceCalibrated
		for k, v := range map[string]float64{ConfigRouterAlpha: r.Alpha, ConfigRouterDelta: r.Delta} {
			if _, ok := values[k]; !ok && v > 0 { // the device reports the bound it runs under
				values[k], sources[k] = strconv.FormatFloat(v, 'f', -1, 64), SourceCalibrated
			}
		}
	}
	for k, v := range d.Overrides {
		values[k], sources[k] = v, SourceDevice
	}
	return values, sources
}

// ConfigLayers lists the fleet's config layers in precedence order.
func (c *Client) ConfigLayers(ctx context.Context) ([]ConfigLayer, error) {
	var ls []ConfigLayer
	return ls, c.do(ctx, http.MethodGet, "config", nil, &ls)
}

// SetConfigLayer changes the fleet defaults (scope "fleet") or a label
// group ("region=eu"); every device whose merged config changes gets a new
// desired version.
func (c *Client) SetConfigLayer(ctx context.Context, scope string, u ConfigUpdate) (*ConfigLayer, error) {
	var l ConfigLayer
	return &l, c.do(ctx, http.MethodPut, "config/"+url.PathEscape(scope), u, &l)
}

// ApplyUpdate applies u to current (merge or replace; a nil value removes
// a key) and returns the new values.
func ApplyUpdate(current map[string]string, u ConfigUpdate) map[string]string {
	next := map[string]string{}
	if u.Merge {
		for k, v := range current {
			next[k] = v
		}
	}
	for k, v := range u.Values {
		if v == nil {
			delete(next, k)
		} else {
			next[k] = *v
		}
	}
	return next
}

// RouterShare parses the value of router-alpha or router-delta (key k): a
// share strictly between 0 and 1.
func RouterShare(k, v string) (float64, error) {
	a, err := strconv.ParseFloat(v, 64)
	if err != nil || !(a > 0 && a < 1) {
		return 0, fmt.Errorf("%s %q: want a share in (0,1)", k, v)
	}
	return a, nil
}
