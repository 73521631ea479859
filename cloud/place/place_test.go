package place

import (
	"errors"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/prefetch"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/sched/schedtest"
	"github.com/phaseless/phaseless/cloud/semantic"
	"github.com/phaseless/phaseless/llm"
)

var t0 = time.Unix(1e9, 0)

// snapshot is three idle workers: prefill-heavy, decode-heavy and
// conservative, at t0.
func snapshot() *sched.Snapshot {
	return &sched.Snapshot{Now: t0, Workers: []sched.Worker{
		{Role: sched.RolePrefill, Healthy: true, Capacity: 4},
		{Role: sched.RoleDecode, Healthy: true, Capacity: 4},
		{Role: sched.RoleConservative, Healthy: true, Capacity: 4},
	}}
}

func request(text string) *Request {
	return &Request{Sig: &sched.Request{InputTokens: 40, BlockHashes: []uint64{1, 2, 3}}, MaxOutput: 8,
		Messages: []llm.Message{{Role: "system", Content: "You are the car's assistant."}, {Role: "user", Content: text}}}
}

func newPlacer(t *testing.T, cfg Config) *Placer {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPlacePaths: each step of Place, in its order, decides when the steps
// before it do not.
func TestPlacePaths(t *testing.T) {
	onDecode := schedtest.Fixed{D: sched.Decision{Worker: 1, Pool: sched.RoleDecode}}
	for _, tc := range []struct {
		name    string
		cfg     Config
		req     func(*Request)
		view    func(*View)
		path    Path
		worker  int
		wantErr error
	}{
		{name: "the policy in force", cfg: Config{Policy: onDecode}, path: PathPolicy, worker: 1},
		{name: "breaker open: FIFO, the least loaded non-conservative worker",
			cfg: Config{Policy: onDecode}, view: func(v *View) { v.BreakerOpen = true; v.Snap.Workers[0].Running = 2 }, path: PathBreaker, worker: 1},
		{name: "breaker open, FIFO's choice", cfg: Config{Policy: onDecode},
			view: func(v *View) { v.BreakerOpen = true; v.Snap.Workers[1].Running = 2 }, path: PathBreaker, worker: 0},
		{name: "a named policy runs even with the breaker open", cfg: Config{Policy: onDecode, AllowOverride: true},
			req:  func(r *Request) { r.Hints.Policy = sched.NameExplicitPhases },
			view: func(v *View) { v.BreakerOpen = true }, path: PathOverride, worker: 1},
		{name: "a named policy is ignored without AllowOverride", cfg: Config{Policy: onDecode},
			req: func(r *Request) { r.Hints.Policy = sched.NameRoundRobin }, path: PathPolicy, worker: 1},
		{name: "model pins: only workers serving the model", cfg: Config{Scheduler: sched.NameLeastLoaded},
			req: func(r *Request) { r.Model = "m2" },
			view: func(v *View) {
				v.Workers = []Worker{{Model: "m1"}, {Model: "m1"}, {Model: "m2"}}
			}, path: PathPolicy, worker: 2},
		{name: "model pins: nobody serves it", cfg: Config{Scheduler: sched.NameLeastLoaded},
			req: func(r *Request) { r.Model = "m3" }, wantErr: sched.ErrNoWorker},
		{name: "the directory's pin: affinity follows it", cfg: Config{Scheduler: sched.NameLeastLoaded},
			req:  func(r *Request) { r.Pinned = Pin{Worker: 1, Blocks: 8}; r.Sig.BlockHashes = make([]uint64, 10) },
			view: func(v *View) { v.Snap.Workers[1].Running = 1 }, path: PathPolicy, worker: 1},
		{name: "without affinity the pin is a signal the policy may ignore", cfg: Config{Scheduler: sched.NameLeastLoaded, Layers: Layers{NoAffinity: true}},
			req:  func(r *Request) { r.Pinned = Pin{Worker: 1, Blocks: 8}; r.Sig.BlockHashes = make([]uint64, 10) },
			view: func(v *View) { v.Snap.Workers[1].Running = 1 }, path: PathPolicy, worker: 0},
		{name: "a policy out of range is an error", cfg: Config{Policy: schedtest.Fixed{D: sched.Decision{Worker: 7}}}, wantErr: errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlacer(t, tc.cfg)
			r := request("turn the heat up")
			if tc.req != nil {
				tc.req(r)
			}
			v := View{Snap: snapshot()}
			if tc.view != nil {
				tc.view(&v)
			}
			d, err := p.Place(r, v)
			switch {
			case tc.wantErr == errAny && err != nil, tc.wantErr != nil && errors.Is(err, tc.wantErr):
				return
			case tc.wantErr != nil || err != nil:
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if d.Path != tc.path || d.Worker != tc.worker {
				t.Fatalf("%s on %d, want %s on %d", d.Path, d.Worker, tc.path, tc.worker)
			}
		})
	}
}

var errAny = errors.New("any error")

// TestPlaceKeepsOnlyRunnableSplits: a split stands where it can run, and
// otherwise becomes its prefill worker's whole request.
func TestPlaceKeepsOnlyRunnableSplits(t *testing.T) {
	split := func(w, dw int) Config {
		return Config{Policy: schedtest.Fixed{D: sched.Decision{Worker: w, Split: true, DecodeWorker: dw}}}
	}
	remote := []Worker{{Remote: true}, {}, {}}
	for _, tc := range []struct {
		name  string
		cfg   Config
		req   func(*Request)
		ws    []Worker
		split bool
	}{
		{"to another worker", split(0, 1), nil, nil, true},
		{"to itself", split(0, 0), nil, nil, false},
		{"to no worker", split(0, 9), nil, nil, false},
		{"one token: the prefill samples it", split(0, 1), func(r *Request) { r.MaxOutput = 1 }, nil, false},
		{"a remote prefill that cannot render the prompt", split(0, 1), nil, remote, false},
		{"a remote prefill that can", split(0, 1), func(r *Request) { r.CarriesKV = true }, remote, true},
		{"a remote decode worker", split(1, 0), nil, remote, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Layers.NoAffinity = true
			r := request("x")
			if tc.req != nil {
				tc.req(r)
			}
			d, err := newPlacer(t, cfg).Place(r, View{Snap: snapshot(), Workers: tc.ws})
			if err != nil || d.Split != tc.split {
				t.Fatalf("%+v %v: want split %v", d, err, tc.split)
			}
		})
	}
}

// TestPlaceJoinsSemanticGroups: with grouping on, a similar request goes to
// the group its lead opened, while the group's worker has room and its
// window lasts; the policy places the rest.
func TestPlaceJoinsSemanticGroups(t *testing.T) {
	p := newPlacer(t, Config{Scheduler: sched.NameRoundRobin, Layers: Layers{Semantic: true, NoAffinity: true}})
	place := func(text string, at time.Time, edit func(*sched.Snapshot)) Decision {
		s := snapshot()
		s.Now = at
		if edit != nil {
			edit(s)
		}
		d, err := p.Place(request(text), View{Snap: s})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	lead := place("book a table for two at an italian place tonight", t0, nil)
	if lead.Path != PathPolicy || lead.Group != semantic.NoGroup {
		t.Fatalf("lead %+v", lead)
	}
	near := "book a table for two at an italian place tomorrow"
	if d := place(near, t0.Add(10*time.Millisecond), nil); d.Path != PathGroup || d.Worker != lead.Worker || d.Reason != sched.ReasonPrefix {
		t.Fatalf("second member %+v, want the lead's worker %d", d, lead.Worker)
	}
	full := func(s *sched.Snapshot) { s.Workers[lead.Worker].Running = 4 }
	if d := place(near, t0.Add(20*time.Millisecond), full); d.Path != PathPolicy || d.Group != semantic.Formed {
		t.Fatalf("third member, group's worker full: %+v, want the policy (the group formed all the same)", d)
	}
	if d := place(near, t0.Add(time.Second), nil); d.Path != PathPolicy || d.Group != semantic.NoGroup {
		t.Fatalf("after the window %+v", d)
	}
	if st := p.GroupStats(); st.Formed != 1 || st.Joined != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestFallbackAndResume: a failed request goes to the conservative pool
// (among workers serving its model), and a parked handoff to the least
// loaded built-in worker.
func TestFallbackAndResume(t *testing.T) {
	p := newPlacer(t, Config{})
	d, err := p.Fallback(request("x"), View{Snap: snapshot()}, 0)
	if err != nil || d.Path != PathFallback || d.Worker != 2 || d.Reason != sched.ReasonFallback {
		t.Fatalf("fallback %+v %v", d, err)
	}
	r := request("x")
	r.Model = "m"
	v := View{Snap: snapshot(), Workers: []Worker{{Model: "m"}, {Model: "m"}, {Model: "other"}}}
	if d, err := p.Fallback(r, v, 0); err != nil || d.Worker != 1 {
		t.Fatalf("fallback with the conservative worker on another model: %+v %v", d, err)
	}
	v = View{Snap: snapshot(), Workers: []Worker{{Builtin: true}, {Builtin: true}, {}}}
	v.Snap.Workers[0].Running = 3
	if d, err := p.Resume(v); err != nil || d.Path != PathResume || d.Worker != 1 {
		t.Fatalf("resume %+v %v", d, err)
	}
	if _, err := p.Resume(View{Snap: snapshot()}); !errors.Is(err, sched.ErrNoWorker) {
		t.Fatalf("resume without a built-in worker: %v", err)
	}
}

// TestLearnAndWarmTarget: prefetch learns only when on; a warm-up goes to
// the least loaded worker within the hint's load, unless one holds the
// prefix.
func TestLearnAndWarmTarget(t *testing.T) {
	bank := llm.Message{Role: "system", Content: "You are the bank's assistant. Answer about accounts and deposits."}
	travel := llm.Message{Role: "system", Content: "You are the travel desk. Book flights and hotels."}
	ask := func(sys llm.Message, user string) *Request {
		return &Request{Sig: &sched.Request{}, Tenant: "t", Messages: []llm.Message{sys, {Role: "user", Content: user}}}
	}
	for _, on := range []bool{false, true} {
		p := newPlacer(t, Config{Layers: Layers{Prefetch: on}})
		var w Warm
		for i, r := range []*Request{ask(bank, "set up direct deposit"), ask(travel, "book a flight to boston"), ask(bank, "how do i set up direct deposit")} {
			w = p.Learn(t0.Add(time.Duration(i)*time.Second), r)
		}
		if got := len(w.Predictions) == 1 && w.Predictions[0].Prefix[0].Equal(travel); got != on {
			t.Fatalf("prefetch %v: predictions %+v", on, w.Predictions)
		}
		if on && (w.Score != prefetch.Miss || w.MaxLoad != 0.25) {
			t.Fatalf("score %v, max load %v", w.Score, w.MaxLoad)
		}
	}
	p := newPlacer(t, Config{})
	s := snapshot()
	s.Workers[0].Running, s.Workers[1].Running = 2, 1
	if i, res := p.WarmTarget(s, 3, 0.25); res != WarmOn || i != 2 {
		t.Fatalf("warm on %d (%s)", i, res)
	}
	if _, res := p.WarmTarget(s, 3, 0.2); res != WarmOn {
		t.Fatalf("an idle worker is busy: %s", res)
	}
	s.Workers[2].Running = 1
	if _, res := p.WarmTarget(s, 3, 0.2); res != WarmBusy {
		t.Fatalf("%s, want busy", res)
	}
	s.Workers[1].PrefixBlocks = 3
	if i, res := p.WarmTarget(s, 3, 1); res != WarmCached || i != 1 {
		t.Fatalf("%d %s, want cached on 1", i, res)
	}
}

// TestCheckRefusesIgnoredHints: a header for a layer that is off, or a
// policy nobody knows, is refused rather than ignored.
func TestCheckRefusesIgnoredHints(t *testing.T) {
	for _, tc := range []struct {
		layers Layers
		hints  llm.Hints
		ok     bool
	}{
		{Layers{}, llm.Hints{}, true},
		{Layers{}, llm.Hints{Policy: "bogus"}, false},
		{Layers{}, llm.Hints{Policy: sched.NameDisaggregated}, true},
		{Layers{}, llm.Hints{Prefetch: "high"}, false},
		{Layers{Prefetch: true}, llm.Hints{Prefetch: "high"}, true},
		{Layers{}, llm.Hints{Prefetch: "none"}, true},
		{Layers{}, llm.Hints{SemanticMode: "topic"}, false},
		{Layers{}, llm.Hints{SemanticMode: "topic", BatchThreshold: 0.5}, true},
		{Layers{Semantic: true}, llm.Hints{SemanticMode: "topic"}, true},
	} {
		err := newPlacer(t, Config{Layers: tc.layers}).Check(&Request{Hints: tc.hints})
		if (err == nil) != tc.ok || err != nil && llm.CodeOf(err) != llm.CodeInvalid {
			t.Errorf("%+v %+v: %v", tc.layers, tc.hints, err)
		}
	}
}

func TestParseLayers(t *testing.T) {
	for spec, want := range map[string]string{
		"": "affinity", "none": "none", "semantic": "semantic", " prefetch, affinity": "affinity,prefetch",
		"affinity,semantic,prefetch": "affinity,semantic,prefetch",
	} {
		l, err := ParseLayers(spec)
		if err != nil || l.String() != want {
			t.Errorf("%q: %v %v, want %s", spec, l, err, want)
		}
		if again, _ := ParseLayers(l.String()); again != l {
			t.Errorf("%q does not round-trip", spec)
		}
	}
	if _, err := ParseLayers("affinity,bogus"); err == nil {
		t.Fatal("bogus accepted")
	}
}

// TestPlaceAllocatesNothing: a decision behind the default layers
// allocates nothing (the decision budget, docs/cloud.md). A semantic group
// opened allocates the group, and training's Hook a copy of the decision.
func TestPlaceAllocatesNothing(t *testing.T) {
	r := request("turn the heat up")
	s := snapshot()
	p := newPlacer(t, Config{})
	if n := testing.AllocsPerRun(100, func() { p.Place(r, View{Snap: s}) }); n != 0 {
		t.Errorf("Place allocates %v times", n)
	}
}

// BenchmarkPlace: the decision path's own cost over the policy's (the
// budget is p99 ≤ 50 µs with no allocation).
func BenchmarkPlace(b *testing.B) {
	p, _ := New(Config{})
	r := request("turn the heat up")
	s := snapshot()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Place(r, View{Snap: s}); err != nil {
			b.Fatal(err)
		}
	}
}
