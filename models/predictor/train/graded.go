package train

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/phaseless/phaseless/internal/atomicfile"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/cloudmodel"
	"github.com/phaseless/phaseless/models/edgemodel"
	"github.com/phaseless/phaseless/models/grade"
	"github.com/phaseless/phaseless/models/intents"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/gguf"
	"github.com/phaseless/phaseless/models/lmtrain/corpus"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/models/textfeat"
)

// GradedFile is the cache of graded answers and probes in a routing data
// directory: one JSON line per prompt (GradedEntry), sorted by key, gzip.
// `phaselessctl model grade` (GradeOptions) fills it; training only reads it,
// so `phaselessctl model train` stays a few seconds and byte-reproducible.
const GradedFile = "graded.jsonl.gz"

// ReplyTokens bounds each generated reply; the models' replies are one or
// two sentences.
const ReplyTokens = 96

// GradedEntry is one prompt's cached measurements.
type GradedEntry struct {
	Key string `json:"key"` // CacheKey of the prompt
	// Probe is the edge model's prefill probe (lm.Probe): prompt NLL, then
	// textfeat.ProbeSteps entropies, then as many top-token probabilities,
	// rounded to float32.
	Probe []float32 `json:"probe"`
	// Edge and Cloud are the models' greedy replies through the engine,
	// where the prompt has a reference to grade them with (Cloud for
	// held-out prompts, which the evaluation grades, and for device
	// commands, whose label compares the two; see ApplyGraded).
	Edge  *string `json:"edge,omitempty"`
	Cloud *string `json:"cloud,omitempty"`
}

// GradedHeader is the cache's first line: which models made it.
type GradedHeader struct {
	EdgeSHA256  string `json:"edge_sha256"`
	CloudSHA256 string `json:"cloud_sha256"`
	ProbeSteps  int    `json:"probe_steps"`
	ProbeTokens int    `json:"probe_max_tokens"`
	Command     string `json:"command"`
}

// Graded is a loaded cache.
type Graded struct {
	Header  GradedHeader
	Entries map[string]*GradedEntry
}

// CurrentHeader describes the shipped models; a cache made with others is
// stale.
func CurrentHeader() GradedHeader {
	return GradedHeader{EdgeSHA256: replySum(edgemodel.GGUF()), CloudSHA256: replySum(cloudmodel.GGUF()), ProbeSteps: textfeat.ProbeSteps,
		ProbeTokens: textfeat.ProbeMaxTokens, Command: "phaselessctl model grade"}
}

// replySum is the SHA-256 of a model file as it was before it declared
// its sampling (lm.WriteSampling with none): grading runs greedy requests
// that set every sampling field, so the declaration changes no graded
// reply, and declaring one (`phaselessctl lm sampling`) leaves the cache
// valid. A file that does not read is summed as it is.
func replySum(b []byte) string {
	h := sha256.New()
	f, err := gguf.ReadBytes(b)
	if err == nil {
		err = lm.WriteSampling(h, f, llm.Sampling{})
	}
	if err != nil {
		h.Reset()
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ErrStaleGraded means the cache was made with other models or misses
// prompts: rerun `phaselessctl model grade`.
var ErrStaleGraded = errors.New("graded answers are stale: run `phaselessctl model grade` (docs/predictor.md)")

// LoadGraded reads dir/GradedFile; a missing file is an empty cache.
func LoadGraded(dir string) (*Graded, error) {
	g := &Graded{Entries: map[string]*GradedEntry{}}
	f, err := os.Open(filepath.Join(dir, GradedFile))
	if errors.Is(err, os.ErrNotExist) {
		return g, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("graded: %w", err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for n := 0; sc.Scan(); n++ {
		if n == 0 {
			if err := json.Unmarshal(sc.Bytes(), &g.Header); err != nil {
				return nil, fmt.Errorf("graded: header: %w", err)
			}
			continue
		}
		var e GradedEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("graded: line %d: %w", n+1, err)
		}
		if len(e.Probe) != 1+2*g.Header.ProbeSteps {
			return nil, fmt.Errorf("graded: line %d: %d probe values, want %d", n+1, len(e.Probe), 1+2*g.Header.ProbeSteps)
		}
		g.Entries[e.Key] = &e
	}
	return g, sc.Err()
}

// Save writes the cache to dir/GradedFile, entries sorted by key, so the
// same measurements give the same bytes.
func (g *Graded) Save(dir string) error {
	keys := make([]string, 0, len(g.Entries))
	for k := range g.Entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	f, err := atomicfile.Create(filepath.Join(dir, GradedFile), 0o644)
	if err != nil {
		return err
	}
	defer f.Abort()
	zw, _ := gzip.NewWriterLevel(f, gzip.BestCompression)
	bw := bufio.NewWriter(zw)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	err = enc.Encode(g.Header)
	for _, k := range keys {
		if err == nil {
			err = enc.Encode(g.Entries[k])
		}
	}
	if err = errors.Join(err, bw.Flush(), zw.Close()); err != nil {
		return err
	}
	return f.Commit()
}

// Reference is the grader's reference for an example, and false where the
// edge model's answer cannot be right: a request of a CLINC150 intent its
// corpus has no replies for, out-of-scope, an MMLU question (the data holds
// no answers) — none of these is generated.
func Reference(e Example) (grade.Reference, bool) {
	if e.Ref != nil {
		return *e.Ref, true
	}
	switch e.Source {
	case SourceEdgeCLINC:
		if e.Group == "calculator" {
			// Arithmetic has one right answer: the number, not the form.
			v, ok := corpus.CalculatorValue(e.Text)
			return grade.Reference{Kind: grade.Number, Answers: []string{fmt.Sprint(v)}}, ok
		}
		if KnowledgeIntents[e.Group] {
			return grade.Reference{}, false
		}
		return grade.Reference{Kind: grade.Command, Intents: []string{e.Group}}, true
	case SourceInCar:
		// The request's own values (a city, a temperature) must come back:
		// the slots of the reference reply that the request names.
		r := grade.Reference{Kind: grade.Command, Intents: []string{e.Group}}
		prompt := " " + strings.ToLower(e.Text) + " "
		for _, v := range intents.ReplySlots(e.Group, e.Answer) {
			if strings.Contains(prompt, " "+strings.ToLower(v)+" ") {
				r.Values = append(r.Values, v)
			}
		}
		return r, true
	case SourceFacts:
		return grade.Reference{Kind: grade.Exact, Answers: []string{e.Answer}}, true
	case SourceWiki:
		return grade.Reference{Kind: grade.Open, Answers: []string{e.Answer}}, true
	}
	return grade.Reference{}, false
}

// KnowledgeIntents are edge-corpus intents whose reply is itself knowledge
// the model would have to produce (a translation, a definition, a spelling,
// a unit conversion). The edge corpus answers them with a template that
// makes the content up ("In Spanish that is: merci beaucoup."), so a reply
// of the right form is not a right answer, and without a reference the
// answer cannot be graded right: they are labelled for the cloud. Device
// intents (weather, fuel, flights) also carry made-up values, but there the
// form is the answer and an integration fills the values from the car's
// services (docs/models.md).
var KnowledgeIntents = map[string]bool{"translate": true, "definition": true, "spelling": true, "measurement_conversion": true}

// GradeOptions is one `phaselessctl model grade` run.
type GradeOptions struct {
	DataDir string
	Log     io.Writer
	Batch   int // prompts per probe pass and concurrent generations (default 32)
	Threads int // cores the models may use (default GOMAXPROCS)
}

// GradeRun fills dir's cache for every prompt of the edge split and the
// fresh set: the edge model's probe for all of them, its reply where there
// is a reference, and the cloud model's reply for held-out prompts with a
// reference. Entries already cached for the same models are kept, so a run
// only measures what is new; a cache of other models is started afresh.
func GradeRun(ctx context.Context, opt GradeOptions) error {
	logf := func(format string, args ...any) {
		if opt.Log != nil {
			fmt.Fprintf(opt.Log, format, args...)
		}
	}
	batch := opt.Batch
	if batch <= 0 {
		batch = 32
	}
	data, err := LoadRouting(opt.DataDir)
	if err != nil {
		return err
	}
	split, err := data.EdgeSplit()
	if err != nil {
		return err
	}
	g, err := LoadGraded(opt.DataDir)
	if err != nil {
		return err
	}
	if g.Header != CurrentHeader() {
		logf("cache made with other models or settings: starting afresh\n")
		g = &Graded{Header: CurrentHeader(), Entries: map[string]*GradedEntry{}}
	}
	edge, err := edgemodel.Open()
	if err != nil {
		return err
	}
	cloud, err := cloudmodel.Open()
	if err != nil {
		return err
	}
	type item struct {
		e         Example
		wantCloud bool
	}
	var items []item
	seen := map[string]bool{}
	for i, set := range [][]Example{split.Train, split.Val, split.Test, data.Fresh, data.Dev, data.Fresh2, data.Fresh3} {
		for _, e := range set {
			k := CacheKey(e.Text)
			if seen[k] {
				continue
			}
			seen[k] = true
			items = append(items, item{e, i >= 1}) // validation (DevAPGR reads its facts) and held out
		}
	}
	entry := func(e Example) *GradedEntry {
		k := CacheKey(e.Text)
		en := g.Entries[k]
		if en == nil {
			en = &GradedEntry{Key: k}
			g.Entries[k] = en
		}
		return en
	}
	// Probes, batched.
	var todo []Example
	for _, it := range items {
		if en := g.Entries[CacheKey(it.e.Text)]; en == nil || en.Probe == nil {
			todo = append(todo, it.e)
		}
	}
	start := time.Now()
	logf("probing %d prompts on the edge model\n", len(todo))
	for i := 0; i < len(todo); i += batch {
		if err := ctx.Err(); err != nil {
			return errors.Join(err, g.Save(opt.DataDir))
		}
		chunk := todo[i:min(i+batch, len(todo))]
		texts := make([]string, len(chunk))
		for j, e := range chunk {
			texts[j] = e.Text
		}
		for j, p := range edge.ProbeChats(texts, textfeat.ProbeSteps, textfeat.ProbeMaxTokens, opt.Threads) {
			entry(chunk[j]).Probe = probeValues(p)
		}
		if (i/batch)%50 == 0 {
			logf("  %d/%d (%v)\n", i+len(chunk), len(todo), time.Since(start).Round(time.Second))
			if err := g.Save(opt.DataDir); err != nil {
				return err
			}
		}
	}
	if err := g.Save(opt.DataDir); err != nil {
		return err
	}
	// Replies through the engine, as a user would get them.
	for _, side := range []struct {
		name string
		m    *lm.Model
		want func(item) bool
		slot func(*GradedEntry) **string
	}{
		{"edge", edge, func(it item) bool { return true }, func(en *GradedEntry) **string { return &en.Edge }},
		{"cloud", cloud, func(it item) bool {
			ref, _ := Reference(it.e)
			return it.wantCloud || ref.Kind == grade.Command
		}, func(en *GradedEntry) **string { return &en.Cloud }},
	} {
		var todo []Example
		for _, it := range items {
			if _, ok := Reference(it.e); ok && side.want(it) && *side.slot(entry(it.e)) == nil {
				todo = append(todo, it.e)
			}
		}
		logf("generating %d %s replies\n", len(todo), side.name)
		replies, err := Replies(ctx, side.m, todo, batch, opt.Threads, func(done int) {
			if done%1000 == 0 {
				logf("  %d/%d (%v)\n", done, len(todo), time.Since(start).Round(time.Second))
			}
		})
		for j, r := range replies {
			if r != nil {
				*side.slot(entry(todo[j])) = r
			}
		}
		if serr := g.Save(opt.DataDir); err != nil || serr != nil {
			return errors.Join(err, serr)
		}
	}
	// Prompts the data no longer has (a corpus change) leave the cache.
	pruned := 0
	for k := range g.Entries {
		if !seen[k] {
			delete(g.Entries, k)
			pruned++
		}
	}
	if err := g.Save(opt.DataDir); err != nil {
		return err
	}
	logf("graded cache: %d prompts, %d no longer in the data dropped (%v)\n", len(g.Entries), pruned, time.Since(start).Round(time.Second))
	return nil
}

// probeValues packs a probe as the cache stores it, rounded to four
// decimals (a tenth of a per-mille of a nat is far below what routing
// reads, and it halves the file).
func probeValues(p lm.Probe) []float32 {
	r := func(v float64) float32 { return float32(math.Round(v*1e4) / 1e4) }
	out := []float32{r(p.PromptNLL)}
	for _, s := range [][]float64{p.Entropy, p.TopProb} {
		for i := range textfeat.ProbeSteps {
			v := 0.0
			if i < len(s) {
				v = s[i]
			}
			out = append(out, r(v))
		}
	}
	return out
}

// CacheKey names a prompt in the cache: the first 8 bytes of the SHA-256
// of its PromptKey, in hex (MMLU prompts are long; 64 bits keep 30k keys
// apart with a collision chance below 1e-10).
func CacheKey(text string) string {
	sum := sha256.Sum256([]byte(PromptKey(text)))
	return hex.EncodeToString(sum[:8])
}

// Replies generates m's greedy reply to each example through the engine,
// conc at a time (the engine batches them); a nil entry was not generated
// (context cancelled).
func Replies(ctx context.Context, m *lm.Model, ex []Example, conc, threads int, progress func(done int)) ([]*string, error) {
	e, err := lm.NewEngine(m, lm.EngineConfig{Threads: threads, MaxBatch: conc})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	out := make([]*string, len(ex))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	done := 0
	sem := make(chan struct{}, conc)
	for i, x := range ex {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var b strings.Builder
			req := &llm.Request{Messages: []llm.Message{{Role: "user", Content: x.Text}}, MaxTokens: ReplyTokens, Seed: 1}
			_, err := e.Generate(ctx, req, func(tk llm.Token) error { b.WriteString(tk.Text); return nil })
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil && ctx.Err() == nil {
					firstErr = fmt.Errorf("generate %q: %w", x.Text, err)
				}
				return
			}
			s := strings.TrimSpace(b.String())
			out[i] = &s
			done++
			if progress != nil {
				progress(done)
			}
		})
	}
	wg.Wait()
	return out, errors.Join(firstErr, ctx.Err())
}

// ApplyGraded turns cached measurements into what training and evaluation
// read: each example's probe block (textfeat.SetProbe), whether the edge
// and cloud answers grade right (EdgeOK, CloudOK; Graded when the example
// has a reference), and its label, from the outcomes:
//   - 0 (local) when the edge model's answer grades right;
//   - a device command (grade.Command) it gets wrong: 1 when the cloud
//     model's answer grades right, else 0 (a tie);
//   - anything else it gets wrong, or cannot answer (no reference: another
//     CLINC150 domain, out-of-scope, MMLU): 1.
//
// An example the cache lacks is an error (ErrStaleGraded), as is a cache
// made with other models.
func ApplyGraded(g *Graded, ex []Example) error {
	if g.Header != CurrentHeader() {
		return fmt.Errorf("%w: cache header %+v, shipped models %+v", ErrStaleGraded, g.Header, CurrentHeader())
	}
	for i := range ex {
		e := &ex[i]
		en := g.Entries[CacheKey(e.Text)]
		if en == nil {
			return fmt.Errorf("%w: no entry for %q (%s)", ErrStaleGraded, e.Text, e.Source)
		}
		e.Features = slices.Clone(e.Features)
		textfeat.SetProbe(e.Features, ProbeOf(en.Probe))
		e.Label, e.EdgeOK, e.CloudOK, e.Graded = 1, false, false, false
		ref, ok := Reference(*e)
		if !ok {
			continue
		}
		e.Graded = true
		if en.Edge == nil {
			return fmt.Errorf("%w: no edge reply for %q (%s)", ErrStaleGraded, e.Text, e.Source)
		}
		e.EdgeOK = grade.Grade(ref, *en.Edge).OK
		if en.Cloud != nil {
			e.CloudOK = grade.Grade(ref, *en.Cloud).OK
		}
		switch {
		case e.EdgeOK:
			e.Label = 0
		case ref.Kind == grade.Command:
			// A device command the edge model fumbles goes to the cloud
			// only where the cloud answers it right; where neither does,
			// the tie goes to the device, as RouteLLM's does to the
			// cheaper model (the cloud cannot act on the car anyway).
			if en.Cloud == nil {
				return fmt.Errorf("%w: no cloud reply for the command %q (%s)", ErrStaleGraded, e.Text, e.Source)
			}
			if !e.CloudOK {
				e.Label = 0
			}
		}
	}
	return nil
}

// ProbeOf unpacks a cached probe (probeValues).
func ProbeOf(v []float32) textfeat.Probe {
	n := (len(v) - 1) / 2
	p := textfeat.Probe{PromptNLL: float64(v[0]), Entropy: make([]float64, n), TopProb: make([]float64, n)}
	for i := range n {
		p.Entropy[i], p.TopProb[i] = float64(v[1+i]), float64(v[1+n+i])
	}
	return p
}

// GradedSplit is EdgeSplit with the cache of dir applied (ApplyGraded) to
// every part: graded labels, probe features and the models' outcomes.
func (d *Data) GradedSplit(dir string) (*EdgeSplit, error) {
	split, err := d.EdgeSplit()
	if err != nil {
		return nil, err
	}
	g, err := LoadGraded(dir)
	if err != nil {
		return nil, err
	}
	for _, set := range [][]Example{split.Train, split.Val, split.Test, split.Fresh, split.Dev, split.Fresh2, split.Fresh3} {
		if err := ApplyGraded(g, set); err != nil {
			return nil, err
		}
	}
	return split, nil
}

// ProbeDropEvery: one training prompt in ProbeDropEvery (by hash) has its
// probe block cleared, so the model also learns to route without a probe —
// an agent whose local engine is an external server has none
// (route.Config.Probe nil). Unprobed is how such a request is scored.
const ProbeDropEvery = 8

// dropProbes clears the probe block of one example in ProbeDropEvery.
func dropProbes(ex []Example) {
	for i := range ex {
		if promptBucket(ex[i].Text)%ProbeDropEvery == 1 {
			ex[i].Features = slices.Clone(ex[i].Features)
			clear(ex[i].Features[textfeat.ProbeOffset:textfeat.V2Dim])
		}
	}
}

// clearProbes empties every example's probe block (Config.Probe unset).
func clearProbes(ex []Example) {
	for i := range ex {
		ex[i].Features = slices.Clone(ex[i].Features)
		clear(ex[i].Features[textfeat.ProbeOffset:textfeat.V2Dim])
	}
}

// Unprobed scores requests as an agent without a probe would: the probe
// block cleared.
type Unprobed struct{ P predictor.Predictor }

// Predict implements predictor.Predictor.
func (u Unprobed) Predict(f []float32) (float64, error) {
	if len(f) != textfeat.Dim {
		return u.P.Predict(f)
	}
	g := slices.Clone(f)
	clear(g[textfeat.ProbeOffset:textfeat.V2Dim])
	return u.P.Predict(g)
}

// Threshold is the wrapped predictor's (predictor.Thresholder).
func (u Unprobed) Threshold() (float64, bool) {
	if t, ok := u.P.(predictor.Thresholder); ok {
		return t.Threshold()
	}
	return 0, false
}
