package ctl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/gguf"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// `lm` drives the built-in engine (models/lm): make a random model of a given
// shape, generate from a model, print logits for cross-checking against other
// implementations, and benchmark. `lm train` (lmtrain.go) joins this command.
func init() {
	register(&cli.Command{Name: "lm", Summary: "built-in language models: init, generate, tokenize, logits, bench, train", Subcommands: []*cli.Command{
		{Name: "init", Summary: "write a random-weight model (llama, qwen2, qwen3) of a given shape and vocabulary as GGUF", Run: lmInit},
		{Name: "tokenize", Summary: "print the token ids of each JSON string read from stdin, one line each", Run: lmTokenize},
		{Name: "generate", Summary: "stream a completion from a GGUF model", Run: lmGenerate},
		{Name: "logits", Summary: "print final-position logits for token ids as a JSON array", Run: lmLogits},
		{Name: "bench", Summary: "decode tok/s per batch size, prefill tok/s, TTFT cached vs uncached", Run: lmBench},
		{Name: "quantize", Summary: "rewrite a GGUF model with quantized tensors (q8_0, q6_k, q4_k_m, …)", Run: lmQuantize},
		{Name: "toolprior", Summary: "train the tool prior on a preset's corpus and write a model file carrying it", Run: lmToolPrior},
		{Name: "sampling", Summary: "write a model file again declaring the sampling for requests that omit theirs (general.sampling.*)", Run: lmSampling},
		{Name: "maskbench", Summary: "run JSONSchemaBench's MaskBench (schemas, valid/invalid instances, mask µs) on a data set directory", Run: lmMaskBench},
	}})
}

// lmParseFlags parses args, printing usage for --help (returned as done=true).
func lmParseFlags(fs *flag.FlagSet, cio cli.IO, args []string, usage string) (done bool, err error) {
	if err := cli.Parse(fs, args, cio.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			cli.PrintUsage(cio.Stdout, fs, usage)
			return true, nil
		}
		return false, fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	return false, nil
}

func lmInit(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("lm init", flag.ContinueOnError)
	out := fs.String("out", "", "GGUF file to write")
	var c lm.Config
	fs.IntVar(&c.Layers, "layers", 4, "transformer blocks")
	fs.IntVar(&c.Dim, "dim", 256, "embedding width")
	fs.IntVar(&c.Heads, "heads", 8, "query heads")
	fs.IntVar(&c.KVHeads, "kv-heads", 0, "key/value heads (0 = heads)")
	fs.IntVar(&c.FFN, "ffn", 0, "MLP hidden width (0 = 8/3·dim rounded up to 32)")
	fs.IntVar(&c.Vocab, "vocab", 258, "vocabulary size (at least 258: bytes, BOS, EOS)")
	fs.IntVar(&c.ContextLen, "ctx", 1024, "context length")
	fs.Float64Var(&c.RopeTheta, "rope-theta", 10000, "RoPE base")
	fs.StringVar(&c.Arch, "arch", lm.ArchLlama, "architecture: llama, qwen2 (QKV bias) or qwen3 (per-head Q/K norm)")
	fs.IntVar(&c.HeadSize, "head-dim", 0, "attention head width when not dim/heads (qwen3 models; 0 = dim/heads)")
	ropeScale := fs.Float64("rope-scaling-factor", 0, "Llama 3 RoPE scaling factor (0 = none), written as rope_freqs.weight")
	ropeLow := fs.Float64("rope-scaling-low-freq", 1, "Llama 3 RoPE scaling low_freq_factor")
	ropeHigh := fs.Float64("rope-scaling-high-freq", 4, "Llama 3 RoPE scaling high_freq_factor")
	ropeOrig := fs.Int("rope-scaling-orig-ctx", 8192, "Llama 3 RoPE scaling original_max_position_embeddings")
	tied := fs.Bool("tied", false, "tie the output head to the embedding (no output.weight)")
	tokJSON := fs.String("tokenizer", "", "Hugging Face tokenizer.json to carry as the vocabulary (default: the byte vocabulary)")
	tokCfg := fs.String("tokenizer-config", "", "its tokenizer_config.json (BOS/EOS, add_bos_token, chat template)")
	dtype := fs.String("dtype", "f32", "tensor storage: f32, f16, bf16, q8_0, q6_k, q4_k, …, or the q4_k_m / q5_k_m mixes")
	seed := fs.Uint64("seed", 1, "random seed")
	sf := addSamplingFlags(fs)
	if done, err := lmParseFlags(fs, cio, args, "lm init --out F [--layers L --dim D --heads H --kv-heads K --ffn F --vocab V --ctx C --dtype f32|f16|bf16|q8_0|q6_k|q4_k_m|… --seed S "+
		"--arch llama|qwen2|qwen3 --head-dim N --tied --rope-scaling-factor X --tokenizer tokenizer.json --tokenizer-config tokenizer_config.json --sampling-temp T --sampling-top-p P --sampling-top-k K]"); done || err != nil {
		return err
	}
	sampling, err := sf.sampling(llm.Sampling{})
	if err != nil {
		return err
	}
	if *out == "" {
		return &cli.FieldError{Field: "out", Err: errors.New("required")}
	}
	if *tokCfg != "" && *tokJSON == "" {
		return &cli.FieldError{Field: "tokenizer-config", Err: errors.New("needs --tokenizer")}
	}
	if c.Arch == lm.ArchLlama {
		c.Arch = "" // the zero value every llama Config spells
	}
	var tok tokenizer.Spec
	if *tokJSON != "" {
		var err error
		if tok, err = readHFTokenizer(*tokJSON, *tokCfg); err != nil {
			return &cli.FieldError{Field: "tokenizer", Err: err}
		}
		vocabSet := false
		fs.Visit(func(f *flag.Flag) { vocabSet = vocabSet || f.Name == "vocab" })
		if vocabSet && c.Vocab != len(tok.Tokens) {
			return &cli.FieldError{Field: "vocab", Err: fmt.Errorf("%d, but %s has %d tokens", c.Vocab, *tokJSON, len(tok.Tokens))}
		}
		c.Vocab = len(tok.Tokens)
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.FFN == 0 {
		c.FFN = (c.Dim*8/3 + 31) / 32 * 32
	}
	dt, err := lm.ParseRecipe(*dtype)
	if err != nil {
		return &cli.FieldError{Field: "dtype", Err: err}
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if *tokJSON == "" {
		if tok, err = tokenizer.PaddedByteSpec(c.Vocab); err != nil {
			return &cli.FieldError{Field: "vocab", Err: err}
		}
	}
	w, err := lm.RandomWeights(c, *seed)
	if err != nil {
		return err
	}
	if *tied {
		w.Output = nil
	}
	if *ropeScale != 0 {
		if w.RopeFreqs, err = lm.Llama3RopeFreqs(c, *ropeScale, *ropeLow, *ropeHigh, *ropeOrig); err != nil {
			return &cli.FieldError{Field: "rope-scaling-factor", Err: err}
		}
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	meta := lm.SamplingMeta(sampling)
	meta["general.name"], meta["phaseless.seed"] = "random", *seed
	if err := lm.WriteGGUFRecipe(f, c, tok, w, meta, dt); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	st, _ := os.Stat(*out)
	arch := c.Arch
	if arch == "" {
		arch = lm.ArchLlama
	}
	fmt.Fprintf(cio.Stdout, "wrote %s: %s, %d layers, dim %d, %d/%d heads, ffn %d, vocab %d (%s), ctx %d, %s, %.1f MB\n",
		*out, arch, c.Layers, c.Dim, c.Heads, c.KVHeads, c.FFN, c.Vocab, tok.Model, c.ContextLen, dt.Name, float64(st.Size())/1e6)
	return nil
}

// loadModelFlag loads the model --model names.
func loadModelFlag(path string) (*lm.Model, error) {
	if path == "" {
		return nil, &cli.FieldError{Field: "model", Err: errors.New("required")}
	}
	return lm.Load(path)
}

// readHFTokenizer reads tokenizer.json and, when named, tokenizer_config.json.
func readHFTokenizer(tokPath, cfgPath string) (tokenizer.Spec, error) {
	tj, err := os.ReadFile(tokPath)
	if err != nil {
		return tokenizer.Spec{}, err
	}
	var cj []byte
	if cfgPath != "" {
		if cj, err = os.ReadFile(cfgPath); err != nil {
			return tokenizer.Spec{}, err
		}
	}
	return tokenizer.ReadHF(tj, cj)
}

// lmTokenize prints, for each line of stdin (a JSON string), that string's
// token ids space-separated (no BOS), as a reference tokenizer would, so the
// engine's tokenizer can be compared with others line by line.
func lmTokenize(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("lm tokenize", flag.ContinueOnError)
	model := fs.String("model", "", "GGUF model file")
	special := fs.Bool("special", false, "parse special-token text (<|im_start|>) as those tokens")
	if done, err := lmParseFlags(fs, cio, args, "lm tokenize --model F [--special] < lines-of-json-strings"); done || err != nil {
		return err
	}
	m, err := loadModelFlag(*model)
	if err != nil {
		return err
	}
	tok := m.Tokenizer()
	sc := bufio.NewScanner(cio.Stdin)
	sc.Buffer(nil, 64<<20)
	w := bufio.NewWriter(cio.Stdout)
	for n := 1; sc.Scan(); n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		var text string
		if err := json.Unmarshal(sc.Bytes(), &text); err != nil {
			return fmt.Errorf("%w: stdin line %d is not a JSON string: %v", cli.ErrUsage, n, err)
		}
		for i, id := range tok.Tokenize(text, *special) {
			if i > 0 {
				w.WriteByte(' ')
			}
			w.WriteString(strconv.Itoa(int(id)))
		}
		w.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return w.Flush()
}

func lmGenerate(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("lm generate", flag.ContinueOnError)
	model := fs.String("model", "", "GGUF model file")
	prompt := fs.String("prompt", "", "user message (rendered with the chat template unless --raw)")
	raw := fs.Bool("raw", false, "feed the prompt as plain text, without the chat template and its stop")
	maxTokens := fs.Int("max-tokens", 128, "tokens to generate at most")
	temp := fs.Float64("temperature", 0, "sampling temperature (0 = greedy)")
	topK := fs.Int("top-k", 0, "top-k sampling (0 = off)")
	topP := fs.Float64("top-p", 0, "top-p sampling (0 = off)")
	seed := fs.Uint64("seed", 0, "sampling seed (0 = random)")
	threads := fs.Int("threads", 0, "compute threads (0 = all cores)")
	if done, err := lmParseFlags(fs, cio, args, `lm generate --model F --prompt "..." [--max-tokens N --temperature T --top-k K --top-p P --seed S --raw]`); done || err != nil {
		return err
	}
	m, err := loadModelFlag(*model)
	if err != nil {
		return err
	}
	e, err := lm.NewEngine(m, lm.EngineConfig{Threads: *threads, MaxBatch: 1})
	if err != nil {
		return err
	}
	defer e.Close()
	emit := func(t llm.Token) error {
		_, err := fmt.Fprint(cio.Stdout, t.Text)
		return err
	}
	start := time.Now()
	req := &llm.Request{MaxTokens: *maxTokens, Temperature: *temp, TopK: *topK, TopP: *topP, Seed: *seed}
	if *raw {
		req.Raw, req.Prompt = true, *prompt
	} else {
		req.Messages = []llm.Message{{Role: "user", Content: *prompt}}
	}
	fin, err := e.Generate(ctx, req, emit)
	fmt.Fprintln(cio.Stdout)
	if err != nil {
		return err
	}
	el := time.Since(start)
	fmt.Fprintf(cio.Stderr, "%d prompt + %d generated tokens, finish %s, TTFT %v, %.1f tok/s\n",
		fin.PromptTokens, fin.CompletionTokens, fin.FinishReason, fin.TTFT.Round(time.Microsecond),
		float64(fin.CompletionTokens)/el.Seconds())
	return nil
}

func lmLogits(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("lm logits", flag.ContinueOnError)
	model := fs.String("model", "", "GGUF model file")
	tokens := fs.String("tokens", "", "comma-separated token ids, e.g. 1,2,3")
	if done, err := lmParseFlags(fs, cio, args, "lm logits --model F --tokens 1,2,3"); done || err != nil {
		return err
	}
	if *model == "" {
		return &cli.FieldError{Field: "model", Err: errors.New("required")}
	}
	ids, err := parseIDs(*tokens)
	if err != nil {
		return &cli.FieldError{Field: "tokens", Err: err}
	}
	m, err := lm.Load(*model)
	if err != nil {
		return err
	}
	if err := m.ValidateTokens(ids); err != nil {
		return &cli.FieldError{Field: "tokens", Err: err}
	}
	return json.NewEncoder(cio.Stdout).Encode(m.Logits(ids))
}

func parseIDs(s string) ([]int32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("required")
	}
	var out []int32
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q is not a token id", f)
		}
		out = append(out, int32(n))
	}
	return out, nil
}

func lmBench(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("lm bench", flag.ContinueOnError)
	model := fs.String("model", "", "GGUF model file, or several separated by commas (measured in one run, interleaved)")
	batches := fs.String("batch", "1,4,16", "decode batch sizes")
	tokens := fs.Int("tokens", 64, "tokens generated per sequence")
	promptLen := fs.Int("prompt-len", 512, "prompt length for prefill and TTFT")
	shared := fs.Float64("shared", 0.9, "fraction of the TTFT prompt already cached")
	threads := fs.Int("threads", 0, "compute threads (0 = all cores)")
	repeats := fs.Int("repeats", 3, "interleaved repeats of each measurement (the best is kept)")
	copyMB := fs.Int("copy-mb", 256, "size of the memory copy that measures bandwidth, MiB")
	if done, err := lmParseFlags(fs, cio, args, "lm bench --model F[,G,…] [--batch 1,4,16 --tokens N --prompt-len N --shared 0.9 --repeats 3]"); done || err != nil {
		return err
	}
	if *model == "" {
		return &cli.FieldError{Field: "model", Err: errors.New("required")}
	}
	ids, err := parseIDs(*batches)
	if err != nil {
		return &cli.FieldError{Field: "batch", Err: err}
	}
	if *shared <= 0 || *shared >= 1 {
		return &cli.FieldError{Field: "shared", Err: fmt.Errorf("%v is not in (0, 1)", *shared)}
	}
	if *copyMB <= 0 {
		return &cli.FieldError{Field: "copy-mb", Err: fmt.Errorf("%d is not positive", *copyMB)}
	}
	if *repeats <= 0 {
		return &cli.FieldError{Field: "repeats", Err: fmt.Errorf("%d is not positive", *repeats)}
	}
	paths := strings.Split(*model, ",")
	var models []*lm.Model
	var fileBytes, loadRSS, touchedRSS []int64
	for _, p := range paths {
		before := lm.ResidentBytes()
		m, err := lm.Load(p)
		if err != nil {
			return err
		}
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		loaded := lm.ResidentBytes()
		m.Logits([]int32{0}) // one forward pass reads every weight matrix
		models = append(models, m)
		fileBytes = append(fileBytes, st.Size())
		loadRSS = append(loadRSS, loaded-before)
		touchedRSS = append(touchedRSS, lm.ResidentBytes()-before)
	}
	cfg := lm.BenchConfig{DecodeTokens: *tokens, PromptLen: *promptLen, Shared: *shared, Threads: *threads, CopyBytes: *copyMB << 20, Repeats: *repeats}
	for _, b := range ids {
		cfg.Batches = append(cfg.Batches, int(b))
	}
	rs, err := lm.BenchModels(ctx, models, cfg)
	if err != nil {
		return err
	}
	for i, m := range models {
		r, c := rs[i], m.Config
		fmt.Fprintf(cio.Stdout, "model %s: %d layers, dim %d, %d/%d heads, ffn %d, vocab %d, %s, weights %.1f MB\n",
			paths[i], c.Layers, c.Dim, c.Heads, c.KVHeads, c.FFN, c.Vocab, m.TensorTypes(), float64(r.WeightBytes)/1e6)
		fmt.Fprintf(cio.Stdout, "  file %.1f MB, memory-mapped %v, RSS grew %.1f MB at load, %.1f MB once a forward pass touched every matrix\n",
			float64(fileBytes[i])/1e6, m.Mapped, float64(loadRSS[i])/1e6, float64(touchedRSS[i])/1e6)
		for _, d := range r.Decode {
			fmt.Fprintf(cio.Stdout, "  decode batch %3d: %8.1f tok/s (%.2f× batch 1), %8.1f tok per CPU-second (%.2f×)\n",
				d.Batch, d.TokensPerSec, r.Speedup(d.Batch), d.TokensPerCPUSec, r.CPUSpeedup(d.Batch))
		}
		fmt.Fprintf(cio.Stdout, "  prefill: %.1f tok/s, %.1f tok per CPU-second (%d-token prompt)\n", r.PrefillTokensPerSec, r.PrefillTokensPerCPUSec, min(*promptLen, c.ContextLen-2))
		fmt.Fprintf(cio.Stdout, "  TTFT uncached %v, cached %v with %d prompt tokens in cache (ratio %.3f)\n",
			r.TTFTUncached.Round(time.Microsecond), r.TTFTCached.Round(time.Microsecond), r.CachedPromptTokens, float64(r.TTFTCached)/float64(r.TTFTUncached))
		fmt.Fprintf(cio.Stdout, "  batch-1 decode reads %.2f GB/s of weights = %.0f%% of a memory copy's %.2f GB/s (read+write), %.0f%% of the %.2f GB/s a bare F32 matrix-vector product streams\n",
			r.Decode[0].TokensPerSec*float64(r.WeightBytes)/1e9, 100*r.SingleStreamFraction, r.CopyBytesPerSec/1e9,
			100*r.SingleStreamReadFraction, r.ReadBytesPerSec/1e9)
	}
	if len(models) > 1 {
		fmt.Fprintf(cio.Stdout, "%-32s %12s %8s %12s %8s %12s %8s\n", "model (ratios: to the first)", "decode b1", "ratio", "per CPU-s", "ratio", "prefill/CPU-s", "ratio")
		for i, r := range rs {
			d, d0 := r.Decode[0], rs[0].Decode[0]
			fmt.Fprintf(cio.Stdout, "%-32s %12.1f %7.2f× %12.1f %7.2f× %12.1f %7.2f×\n", paths[i], d.TokensPerSec, d.TokensPerSec/d0.TokensPerSec,
				d.TokensPerCPUSec, d.TokensPerCPUSec/d0.TokensPerCPUSec, r.PrefillTokensPerCPUSec, r.PrefillTokensPerCPUSec/rs[0].PrefillTokensPerCPUSec)
		}
	}
	return nil
}

func lmQuantize(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("lm quantize", flag.ContinueOnError)
	in := fs.String("in", "", "GGUF model to read (any supported tensor types)")
	out := fs.String("out", "", "GGUF file to write")
	typ := fs.String("type", "q4_k_m", "q4_k_m, q5_k_m, or a uniform type: q8_0, q6_k, q5_k, q4_k, q3_k, q2_k, q5_0, q5_1, q4_0, q4_1, bf16, f16, f32")
	if done, err := lmParseFlags(fs, cio, args, "lm quantize --in F --out G [--type q4_k_m|q8_0|q6_k|…]"); done || err != nil {
		return err
	}
	if *in == "" {
		return &cli.FieldError{Field: "in", Err: errors.New("required")}
	}
	if *out == "" {
		return &cli.FieldError{Field: "out", Err: errors.New("required")}
	}
	r, err := lm.ParseRecipe(*typ)
	if err != nil {
		return &cli.FieldError{Field: "type", Err: err}
	}
	src, err := os.Open(*in)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	f, err := gguf.Read(src, st.Size())
	if err != nil {
		return fmt.Errorf("read %s: %w", *in, err)
	}
	dst, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := lm.Quantize(dst, f, r); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	m, err := lm.Load(*out)
	if err != nil {
		return fmt.Errorf("reload %s: %w", *out, err)
	}
	ost, _ := os.Stat(*out)
	fmt.Fprintf(cio.Stdout, "wrote %s: %s, %.1f MB (from %.1f MB), tensors %s\n", *out, r.Name, float64(ost.Size())/1e6, float64(st.Size())/1e6, m.TensorTypes())
	return nil
}
