// Package prefetch predicts a tenant's next kind of request and names the
// shared prefixes worth warming into an idle worker's cache before it comes.
//
// Requests are sorted into clusters of similar fingerprints
// (cloud/semantic); a Model keeps, per tenant, a first-order Markov chain
// over clusters with exponentially decayed transition counts, and for each
// cluster the prompt prefix its members share (system prompt, tool
// definitions, template: the messages before the last user turn). Predict
// returns the likeliest next clusters' prefixes; how many, and how much of
// the idle capacity they may use, is the request's x-prefetch-hint.
package prefetch

import (
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/phaseless/phaseless/cloud/semantic"
	"github.com/phaseless/phaseless/llm"
)

// Hint is an x-prefetch-hint level.
type Hint string

// Levels of x-prefetch-hint; "" means Medium.
const (
	High   Hint = "high"
	Medium Hint = "medium"
	Low    Hint = "low"
	None   Hint = "none"
)

// Budget is what a hint level allows: how many predicted clusters to warm
// and the largest load (running and queued over capacity) an idle worker
// may have to be used for it.
func (h Hint) Budget() (clusters int, maxLoad float64) {
	switch h {
	case High:
		return 3, 0.5
	case Low:
		return 1, 0.125
	case None:
		return 0, 0
	}
	return 2, 0.25
}

// Config tunes a Model. The zero value means defaults.
type Config struct {
	// Similarity is how similar a request must be to a cluster's centre to
	// belong to it (default 0.5).
	Similarity float64
	// HalfLife is how fast transition counts decay (default 10 minutes):
	// a tenant's habits change, and an old pattern should lose to a new one.
	HalfLife time.Duration
	// MaxClusters bounds the clusters kept per tenant (default 64); the
	// least recently seen is dropped.
	MaxClusters int
	// MinProbability is the least transition probability worth warming
	// (default 0.2).
	MinProbability float64
}

func (c *Config) fill() {
	if c.Similarity == 0 {
		c.Similarity = 0.5
	}
	if c.HalfLife == 0 {
		c.HalfLife = 10 * time.Minute
	}
	if c.MaxClusters == 0 {
		c.MaxClusters = 64
	}
	if c.MinProbability == 0 {
		c.MinProbability = 0.2
	}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Similarity < 0 || c.Similarity > 1:
		return errors.New("prefetch: Config.Similarity outside 0..1")
	case c.HalfLife < 0 || c.MaxClusters < 0:
		return errors.New("prefetch: Config.HalfLife and MaxClusters must not be negative")
	case c.MinProbability < 0 || c.MinProbability > 1:
		return errors.New("prefetch: Config.MinProbability outside 0..1")
	}
	return nil
}

// Model is the per-tenant predictor. It reads no clock: Observe says when
// each request came (wall time live, virtual time in the simulator). It is
// safe for concurrent use.
type Model struct {
	cfg     Config
	mu      sync.Mutex // guards tenants, stats
	tenants map[string]*tenant
	stats   Stats
}

// Stats count predictions that came true or not.
type Stats struct {
	Predictions uint64 // clusters predicted (warmed or not)
	Hits        uint64 // a request arrived in a cluster predicted for its tenant
	Misses      uint64 // a request arrived in a cluster nobody predicted
}

type tenant struct {
	clusters []*cluster
	last     int // index into clusters of the tenant's last request; -1 = none
	next     int // id for the next cluster
	// predicted are the clusters the last Observe predicted, so the next
	// request can be scored as a hit or a miss.
	predicted []int
}

type cluster struct {
	id     int
	centre semantic.Fingerprint
	prefix []llm.Message // shared by every member so far
	seen   time.Time
	out    map[int]*decayed // next cluster id → count
}

// decayed is an exponentially decayed count.
type decayed struct {
	v  float64
	at time.Time
}

func (d *decayed) value(now time.Time, halfLife time.Duration) float64 {
	return d.v * math.Exp2(-float64(now.Sub(d.at))/float64(halfLife))
}

func (d *decayed) add(now time.Time, halfLife time.Duration) {
	d.v = d.value(now, halfLife) + 1
	d.at = now
}

// New makes a Model.
func New(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.fill()
	return &Model{cfg: cfg, tenants: map[string]*tenant{}}, nil
}

// Prediction is a cluster to warm: the prompt prefix its requests share.
type Prediction struct {
	Cluster     int
	Probability float64
	Prefix      []llm.Message
}

// Score is how a request compared with its tenant's last prediction.
type Score uint8

// Scores.
const (
	Unscored Score = iota // the tenant's first request: nothing to compare with
	Hit                   // it arrived in a cluster predicted for its tenant
	Miss                  // it arrived in a cluster nobody predicted
)

// Observe records a tenant's request at now (its fingerprint and
// messages), scores the previous prediction, and returns up to n
// predictions for the tenant's next request, likeliest first.
func (m *Model) Observe(now time.Time, tenantID string, fp *semantic.Fingerprint, msgs []llm.Message, n int) ([]Prediction, Score) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tenants[tenantID]
	if t == nil {
		t = &tenant{last: -1}
		m.tenants[tenantID] = t
	}
	c := t.assign(fp, msgs, now, m.cfg)
	score := Unscored
	if len(t.predicted) > 0 || t.last >= 0 {
		if slices.Contains(t.predicted, c.id) {
			m.stats.Hits++
			score = Hit
		} else {
			m.stats.Misses++
			score = Miss
		}
	}
	if t.last >= 0 {
		prev := t.clusters[t.last]
		d := prev.out[c.id]
		if d == nil {
			d = &decayed{}
			prev.out[c.id] = d
		}
		d.add(now, m.cfg.HalfLife)
	}
	t.last = slices.Index(t.clusters, c)
	preds := t.predict(c, now, n, m.cfg)
	t.predicted = t.predicted[:0]
	for _, p := range preds {
		t.predicted = append(t.predicted, p.Cluster)
	}
	m.stats.Predictions += uint64(len(preds))
	return preds, score
}

// Stats returns the counters.
func (m *Model) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// assign finds fp's cluster or makes one, narrowing its shared prefix.
func (t *tenant) assign(fp *semantic.Fingerprint, msgs []llm.Message, now time.Time, cfg Config) *cluster {
	var best *cluster
	bestSim := cfg.Similarity
	for _, c := range t.clusters {
		if s := semantic.Similarity(fp, &c.centre); s >= bestSim {
			best, bestSim = c, s
		}
	}
	prefix := sharedPrefix(msgs)
	if best == nil {
		if len(t.clusters) >= cfg.MaxClusters {
			t.evict()
		}
		best = &cluster{id: t.next, centre: *fp, prefix: prefix, out: map[int]*decayed{}}
		t.next++
		t.clusters = append(t.clusters, best)
	} else {
		best.prefix = commonPrefix(best.prefix, prefix)
	}
	best.seen = now
	return best
}

// evict drops the least recently seen cluster.
func (t *tenant) evict() {
	old := 0
	for i, c := range t.clusters {
		if c.seen.Before(t.clusters[old].seen) {
			old = i
		}
	}
	gone := t.clusters[old].id
	t.clusters = slices.Delete(t.clusters, old, old+1)
	for _, c := range t.clusters {
		delete(c.out, gone)
	}
	// last indexes clusters: it moves with the deletion. Resetting it
	// instead lost the transition from the tenant's last request whenever
	// a new cluster evicted one, which with more kinds of request than
	// MaxClusters is every request: no transition was ever counted (the
	// simulator's Mooncake trace, one tenant, thousands of conversations).
	switch {
	case old == t.last:
		t.last = -1
	case old < t.last:
		t.last--
	}
}

func (t *tenant) predict(from *cluster, now time.Time, n int, cfg Config) []Prediction {
	if n <= 0 {
		return nil
	}
	total := 0.0
	for _, d := range from.out {
		total += d.value(now, cfg.HalfLife)
	}
	if total == 0 {
		return nil
	}
	var out []Prediction
	for _, c := range t.clusters {
		d := from.out[c.id]
		if d == nil {
			continue
		}
		p := d.value(now, cfg.HalfLife) / total
		if p < cfg.MinProbability || len(c.prefix) == 0 {
			continue
		}
		out = append(out, Prediction{Cluster: c.id, Probability: p, Prefix: c.prefix})
	}
	slices.SortFunc(out, func(a, b Prediction) int {
		if a.Probability != b.Probability {
			if a.Probability > b.Probability {
				return -1
			}
			return 1
		}
		return a.Cluster - b.Cluster
	})
	return out[:min(n, len(out))]
}

// sharedPrefix is the part of a request another request of its kind is
// likely to repeat: every message before the last user turn.
func sharedPrefix(msgs []llm.Message) []llm.Message {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return slices.Clone(msgs[:i])
		}
	}
	return nil
}

func commonPrefix(a, b []llm.Message) []llm.Message {
	n := 0
	for n < len(a) && n < len(b) && a[n].Equal(b[n]) {
		n++
	}
	return a[:n]
}
