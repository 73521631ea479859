package coordinator

import (
	"slices"

	"github.com/phaseless/phaseless/cloud/sched"
)

// Models lists the distinct models the workers serve, in worker order, for
// GET /v1/models: a request may name one of them instead of "auto".
func (c *Coordinator) Models() []string {
	var names []string
	for _, w := range c.cfg.Workers.Workers() {
		if m := w.Model(); m != "" && !slices.Contains(names, m) {
			names = append(names, m)
		}
	}
	return names
}

// pinModel takes the workers that do not serve model out of a decision's
// snapshot, so every policy (and the fallback) places a request that names
// a model only where that model runs. "auto" leaves the snapshot as it is.
func (c *Coordinator) pinModel(model string, snap *sched.Snapshot) {
	if model == "" || model == "auto" {
		return
	}
	for i, w := range c.cfg.Workers.Workers() {
		if i < len(snap.Workers) && w.Model() != model {
			snap.Workers[i].Healthy = false
		}
	}
}
