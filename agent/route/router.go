package route

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/models/textfeat"
)

// Paths a request can take.
const (
	PathLocal = "local"
	PathCloud = "cloud"
)

// Predictor estimates the probability that a request needs the cloud from
// its textfeat feature vector; models/predictor's models and its Swappable
// satisfy it.
type Predictor interface {
	Predict(features []float32) (float64, error)
}

// Thresholder is a Predictor that carries the decision threshold it was
// trained for (models/predictor's Model and Swappable read it from the ONNX
// metadata). The Router uses it when Config.Threshold is not set; ok false
// means the model names none.
type Thresholder interface {
	Threshold() (th float64, ok bool)
}

// Link is the uplink's state as the router sees it.
type Link struct {
	Configured bool          // a cloud address is set at all
	Connected  bool          // a QUIC connection is up
	RTT        time.Duration // smoothed round-trip time; 0 = unknown
	Loss       float64       // recent packet loss ratio, 0..1
}

// Load is the local engine's state.
type Load struct {
	Waiting       int     // requests queued for the engine
	Running       int     // requests the engine is generating
	Capacity      int     // how many may wait before new ones are refused
	KVFaultsPerMs float64 // KV-cache faults per millisecond, recent (the articles' "KV jitter")
}

// Inputs is everything a Decision was made from; it is recorded with the
// decision so a bad route can be explained afterwards.
type Inputs struct {
	Features    []float32
	Probed      bool // the local model's probe filled the features' probe block (Config.Probe)
	ByteEntropy float64
	CloudProb   float64
	ProbSource  string  // "predictor", "entropy-rule", or "entropy-rule (predictor failed: …)"
	Threshold   float64 // the threshold CloudProb was compared with
	// ThresholdSource is "config" (Config.Threshold), "model" (the
	// predictor's own, Thresholder) or "default" (0.5).
	ThresholdSource string
	Override        string // x-phaseless-route when not auto, else Config.Mode when not auto
	Link            Link
	Load            Load
}

// Decision is where a request should run and why.
type Decision struct {
	Path   string // PathLocal or PathCloud
	Reason string // short, human-readable
	Inputs
}

// Config tunes a Router. The zero value means the defaults.
type Config struct {
	// Threshold: a cloud probability at or above it prefers the cloud.
	// 0 (unset) means the predictor's own threshold when it carries one
	// (Thresholder; the shipped model's was chosen on held-out data), else
	// 0.5. A set value always wins over the model's.
	Threshold float64
	// Hysteresis is the relative band of the link and load signals: the
	// link counts as degraded once RTT or loss exceed MaxRTT or MaxLoss and
	// recovers only when both are back below (1-Hysteresis) of them, and
	// the KV-fault signal works the same way, so a flapping uplink does not
	// bounce traffic between paths (default 0.1). It never applies to the
	// content score: each request's cloud probability is compared with the
	// threshold alone, so one request's route does not depend on the one
	// before it.
	Hysteresis float64
	// EntropyThreshold is the bits-per-byte bound of the rule used when no
	// predictor is loaded (default 4.2, from the source articles).
	EntropyThreshold float64
	// MaxRTT marks the link degraded when the RTT is above it (default 400 ms).
	MaxRTT time.Duration
	// MaxLoss marks the link degraded when loss is above it (default 0.05).
	MaxLoss float64
	// MaxKVFaultsPerMs marks the local engine overloaded above it (default 12,
	// the articles' KV-jitter signal).
	MaxKVFaultsPerMs float64
	// MaxQueueFraction marks the local engine overloaded when its queue is
	// fuller than this fraction of its capacity (default 0.75).
	MaxQueueFraction float64
	// Probe measures the request on the model that would answer it locally
	// (the agent wires the built-in engine's prefill, models/lm ProbeChat):
	// its result fills the feature vector's probe block
	// (textfeat.SetProbe), for a predictor trained on it. nil leaves the
	// block unmeasured (an external local server). It is skipped when the
	// score cannot matter: a route override, no reachable cloud, or a
	// predictor that does not read the block (predictor.ProbeReader; the
	// shipped one since textfeat version 3 does not: docs/predictor.md).
	Probe func(text string) textfeat.Probe
	// Mode is the route of requests that do not pin one themselves
	// (x-phaseless-route: auto or absent): ModeAuto ("" too) lets the
	// router decide, PathLocal keeps every such request on the device (no
	// offload when the engine refuses: the operator said local), PathCloud
	// sends every one to the cloud (with the usual local fallback when the
	// cloud fails before its first token). A request's own header wins.
	Mode string
	// CloudTools says the cloud calls tools: some of its workers are
	// tool-calling servers (the agent's --cloud-tools). The cloud's
	// built-in model does not call tools, so the zero value keeps tool
	// requests on the device.
	CloudTools bool
	// LocalTools reports whether the local engine serves a request's
	// tools (the agent asks its model: lm.Model.ServesTools); nil means it
	// serves any (an external server gets the tools passed through).
	LocalTools func(tools []llm.Tool) bool
	// LocalNoPins says the local engine keeps no prompt-cache lifetimes
	// (an external OpenAI-compatible server, --local-url): x-cache-ttl then
	// acts only in the cloud, as x-batch-threshold does (cloudhints.go).
	LocalNoPins bool
}

// ModeAuto is Config.Mode's default: the router decides.
const ModeAuto = "auto"

func (c *Config) fill() {
	if c.Threshold == 0 {
		c.Threshold = 0.5
	}
	if c.Hysteresis == 0 {
		c.Hysteresis = 0.1
	}
	if c.EntropyThreshold == 0 {
		c.EntropyThreshold = 4.2
	}
	if c.MaxRTT == 0 {
		c.MaxRTT = 400 * time.Millisecond
	}
	if c.MaxLoss == 0 {
		c.MaxLoss = 0.05
	}
	if c.MaxKVFaultsPerMs == 0 {
		c.MaxKVFaultsPerMs = 12
	}
	if c.MaxQueueFraction == 0 {
		c.MaxQueueFraction = 0.75
	}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	c.fill()
	switch {
	case c.Threshold <= 0 || c.Threshold >= 1:
		return fmt.Errorf("route: Threshold %g must be in (0,1)", c.Threshold)
	case c.Hysteresis < 0 || c.Hysteresis >= 1:
		return fmt.Errorf("route: Hysteresis %g must be in [0,1)", c.Hysteresis)
	case c.EntropyThreshold <= 0 || c.EntropyThreshold > 8:
		return fmt.Errorf("route: EntropyThreshold %g must be in (0,8] bits", c.EntropyThreshold)
	case c.MaxRTT < 0:
		return fmt.Errorf("route: MaxRTT %v must not be negative", c.MaxRTT)
	case c.MaxLoss <= 0 || c.MaxLoss > 1:
		return fmt.Errorf("route: MaxLoss %g must be in (0,1]", c.MaxLoss)
	case c.MaxKVFaultsPerMs <= 0:
		return fmt.Errorf("route: MaxKVFaultsPerMs %g must be positive", c.MaxKVFaultsPerMs)
	case c.MaxQueueFraction <= 0 || c.MaxQueueFraction > 1:
		return fmt.Errorf("route: MaxQueueFraction %g must be in (0,1]", c.MaxQueueFraction)
	case c.Mode != "" && c.Mode != ModeAuto && c.Mode != PathLocal && c.Mode != PathCloud:
		return fmt.Errorf("route: Mode %q must be auto, local or cloud", c.Mode)
	}
	return nil
}

// Router turns a request plus the current link and load into a Decision.
// It is safe for concurrent use.
type Router struct {
	cfg          Config
	pred         Predictor             // nil = the rule alone
	rule         predictor.EntropyRule // stands in when pred is nil or fails
	thresholdSet bool                  // the operator set Config.Threshold: the model's own is not used

	mu            sync.Mutex // guards the latches (link and load only; never the content score)
	linkDegraded  bool
	localOverload bool
}

// NewRouter returns a Router. pred may be nil: the entropy rule decides.
func NewRouter(cfg Config, pred Predictor) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	set := cfg.Threshold != 0
	cfg.fill()
	return &Router{cfg: cfg, pred: pred, rule: predictor.EntropyRule{Threshold: cfg.EntropyThreshold}, thresholdSet: set}, nil
}

// Text is what the router reads from a request: the latest user turn, the
// new work being asked for (earlier turns were routed when they were new),
// or a raw completion's prompt.
func Text(req *llm.Request) string {
	if req.Raw {
		return req.Prompt
	}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			return req.Messages[i].Content
		}
	}
	if n := len(req.Messages); n > 0 {
		return req.Messages[n-1].Content
	}
	return ""
}

// Sourcer is a Predictor that names where its probabilities come from in
// decisions (models/predictor's EntropyRule, and a Swappable serving it,
// say "entropy-rule"); other predictors read as "predictor".
type Sourcer interface {
	Source() string
}

// readsProbe: whether the serving predictor reads the probe block (one
// that does not say is taken to); the entropy rule alone does not.
func (r *Router) readsProbe() bool {
	if r.pred == nil {
		return false
	}
	if pr, ok := r.pred.(predictor.ProbeReader); ok {
		return pr.ReadsProbe()
	}
	return true
}

// Decide picks a path for req.
func (r *Router) Decide(req *llm.Request, link Link, load Load) Decision {
	d := Decision{Inputs: Inputs{Link: link, Load: load}}
	text := Text(req)
	d.Features = textfeat.Extract(text)
	o := req.Hints.Route
	overrideBy := "x-phaseless-route: "
	if o != PathLocal && o != PathCloud && (r.cfg.Mode == PathLocal || r.cfg.Mode == PathCloud) {
		o, overrideBy = r.cfg.Mode, "route-mode: "
	}
	if req.Raw {
		// Only the device's built-in engine runs a raw completion
		// (llm.Request.Raw); the Dispatcher refuses one that asks for the
		// cloud by header.
		o, overrideBy = PathLocal, "raw completion runs on the device: "
	}
	if name := cloudOnlyHint(req, r.cfg.LocalNoPins); name != "" && o != PathLocal && o != PathCloud && link.Configured {
		// The request asks for a mechanism only the cloud has (semantic
		// grouping, prefetch): it goes where that takes effect.
		o, overrideBy = PathCloud, "header "+name+" acts in the cloud: "
	}
	pinned := o == PathLocal || o == PathCloud
	var toolPath, toolWhy string
	if !pinned {
		toolPath, toolWhy = r.toolRoute(req, link)
	}
	if r.cfg.Probe != nil && r.readsProbe() && !pinned && toolPath == "" && link.Configured && link.Connected {
		textfeat.SetProbe(d.Features, r.cfg.Probe(text))
		d.Probed = d.Features[textfeat.IdxProbed] == 1
	}
	d.ByteEntropy = float64(d.Features[textfeat.IdxByteEntropy])
	// The articles' rule as a probability: logistic in the byte entropy,
	// exactly 0.5 at the threshold, so threshold and hysteresis mean the
	// same for it as for a learned model. It cannot fail on Extract's vector.
	d.CloudProb, _ = r.rule.Predict(d.Features)
	d.ProbSource = r.rule.Source()
	d.Threshold, d.ThresholdSource = r.cfg.Threshold, "default"
	if r.thresholdSet {
		d.ThresholdSource = "config"
	}
	if r.pred != nil {
		if p, err := r.pred.Predict(d.Features); err == nil && p >= 0 && p <= 1 {
			d.CloudProb, d.ProbSource = p, "predictor"
			if s, ok := r.pred.(Sourcer); ok {
				d.ProbSource = s.Source()
			}
			// The model's threshold belongs to the model's probabilities
			// only: when the entropy rule stands in, 0.5 is its bound.
			if t, ok := r.pred.(Thresholder); ok && !r.thresholdSet {
				if th, ok := t.Threshold(); ok && th > 0 && th < 1 {
					d.Threshold, d.ThresholdSource = th, "model"
				}
			}
		} else {
			if err == nil {
				err = fmt.Errorf("probability %g out of range", p)
			}
			d.ProbSource = "entropy-rule (predictor failed: " + err.Error() + ")"
		}
	}

	wantCloud := d.CloudProb >= d.Threshold // per request, no memory
	h := r.cfg.Hysteresis
	r.mu.Lock()
	if !link.Connected {
		r.linkDegraded = false // a new connection starts undegraded
	} else {
		over := link.Loss > r.cfg.MaxLoss || (r.cfg.MaxRTT > 0 && link.RTT > r.cfg.MaxRTT)
		clear := link.Loss <= r.cfg.MaxLoss*(1-h) && (r.cfg.MaxRTT <= 0 || float64(link.RTT) <= float64(r.cfg.MaxRTT)*(1-h))
		r.linkDegraded = over || (r.linkDegraded && !clear)
	}
	degraded := r.linkDegraded
	kvLow, kvHigh := r.cfg.MaxKVFaultsPerMs*(1-h), r.cfg.MaxKVFaultsPerMs
	overKV := latch(r.localOverload, load.KVFaultsPerMs, kvLow, kvHigh)
	overQueue := load.Capacity > 0 && float64(load.Waiting) >= r.cfg.MaxQueueFraction*float64(load.Capacity)
	r.localOverload = overKV
	r.mu.Unlock()
	overloaded := overKV || overQueue

	why := d.probReason()
	switch {
	case pinned:
		d.Override = o
		d.Path, d.Reason = o, overrideBy+o
	case toolPath != "":
		// Where the tools are served, not a pin: a local engine that
		// refuses the request (a full queue) may still offload it.
		d.Path, d.Reason = toolPath, toolWhy
	case !link.Configured:
		d.Path, d.Reason = PathLocal, "offline-only (no cloud configured)"
	case !link.Connected:
		d.Path, d.Reason = PathLocal, "cloud unreachable; "+why
	case wantCloud && degraded && !overloaded:
		d.Path, d.Reason = PathLocal, fmt.Sprintf("link degraded (rtt %v, loss %.1f%%); %s", link.RTT.Round(time.Millisecond), 100*link.Loss, why)
	case !wantCloud && overloaded && !degraded:
		d.Path, d.Reason = PathCloud, fmt.Sprintf("local engine overloaded (queue %d/%d, kv %.1f faults/ms); %s", load.Waiting, load.Capacity, load.KVFaultsPerMs, why)
	case wantCloud:
		d.Path, d.Reason = PathCloud, why
	default:
		d.Path, d.Reason = PathLocal, why
	}
	return d
}

// toolRoute is where a request that offers tools runs when nothing pins
// it, and why: on the device when its engine serves those tools (the edge
// model calls the car's tools; the cloud's built-in model calls none) or
// when the cloud does not call tools either; in the cloud when only it
// serves them. "" (the score decides, as for any request) without tools,
// without a cloud, or when only the unreachable cloud serves them.
func (r *Router) toolRoute(req *llm.Request, link Link) (path, why string) {
	if !req.HasTools() || !link.Configured {
		return "", ""
	}
	switch {
	case r.cfg.LocalTools == nil || r.cfg.LocalTools(req.Tools):
		return PathLocal, "tools: the local model serves them"
	case !r.cfg.CloudTools:
		return PathLocal, "tools: the local model was not taught them, and the cloud calls no tools"
	case !link.Connected:
		return "", ""
	}
	return PathCloud, "tools: only the cloud serves them"
}

func (d *Decision) probReason() string {
	src := "p"
	if strings.HasPrefix(d.ProbSource, "entropy-rule") {
		src = fmt.Sprintf("entropy %.2f bits/byte, p", d.ByteEntropy)
	}
	return fmt.Sprintf("%s=%.2f vs %s threshold %.2f (%s)", src, d.CloudProb, d.ThresholdSource, d.Threshold, d.ProbSource)
}

// latch is a Schmitt trigger: it turns on above high, off below low, and
// keeps its state in between.
func latch(on bool, v, low, high float64) bool {
	switch {
	case v >= high:
		return true
	case v < low:
		return false
	}
	return on
}
