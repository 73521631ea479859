package ui

import (
	"encoding/json"
	"math"
	"net/http"
)

// livePoint is one interval of the live charts.
type livePoint struct {
	T        int64    `json:"t"` // unix milliseconds at the interval's end
	TTFTp50  *float64 `json:"ttft_p50_ms"`
	TTFTp95  *float64 `json:"ttft_p95_ms"`
	ITLp50   *float64 `json:"itl_p50_ms"`
	ITLp95   *float64 `json:"itl_p95_ms"`
	Requests uint64   `json:"requests"`
	TokensPS float64  `json:"tokens_per_s"`
	Batch    *float64 `json:"batch_mean"`
}

type livePool struct {
	Name        string  `json:"name"`
	Workers     int     `json:"workers"`
	Running     int     `json:"running"`
	Capacity    int     `json:"capacity"`
	Queued      int     `json:"queued"`
	Utilization float64 `json:"utilization"`
}

type liveView struct {
	Points  []livePoint `json:"points"`
	Pools   []livePool  `json:"pools"`
	Workers []Worker    `json:"workers"`
	Tokens  float64     `json:"output_tokens_total"`
}

// ms converts seconds to milliseconds, nil when there is no estimate (the
// chart leaves a gap rather than drawing zero latency).
func ms(v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	v *= 1000
	return &v
}

// liveJSON is what the dashboard's script polls: the pools and workers now
// and one chart point per sampled interval.
func (s *Server) liveJSON(w http.ResponseWriter, _ *http.Request) {
	if s.cfg.Cloud == nil {
		http.Error(w, "no coordinator", http.StatusNotFound)
		return
	}
	samples := s.live.sample(s.cfg.Cloud)
	v := liveView{Workers: s.cfg.Cloud.Workers(), Points: []livePoint{}}
	for _, p := range s.cfg.Cloud.Pools() {
		v.Pools = append(v.Pools, livePool{Name: p.Name, Workers: p.Workers, Running: p.Running, Capacity: p.Capacity, Queued: p.Queued, Utilization: p.Utilization()})
	}
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		ttft, itl, bsz := b.ttft.Sub(a.ttft), b.itl.Sub(a.itl), b.bsz.Sub(a.bsz)
		p := livePoint{
			T: b.at.UnixMilli(), Requests: ttft.Total(),
			TTFTp50: ms(ttft.Quantile(0.5)), TTFTp95: ms(ttft.Quantile(0.95)),
			ITLp50: ms(itl.Quantile(0.5)), ITLp95: ms(itl.Quantile(0.95)),
		}
		if dt := b.at.Sub(a.at).Seconds(); dt > 0 {
			p.TokensPS = (b.tokens - a.tokens) / dt
		}
		if n := bsz.Total(); n > 0 {
			mean := bsz.Sum / float64(n)
			p.Batch = &mean
		}
		v.Points = append(v.Points, p)
	}
	if n := len(samples); n > 0 {
		v.Tokens = samples[n-1].tokens
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}
