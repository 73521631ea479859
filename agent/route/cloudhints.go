package route

import "github.com/phaseless/phaseless/transport/llm"

// cloudOnlyHint names the first x-* header of req that only the cloud's
// coordinator acts on (prefetch, semantic grouping), or "" when none is set.
func cloudOnlyHint(req *llm.Request) string {
	h := &req.Hints
	switch {
	case h.Prefetch != "":
		return "x-prefetch-hint"
	case h.BatchThreshold != 0:
		return "x-batch-threshold"
	case h.SemanticMode != "":
		return "x-semantic-mode"
	}
	return ""
}

// checkCloudHints refuses a cloud-only header on a request that cannot
// reach the cloud (forced local, or no cloud configured): it would be
// accepted and then ignored. A request the router may still send to the
// cloud keeps it.
func (d *Dispatcher) checkCloudHints(req *llm.Request) error {
	name := cloudOnlyHint(req)
	if name == "" {
		return nil
	}
	switch {
	case req.Hints.Route == PathLocal:
		return llm.Errorf(llm.CodeInvalid, "header %s applies in the cloud; x-phaseless-route: local keeps this request on the device", name)
	case d.cfg.Cloud == nil:
		return llm.Errorf(llm.CodeInvalid, "header %s applies in the cloud, and this device has none configured", name)
	}
	return nil
}
