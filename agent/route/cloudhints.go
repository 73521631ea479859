package route

import "github.com/phaseless/phaseless/llm"

// cloudOnlyHint names the first x-* header of req that only the cloud's
// coordinator acts on (prefetch, semantic grouping), or "" when none is set.
// x-prefetch-hint: none asks for nothing the device would have to do, so it
// holds anywhere; x-cache-ttl pins in the built-in engine too, and is here
// only when the local engine keeps no lifetimes (localNoPins).
func cloudOnlyHint(req *llm.Request, localNoPins bool) string {
	h := &req.Hints
	switch {
	case h.CacheTTL > 0 && localNoPins:
		return "x-cache-ttl"
	case h.Prefetch != "" && h.Prefetch != "none":
		return "x-prefetch-hint"
	case h.BatchThreshold != 0:
		return "x-batch-threshold"
	case h.SemanticMode != "":
		return "x-semantic-mode"
	}
	return ""
}

// checkCloudHints refuses a cloud-only header on a request that will run
// on the device anyway (x-phaseless-route: local, route-mode local, or no
// cloud configured, x-phaseless-route: cloud included): nothing there
// would act on it, and a header is never accepted and then ignored. The
// router sends every other request that carries one to the cloud
// (Router.Decide), where it takes effect. A cloud attempt that fails
// before its first token still falls back to the device, as every request
// does: the answer says so (x-phaseless-fallback), and these headers only
// shape how the cloud serves a request, never what it answers.
func checkCloudHints(req *llm.Request, dec Decision, haveCloud, localNoPins bool) error {
	name := cloudOnlyHint(req, localNoPins)
	if name == "" || (dec.Path != PathLocal && haveCloud) {
		return nil
	}
	reason := dec.Reason
	if dec.Path != PathLocal {
		reason = "no cloud configured"
	}
	return llm.Errorf(llm.CodeInvalid, "header %s acts in the cloud, and this request runs on the device (%s)", name, reason)
}
