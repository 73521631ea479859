package fleet

import (
	"net/http"
)

// Rollout and artifact routes of the admin API (mounted by Handler):
//
//	POST /v1/fleet/artifacts                    bundle bytes → ArtifactInfo (201)
//	GET  /v1/fleet/artifacts                    → [ArtifactInfo]
//	POST /v1/fleet/rollouts                     RolloutSpec → Rollout (201)
//	GET  /v1/fleet/rollouts                     → [Rollout]
//	GET  /v1/fleet/rollouts/{id}                → Rollout
//	POST /v1/fleet/rollouts/{id}/{action}       pause | resume | abort, {"reason"} → Rollout
//	PUT  /v1/fleet/devices/{id}/labels          {"labels": {k: v or null}} → Device
//	GET  /v1/fleet/running/{kind}[?select=k=v]  → RunningArtifact: the version most selected devices run
//
// Devices download artifacts from ArtifactHandler, which is not behind keys.
func (m *Manager) rolloutRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/fleet/artifacts", m.postArtifact)
	mux.HandleFunc("POST /v1/fleet/rollouts", m.postRollout)
	mux.HandleFunc("GET /v1/fleet/rollouts", m.listRollouts)
	mux.HandleFunc("GET /v1/fleet/rollouts/{id}", m.getRollout)
	mux.HandleFunc("POST /v1/fleet/rollouts/{id}/{action}", m.actRollout)
	mux.HandleFunc("PUT /v1/fleet/devices/{id}/labels", m.putLabels)
	mux.HandleFunc("GET /v1/fleet/running/{kind}", m.getRunning)
}

func (m *Manager) postArtifact(w http.ResponseWriter, r *http.Request) {
	info, err := m.PutArtifact(http.MaxBytesReader(w, r.Body, maxArtifact))
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusCreated, info)
}

func (m *Manager) postRollout(w http.ResponseWriter, r *http.Request) {
	var spec RolloutSpec
	if !decodeBody(w, r, &spec) {
		return
	}
	ro, err := m.CreateRollout(r.Context(), spec)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusCreated, ro)
}

func (m *Manager) listRollouts(w http.ResponseWriter, _ *http.Request) {
	rs, err := m.Rollouts()
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	if rs == nil {
		rs = []*Rollout{}
	}
	writeJSON(w, http.StatusOK, rs)
}

func (m *Manager) getRollout(w http.ResponseWriter, r *http.Request) {
	ro, err := m.Rollout(r.PathValue("id"))
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, ro)
}

var rolloutActions = map[string]string{"pause": RolloutPaused, "resume": RolloutRunning, "abort": RolloutAborted}

func (m *Manager) actRollout(w http.ResponseWriter, r *http.Request) {
	state, ok := rolloutActions[r.PathValue("action")]
	if !ok {
		writeError(w, http.StatusNotFound, errUnknownAction)
		return
	}
	var a RolloutAction
	if r.ContentLength != 0 && !decodeBody(w, r, &a) {
		return
	}
	ro, err := m.SetRolloutState(r.Context(), r.PathValue("id"), state, a.Reason)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, ro)
}

func (m *Manager) putLabels(w http.ResponseWriter, r *http.Request) {
	var u LabelUpdate
	if !decodeBody(w, r, &u) {
		return
	}
	d, err := m.SetLabels(r.PathValue("id"), u.Labels)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}
