package cloud

import (
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/phaseless/phaseless/cloud/batch"
	"github.com/phaseless/phaseless/cloud/sim"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/cloudmodel"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/kvcache"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
	"github.com/phaseless/phaseless/transport/httpapi"
)

// kvBlockSize is the built-in engines' KV block size and the size the
// coordinator hashes prompts at, one value so prefix matching cannot drift.
const kvBlockSize = kvcache.DefaultBlockSize

// kvServer serves the KV handoff endpoints (worker.KVServer) on the
// built-in workers, so this cloud can be another coordinator's prefill or
// decode worker; nil when there are none.
func (c *Cloud) kvServer(workers []*worker.Worker, auth func(*http.Request) (string, error)) (http.Handler, error) {
	var builtin []*worker.Worker
	for _, w := range workers {
		if _, ok := w.Engine().(*worker.Builtin); ok {
			builtin = append(builtin, w)
		}
	}
	if len(builtin) == 0 {
		return nil, nil
	}
	return worker.NewKVServer(worker.KVServerConfig{Workers: builtin, Store: c.handoffs, Authenticate: auth})
}

// buildWorkers makes the built-in engines and the remote workers, and picks
// the tokenizer the coordinator measures prompts with.
func (c *Cloud) buildWorkers() ([]*worker.Worker, []*worker.Builtin, tokenizer.Tokenizer, error) {
	var (
		workers  []*worker.Worker
		builtins []*worker.Builtin
		tok      tokenizer.Tokenizer
	)
	fail := func(err error) ([]*worker.Worker, []*worker.Builtin, tokenizer.Tokenizer, error) {
		for _, w := range workers {
			w.Close()
		}
		return nil, nil, nil, err
	}
	nBuiltin, roles := c.cfg.builtins()
	if nBuiltin > 0 {
		model, err := c.loadModel()
		if err != nil {
			return fail(err)
		}
		tok = model.Tokenizer()
		threads := max(1, runtime.GOMAXPROCS(0)/nBuiltin)
		for i := 0; i < nBuiltin; i++ {
			eng, err := lm.NewEngine(model, lm.EngineConfig{Threads: threads, BlockSize: kvBlockSize, AgingRate: c.cfg.AgingRate, HostKV: c.cfg.HostKV})
			if err != nil {
				return fail(fmt.Errorf("built-in engine: %w", err))
			}
			// One store for every built-in engine: a handoff another
			// coordinator parks here resumes on whichever this coordinator picks.
			b := worker.NewBuiltinWithHandoffs(eng, c.handoffs)
			w, err := worker.New(worker.Config{
				Name: fmt.Sprintf("builtin-%d", i), Role: roles[i%len(roles)], Model: c.builtinModelName(),
				Batch: &batch.Config{Window: c.cfg.BatchWindow, MaxBatch: c.cfg.BatchMax},
			}, b)
			if err != nil {
				b.Close()
				return fail(err)
			}
			workers, builtins = append(workers, w), append(builtins, b)
		}
	}
	remotes, err := c.startSimWorkers()
	if err != nil {
		return fail(err)
	}
	for i, wu := range remotes {
		r, err := worker.NewRemote(worker.RemoteConfig{URL: wu.base, Model: wu.model, APIKey: wu.key})
		if err != nil {
			return fail(err)
		}
		role := roleCycle[(nBuiltin+i)%len(roleCycle)]
		if wu.hasRole {
			role = wu.role
		}
		w, err := worker.New(worker.Config{Name: fmt.Sprintf("remote-%d-%s", i, wu.host), Role: role, Capacity: wu.capacity, Class: wu.class(), Model: listedModel(wu.model)}, r)
		if err != nil {
			r.Close()
			return fail(err)
		}
		workers = append(workers, w)
	}
	if tok == nil {
		// Remote engines only: count and hash prompts byte-wise. The counts
		// are only the scheduler's estimate; the servers tokenize for real.
		var err error
		if tok, err = tokenizer.ByteSpec().Build(); err != nil {
			return fail(err)
		}
	}
	return workers, builtins, tok, nil
}

// remoteCharsPerToken is the coordinator's CharsPerToken: with no built-in
// engine the prompts are counted byte-wise (buildWorkers), and the remote
// servers' tokenizers cut about 4 characters a token (English, Llama-3
// style; cloud/sim's servers count so too).
func remoteCharsPerToken(builtins []*worker.Builtin) float64 {
	if len(builtins) == 0 {
		return 4
	}
	return 0
}

// builtinContext is the coordinator's ContextLen: the built-in engines'
// context when they are all the workers (a remote server's context is not
// known here), else 0.
func builtinContext(builtins []*worker.Builtin, workers int) int {
	if len(builtins) == 0 || len(builtins) != workers {
		return 0
	}
	return builtins[0].LM().Model().Config.ContextLen
}

// builtinModelName is how /v1/models lists the built-in engine's model:
// the file's base name, as the agent names its own, or the shipped one's.
func (c *Cloud) builtinModelName() string {
	if c.cfg.Model != "" {
		return strings.TrimSuffix(filepath.Base(c.cfg.Model), filepath.Ext(c.cfg.Model))
	}
	return cloudmodel.Name
}

// listedModel is a remote worker's model as /v1/models lists it: none for
// "auto", where the remote answers with whatever it serves.
func listedModel(m string) string {
	if m == "auto" {
		return ""
	}
	return m
}

// listModels is GET /v1/models beyond "auto": the workers' models, the
// built-in one with the sampling it declares. A name not listed is a 404,
// as on the agent.
func (c *Cloud) listModels() []httpapi.Model {
	var out []httpapi.Model
	for _, m := range c.coord.Models() {
		hm := httpapi.Model{ID: m, OwnedBy: "phaseless"}
		if m == c.builtinModelName() {
			hm.Sampling = c.builtinSampling
		}
		out = append(out, hm)
	}
	return out
}

// loadModel loads --model, or the shipped cloud model (models/cloudmodel).
func (c *Cloud) loadModel() (*lm.Model, error) {
	if c.cfg.Model != "" {
		m, err := lm.Load(c.cfg.Model)
		if err != nil {
			return nil, &cli.FieldError{Field: "Model", Err: err}
		}
		return m, nil
	}
	return cloudmodel.Open()
}

// startSimWorkers starts the simulated GPU servers of every sim:// worker
// (cloud/sim) and returns the worker list with each replaced by its
// servers' loopback URLs: the coordinator then drives them as it drives
// real vLLM servers, over HTTP, reading their vLLM metrics.
func (c *Cloud) startSimWorkers() ([]WorkerURL, error) {
	var out []WorkerURL
	for _, wu := range c.cfg.Workers {
		if wu.sim == nil {
			out = append(out, wu)
			continue
		}
		f, err := sim.StartFleet(wu.raw)
		if err != nil {
			return nil, err
		}
		c.sims = append(c.sims, f)
		for _, u := range f.URLs() {
			out = append(out, WorkerURL{raw: u, base: u, host: strings.TrimPrefix(u, "http://"),
				role: wu.sim.Role, hasRole: wu.sim.HasRole, model: wu.sim.Model.Name, gpu: wu.sim.GPU.Name, tp: wu.sim.TP})
		}
	}
	return out, nil
}
