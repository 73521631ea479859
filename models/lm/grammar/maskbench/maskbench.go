// Package maskbench runs JSONSchemaBench's MaskBench protocol
// (github.com/guidance-ai/jsonschemabench, maskbench/) on the grammar
// package: for each schema file it compiles the schema, then for each of
// its test instances (valid and invalid) tokenizes the instance as the
// Python runner writes it and, token by token, computes the mask and
// commits the token, timing both. A schema passes when it compiles, every
// valid instance is accepted and every invalid one refused.
//
// It is the measurement behind docs/structured.md, run by
// `phaselessctl lm maskbench`; a sample of the data set lives in testdata
// for the package's test.
package maskbench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/phaseless/phaseless/models/lm/constraint"
	"github.com/phaseless/phaseless/models/lm/grammar"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// Config says what to run.
type Config struct {
	// Dir holds the MaskBench files (*.json: a schema and its tests).
	Dir string
	// Tokenizer tokenizes the instances; its vocabulary is the mask's.
	Tokenizer tokenizer.Tokenizer
	// Limit, when above zero, runs that many files drawn with Seed.
	Limit int
	Seed  uint64
	// Reference computes each mask with grammar.TokenTrie.Mask, the trie
	// walk the Masker replaced, for a before/after comparison.
	Reference bool
	// FileTimeout, when above zero, gives up on a file whose compile and
	// tests have used that much of the thread's CPU time (MaskBench's
	// runner allows 15 minutes of wall time on a machine of its own; on a
	// shared one CPU time is what stays comparable); it counts as failed,
	// a timeout.
	FileTimeout time.Duration
	// Progress, when set, gets a line per file: its verdict, its tokens
	// and the time (as FileTimeout counts it) its compile and tests took.
	Progress io.Writer
}

// Report is what a run found.
type Report struct {
	Files, Compiled, Passing, Timeouts int
	ValidTests, ValidAccepted          int
	InvalidTests, InvalidRejected      int
	Tokens                             int
	Mask                               []time.Duration // per token: mask and commit, wall time
	MaskCPU                            []time.Duration // the same in thread CPU time (Linux)
	CompileTotal                       time.Duration   // of the schemas that compiled
	Refusals                           map[string]int  // compile errors, by reason
	Failures                           []string        // file: the first test it got wrong
	Sources                            map[string]*Tally
}

// Tally is one source's files, compiled and passing (the sources are the
// files' name prefixes: Github_hard, Kubernetes, BFCL_simple, …).
type Tally struct{ Files, Compiled, Passing int }

// source is a MaskBench file's source: its name up to "---", or up to its
// last "_" (BFCL_simple_12.json, JME_3.json).
func source(name string) string {
	if i := strings.Index(name, "---"); i > 0 {
		return name[:i]
	}
	name = strings.TrimSuffix(name, ".json")
	if i := strings.LastIndex(name, "_"); i > 0 {
		return name[:i]
	}
	return name
}

// file is one MaskBench file.
type file struct {
	Schema json.RawMessage `json:"schema"`
	Tests  []struct {
		Data  json.RawMessage `json:"data"`
		Valid bool            `json:"valid"`
	} `json:"tests"`
}

// Run runs the protocol over cfg.Dir.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	paths, err := filepath.Glob(filepath.Join(cfg.Dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no *.json files in %s", cfg.Dir)
	}
	sort.Strings(paths)
	if cfg.Limit > 0 && cfg.Limit < len(paths) {
		rng := rand.New(rand.NewPCG(cfg.Seed, 29))
		rng.Shuffle(len(paths), func(i, j int) { paths[i], paths[j] = paths[j], paths[i] })
		paths = paths[:cfg.Limit]
		sort.Strings(paths)
	}
	// One thread runs every mask, so thread CPU time measures them.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ix := constraint.NewIndex(cfg.Tokenizer, cfg.Tokenizer.VocabSize())
	r := &Report{Refusals: map[string]int{}, Sources: map[string]*Tally{}}
	b := &bench{cfg: cfg, ix: ix, r: r, set: grammar.NewTokenSet(ix.Trie.Vocab()), allow: make([]bool, ix.Trie.Vocab())}
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return r, err
		}
		var f file
		if err := json.Unmarshal(data, &f); err != nil {
			return r, fmt.Errorf("%s: %w", p, err)
		}
		r.Files++
		tokens, c0, compiled := r.Tokens, elapsed(), r.Compiled
		verdict := b.runFile(&f)
		src := r.Sources[source(filepath.Base(p))]
		if src == nil {
			src = &Tally{}
			r.Sources[source(filepath.Base(p))] = src
		}
		src.Files++
		src.Compiled += r.Compiled - compiled
		if verdict == "" {
			r.Passing++
			src.Passing++
		} else if !strings.HasPrefix(verdict, "refused") {
			r.Failures = append(r.Failures, filepath.Base(p)+": "+verdict)
		}
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "%s %s (%d tokens, %.1f ms)\n", filepath.Base(p), cmp.Or(verdict, "pass"), r.Tokens-tokens, float64(elapsed()-c0)/1e6)
		}
	}
	return r, nil
}

type bench struct {
	cfg   Config
	ix    *constraint.Index
	r     *Report
	set   grammar.TokenSet
	allow []bool
	// deadline is when the file under way runs out of time (zero: never),
	// on the clock elapsed reads.
	deadline time.Duration
}

// elapsed is the time the run's thread has used (its CPU time, where the
// system gives it, so that a timeout does not depend on what else the
// machine runs; else the wall clock since the process started).
func elapsed() time.Duration {
	if c, ok := threadCPU(); ok {
		return c
	}
	return time.Since(processStart)
}

var processStart = time.Now()

// runFile runs one file's schema and tests; it returns "" when the schema
// passes, else why not.
func (b *bench) runFile(f *file) (verdict string) {
	defer func() {
		if e := recover(); e != nil {
			verdict = fmt.Sprintf("panic: %v", e)
		}
	}()
	t0 := time.Now()
	b.deadline = 0
	if b.cfg.FileTimeout > 0 {
		b.deadline = elapsed() + b.cfg.FileTimeout
	}
	g, err := grammar.SchemaWith(f.Schema, grammar.Options{Check: true})
	if err != nil {
		b.r.Refusals[refusalReason(err)]++
		return "refused: " + err.Error()
	}
	b.r.CompileTotal += time.Since(t0)
	b.r.Compiled++
	for i, tc := range f.Tests {
		text, err := pyDumps(tc.Data)
		if err != nil {
			return fmt.Sprintf("test %d: %v", i, err)
		}
		accepted, timedOut := b.runInstance(g, b.cfg.Tokenizer.Encode(string(text)))
		if timedOut {
			b.r.Timeouts++
			return fmt.Sprintf("test %d: timeout after %v", i, b.cfg.FileTimeout)
		}
		if tc.Valid {
			b.r.ValidTests++
			if accepted {
				b.r.ValidAccepted++
			} else if verdict == "" {
				verdict = fmt.Sprintf("test %d: valid instance refused", i)
			}
		} else {
			b.r.InvalidTests++
			if !accepted {
				b.r.InvalidRejected++
			} else if verdict == "" {
				verdict = fmt.Sprintf("test %d: invalid instance accepted", i)
			}
		}
	}
	return verdict
}

// runInstance feeds toks to g's parses, computing the mask before each
// (with a new Masker: nothing is carried over from another instance) and
// committing it; it reports whether every token was allowed and the text
// is complete, or that the file's time ran out first.
func (b *bench) runInstance(g *grammar.Grammar, toks []int32) (accepted, timedOut bool) {
	m := grammar.NewMasker(b.ix.Trie, g)
	st := g.Start()
	for _, tok := range toks {
		c0, cpuOK := threadCPU()
		t0 := time.Now()
		var ok bool
		if b.cfg.Reference {
			b.ix.Trie.Mask(st, b.allow)
			ok = b.allow[tok]
		} else {
			m.Mask(st, b.set)
			ok = b.set.Has(int(tok))
		}
		if ok {
			st, ok = st.AdvanceBytes(b.cfg.Tokenizer.Piece(tok))
		}
		now := time.Now()
		b.r.Mask = append(b.r.Mask, now.Sub(t0))
		if c1, ok := threadCPU(); ok && cpuOK {
			b.r.MaskCPU = append(b.r.MaskCPU, c1-c0)
		}
		b.r.Tokens++
		if !ok {
			return false, false
		}
		if b.deadline > 0 && elapsed() > b.deadline {
			return false, true
		}
	}
	return st.Accepting(), false
}

// refusalReason groups compile errors: the reason, without where in the
// schema, cut to its first clause.
func refusalReason(err error) string {
	msg := err.Error()
	var se *grammar.SchemaError
	if errors.As(err, &se) {
		msg = se.Reason
	}
	if i := strings.IndexAny(msg, ";("); i > 0 {
		msg = msg[:i]
	}
	if len(msg) > 80 {
		msg = msg[:80]
	}
	return strings.TrimSpace(msg)
}

// Table writes the report as docs/structured.md shows it.
func (r *Report) Table(w io.Writer) {
	us := func(x time.Duration) string { return fmt.Sprintf("%.1f µs", float64(x.Nanoseconds())/1e3) }
	fmt.Fprintf(w, "| schemas | %d |\n|---|---|\n", r.Files)
	fmt.Fprintf(w, "| compiled | %d |\n", r.Compiled)
	fmt.Fprintf(w, "| passing (compile, accept every valid instance, reject every invalid one) | %d |\n", r.Passing)
	fmt.Fprintf(w, "| timed out | %d |\n", r.Timeouts)
	fmt.Fprintf(w, "| valid instances accepted | %d / %d |\n", r.ValidAccepted, r.ValidTests)
	fmt.Fprintf(w, "| invalid instances rejected | %d / %d |\n", r.InvalidRejected, r.InvalidTests)
	fmt.Fprintf(w, "| tokens | %d |\n", r.Tokens)
	for _, row := range []struct {
		name string
		d    []time.Duration
	}{{"wall", r.Mask}, {"thread CPU", r.MaskCPU}} {
		if len(row.d) == 0 {
			continue
		}
		avg, p50, p99, mx := stats(row.d)
		fmt.Fprintf(w, "| mask per token (%s): average | %s |\n", row.name, us(avg))
		fmt.Fprintf(w, "| mask per token (%s): p50 / p99 / max | %s / %s / %s |\n", row.name, us(p50), us(p99), us(mx))
	}
	compileAvg := time.Duration(0)
	if r.Compiled > 0 {
		compileAvg = r.CompileTotal / time.Duration(r.Compiled)
	}
	fmt.Fprintf(w, "| compile, average (on the schemas it compiles) | %.2f ms |\n", float64(compileAvg.Microseconds())/1e3)
}

// stats is the average, median, 99th percentile and largest of d (not
// empty).
func stats(d []time.Duration) (avg, p50, p99, mx time.Duration) {
	d = slices.Clone(d)
	slices.Sort(d)
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	at := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	return sum / time.Duration(len(d)), at(0.5), at(0.99), d[len(d)-1]
}

// SourceTable writes each source's files, compiled and passing.
func (r *Report) SourceTable(w io.Writer) {
	names := make([]string, 0, len(r.Sources))
	for k := range r.Sources {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "| source | files | compiled | passing |\n|---|---|---|---|\n")
	for _, k := range names {
		t := r.Sources[k]
		fmt.Fprintf(w, "| %s | %d | %d | %d |\n", k, t.Files, t.Compiled, t.Passing)
	}
}

// TopRefusals writes the n most common compile errors.
func (r *Report) TopRefusals(w io.Writer, n int) {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range r.Refusals {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v || all[i].v == all[j].v && all[i].k < all[j].k })
	for _, x := range all[:min(n, len(all))] {
		fmt.Fprintf(w, "%6d  %s\n", x.v, x.k)
	}
}
