// Package chattmpl renders a model's own chat template (GGUF
// tokenizer.chat_template, a Hugging Face Jinja template) into the prompt
// text the model was trained on, with gonja, a Go implementation of Jinja.
//
// Rendering follows what Hugging Face transformers' apply_chat_template
// gives a template: trim_blocks and lstrip_blocks on, the variables
// messages (role, content), add_generation_prompt, bos_token and eos_token,
// and the raise_exception function. A template comes from a model file, so it
// is sandboxed the ways that matter here: it cannot include or import other
// templates (no file system), and its output is bounded.
package chattmpl

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"

	"github.com/phaseless/phaseless/llm"
)

// MaxOutput bounds a rendered prompt (1 MiB is far beyond any context the
// engine runs): a template that loops without end fails instead of eating
// memory.
const MaxOutput = 1 << 20

// Template is a parsed chat template; Render is safe for concurrent use.
type Template struct {
	mu       sync.Mutex // gonja's evaluator is not documented as goroutine-safe
	tpl      *exec.Template
	bos, eos string
	limit    int // MaxOutput; tests lower it
}

// rootName is the only template name the loader serves.
const rootName = "chat_template"

// Parse compiles src. bos and eos are the texts of the vocabulary's BOS and
// EOS tokens, which templates print as bos_token and eos_token.
func Parse(src, bos, eos string) (*Template, error) {
	cfg := config.New()
	cfg.TrimBlocks, cfg.LeftStripBlocks = true, true
	env := &exec.Environment{
		Context: exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables).Update(exec.NewContext(map[string]any{
			"raise_exception": raiseException,
		})),
		Filters:           builtins.Filters,
		Tests:             builtins.Tests,
		ControlStructures: builtins.ControlStructures,
		Methods:           builtins.Methods,
	}
	tpl, err := exec.NewTemplate(rootName, cfg, &oneTemplate{src: src}, env)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return &Template{tpl: tpl, bos: bos, eos: eos, limit: MaxOutput}, nil
}

// Render renders msgs; with addGenerationPrompt the text ends where the
// assistant's reply begins.
func (t *Template) Render(msgs []llm.Message, addGenerationPrompt bool) (string, error) {
	ms := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		ms[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	ctx := exec.NewContext(map[string]any{
		"messages":              ms,
		"add_generation_prompt": addGenerationPrompt,
		"bos_token":             t.bos,
		"eos_token":             t.eos,
	})
	var buf bytes.Buffer
	t.mu.Lock()
	err := t.tpl.Execute(&limitWriter{w: &buf, n: t.limit}, ctx)
	t.mu.Unlock()
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return buf.String(), nil
}

// raiseException is Hugging Face's raise_exception(message): templates call
// it to refuse conversations they cannot render (a role they do not know).
func raiseException(_ *exec.Evaluator, params *exec.VarArgs) (*exec.Value, error) {
	var parts []string
	for _, a := range params.Args {
		parts = append(parts, a.String())
	}
	return nil, fmt.Errorf("template raised: %s", strings.Join(parts, " "))
}

var errTooLong = errors.New("rendered prompt too long")

type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if len(p) > l.n {
		return 0, errTooLong
	}
	l.n -= len(p)
	return l.w.Write(p)
}

// oneTemplate is a loader holding only the chat template itself, so
// {% include %}, {% import %} and {% extends %} find nothing.
type oneTemplate struct{ src string }

var errNoLoad = errors.New("chat templates cannot load other templates")

func (o *oneTemplate) Read(path string) (io.Reader, error) {
	if path != rootName {
		return nil, errNoLoad
	}
	return strings.NewReader(o.src), nil
}

func (o *oneTemplate) Resolve(path string) (string, error) {
	if path != rootName {
		return "", errNoLoad
	}
	return path, nil
}

func (o *oneTemplate) Inherit(string) (loaders.Loader, error) { return o, nil }
