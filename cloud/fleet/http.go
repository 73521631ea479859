package fleet

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// APIPrefix is where Handler's routes live; mount the handler there:
//
//	mux.Handle(fleet.APIPrefix, auth(mgr.Handler()))
const APIPrefix = fleetapi.Prefix

// Handler serves the fleet admin API. It does no authentication: the cloud
// mounts it behind its API-key check (or --dev).
//
//	GET  /v1/fleet/devices                      → [Device]
//	GET  /v1/fleet/devices/{id}                 → Device with its recent commands
//	PUT  /v1/fleet/devices/{id}/config          ConfigUpdate (the device's overrides) → DesiredConfig (merged)
//	GET  /v1/fleet/config                       → [ConfigLayer] in precedence order
//	PUT  /v1/fleet/config/{scope}               ConfigUpdate → ConfigLayer ("fleet" or "label=value")
//	POST /v1/fleet/devices/{id}/commands        {"name","args"} → CommandState (202)
//	GET  /v1/fleet/devices/{id}/commands/{cmd}  → CommandState
//	GET  /v1/fleet/telemetry/count[?device=ID]  → Counts, or that device's DeviceTelemetry
//	GET  /v1/fleet/telemetry/export[?device=ID][&since=RFC3339]
//	                                            → JSON lines of ExportedRecord (application/x-ndjson)
//
// and the rollout routes (rollout_http.go).
//
// Errors are {"error":{"message":..., "type":...}} with 400, 404, 500, or
// 503 (stored but the broker could not take the message yet; it is re-sent).
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/fleet/devices", m.listDevices)
	mux.HandleFunc("GET /v1/fleet/devices/{id}", m.getDevice)
	mux.HandleFunc("PUT /v1/fleet/devices/{id}/config", m.putConfig)
	mux.HandleFunc("POST /v1/fleet/devices/{id}/commands", m.postCommand)
	mux.HandleFunc("GET /v1/fleet/devices/{id}/commands/{cmd}", m.getCommand)
	mux.HandleFunc("GET /v1/fleet/telemetry/count", m.count)
	mux.HandleFunc("GET /v1/fleet/telemetry/export", m.export)
	m.rolloutRoutes(mux)
	m.configRoutes(mux)
	return mux
}

// maxBody bounds admin request bodies (a config document is small).
const maxBody = 1 << 20

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

type apiError = fleetapi.ErrorBody

func writeError(w http.ResponseWriter, status int, err error) {
	var e apiError
	e.Error.Message = err.Error()
	switch status {
	case http.StatusBadRequest:
		e.Error.Type = "invalid_request_error"
	case http.StatusNotFound:
		e.Error.Type = "not_found_error"
	case http.StatusServiceUnavailable:
		e.Error.Type = "broker_unavailable"
		if errors.Is(err, ErrNotWriter) || errors.Is(err, ErrStandby) {
			e.Error.Type = "not_fleet_writer"
		}
	default:
		e.Error.Type = "api_error"
	}
	writeJSON(w, status, e)
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, ErrUnknownDevice), errors.Is(err, ErrUnknownRollout), errors.Is(err, ErrUnknownArtifact):
		return http.StatusNotFound
	case errors.Is(err, ErrNotWriter):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func (m *Manager) listDevices(w http.ResponseWriter, _ *http.Request) {
	devs, err := m.Devices()
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	if devs == nil {
		devs = []*Device{}
	}
	writeJSON(w, http.StatusOK, devs)
}

func (m *Manager) getDevice(w http.ResponseWriter, r *http.Request) {
	d, err := m.Device(r.PathValue("id"))
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, errors.New("body: "+err.Error()))
		return false
	}
	// A second document after the first would be silently ignored.
	if _, err := dec.Token(); err != io.EOF {
		writeError(w, http.StatusBadRequest, errors.New("body: data after the JSON object"))
		return false
	}
	return true
}

func (m *Manager) putConfig(w http.ResponseWriter, r *http.Request) {
	var u ConfigUpdate
	if !decodeBody(w, r, &u) {
		return
	}
	dc, err := m.SetConfig(r.Context(), r.PathValue("id"), u)
	switch {
	case err != nil && dc != nil:
		writeError(w, http.StatusServiceUnavailable, err)
	case err != nil:
		writeError(w, statusOf(err), err)
	default:
		writeJSON(w, http.StatusOK, dc)
	}
}

func (m *Manager) postCommand(w http.ResponseWriter, r *http.Request) {
	var req CommandRequest
	if !decodeBody(w, r, &req) {
		return
	}
	cs, err := m.SendCommand(r.Context(), r.PathValue("id"), req.Name, req.Args)
	switch {
	case err != nil && cs != nil:
		writeError(w, http.StatusServiceUnavailable, err)
	case err != nil:
		writeError(w, statusOf(err), err)
	default:
		writeJSON(w, http.StatusAccepted, cs)
	}
}

func (m *Manager) getCommand(w http.ResponseWriter, r *http.Request) {
	cs, err := m.Command(r.PathValue("id"), r.PathValue("cmd"))
	if err == nil && cs == nil {
		err = errors.New("unknown command")
		writeError(w, http.StatusNotFound, err)
		return
	}
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, cs)
}

func (m *Manager) count(w http.ResponseWriter, r *http.Request) {
	if id := r.URL.Query().Get("device"); id != "" {
		d, err := m.Device(id)
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		writeJSON(w, http.StatusOK, d.Telemetry)
		return
	}
	c, err := m.Counts()
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (m *Manager) export(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var since time.Time
	if s := q.Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			writeError(w, http.StatusBadRequest, errors.New("since: want RFC 3339 time"))
			return
		}
		since = t
	}
	dev := q.Get("device")
	if dev != "" && fleetwire.ValidateDeviceID(dev) != nil {
		writeError(w, http.StatusBadRequest, errors.New("device: not a device id"))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	// Errors after the first line can only end the stream early; a reader
	// sees a truncated last line or fewer lines than Counts reports.
	if _, err := m.Export(r.Context(), w, since, dev); err != nil && r.Context().Err() == nil {
		m.log.Error("telemetry export ended early", "err", err)
	}
}
