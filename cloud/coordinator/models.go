package coordinator

import "slices"

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
