package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Hugging Face tokenizer files, read into a Spec the way llama.cpp's
// convert_hf_to_gguf.py does it for byte-level BPE models, so that a model
// written with the spec tokenizes as llama.cpp and Hugging Face do.

type hfTokenizerJSON struct {
	AddedTokens []struct {
		ID      int64  `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         struct {
		Type         string           `json:"type"`
		Vocab        map[string]int64 `json:"vocab"`
		Merges       json.RawMessage  `json:"merges"`
		ByteFallback bool             `json:"byte_fallback"`
	} `json:"model"`
}

type hfPreTokenizer struct {
	Type          string           `json:"type"`
	Pretokenizers []hfPreTokenizer `json:"pretokenizers"`
	Pattern       struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior         string `json:"behavior"`
	Invert           bool   `json:"invert"`
	AddPrefixSpace   bool   `json:"add_prefix_space"`
	UseRegex         *bool  `json:"use_regex"`
	IndividualDigits bool   `json:"individual_digits"`
}

// maxHFVocab bounds token ids read from a tokenizer.json before the token
// table is allocated (the largest real vocabularies have about 260k).
const maxHFVocab = 1 << 22

// ReadHF reads a Hugging Face tokenizer.json (and, when config is
// not nil, its tokenizer_config.json: BOS/EOS, add_bos_token, chat template)
// as a byte-level BPE vocabulary. Vocabulary tokens are normal tokens; added
// tokens are control tokens when special (or spelt <|…|>, as llama.cpp's
// converter decides) and user-defined otherwise. Ids the files leave unused
// become unused "[PADn]" tokens. Without a bos_token (Qwen), BOS is set to
// EOS and never added.
func ReadHF(tokenizerJSON, config []byte) (Spec, error) {
	var spec Spec
	var tj hfTokenizerJSON
	if err := json.Unmarshal(tokenizerJSON, &tj); err != nil {
		return spec, fmt.Errorf("tokenizer.json: %w", err)
	}
	if tj.Model.Type != "BPE" {
		return spec, fmt.Errorf("tokenizer.json: model type %q is not supported (want BPE)", tj.Model.Type)
	}
	if tj.Model.ByteFallback {
		return spec, errors.New("tokenizer.json: BPE with byte_fallback (SentencePiece-style) is not supported")
	}
	pre, err := hfPre(tj.PreTokenizer)
	if err != nil {
		return spec, err
	}
	spec = Spec{Model: ModelGPT2, Pre: pre, UNK: -1, EOT: -1, Merges: []string{}}
	if spec.Merges, err = hfMerges(tj.Model.Merges); err != nil {
		return spec, err
	}
	n := int64(0)
	for t, id := range tj.Model.Vocab {
		if id < 0 || id >= maxHFVocab {
			return spec, fmt.Errorf("tokenizer.json: token %q has id %d", t, id)
		}
		n = max(n, id+1)
	}
	for _, a := range tj.AddedTokens {
		if a.ID < 0 || a.ID >= maxHFVocab {
			return spec, fmt.Errorf("tokenizer.json: added token %q has id %d", a.Content, a.ID)
		}
		n = max(n, a.ID+1)
	}
	if n == 0 {
		return spec, errors.New("tokenizer.json: empty vocabulary")
	}
	// Real files number their tokens densely; a few holes become [PADn],
	// but ids far beyond the token count would only allocate padding.
	if listed := int64(len(tj.Model.Vocab) + len(tj.AddedTokens)); n > 2*listed+1024 {
		return spec, fmt.Errorf("tokenizer.json: ids up to %d for %d tokens", n-1, listed)
	}
	spec.Tokens = make([]string, n)
	spec.Types = make([]int32, n)
	for t, id := range tj.Model.Vocab {
		if spec.Types[id] != 0 {
			return spec, fmt.Errorf("tokenizer.json: id %d is both %q and %q", id, spec.Tokens[id], t)
		}
		spec.Tokens[id], spec.Types[id] = t, TokenNormal
	}
	ids := map[string]int32{}
	for _, a := range tj.AddedTokens {
		typ := TokenUserDefined
		if a.Special || strings.HasPrefix(a.Content, "<|") && strings.HasSuffix(a.Content, "|>") {
			typ = TokenControl
		}
		spec.Tokens[a.ID], spec.Types[a.ID] = a.Content, typ
		ids[a.Content] = int32(a.ID)
	}
	for i := range spec.Tokens {
		if spec.Types[i] == 0 {
			spec.Tokens[i], spec.Types[i] = fmt.Sprintf("[PAD%d]", i), TokenUnused
		}
		if _, ok := ids[spec.Tokens[i]]; !ok {
			ids[spec.Tokens[i]] = int32(i)
		}
	}

	var cfg struct {
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
		AddBOS       *bool           `json:"add_bos_token"`
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if config != nil {
		if err := json.Unmarshal(config, &cfg); err != nil {
			return spec, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	tokenID := func(field string, raw json.RawMessage) (int32, bool, error) {
		text, err := hfTokenText(raw)
		if err != nil || text == "" {
			return -1, false, err
		}
		id, ok := ids[text]
		if !ok {
			return -1, false, fmt.Errorf("tokenizer_config.json: %s %q is not in the vocabulary", field, text)
		}
		return id, true, nil
	}
	bos, haveBOS, err := tokenID("bos_token", cfg.BOS)
	if err != nil {
		return spec, err
	}
	eos, haveEOS, err := tokenID("eos_token", cfg.EOS)
	if err != nil {
		return spec, err
	}
	if !haveEOS {
		// No config: the usual end-of-text tokens, as llama.cpp guesses them.
		for _, t := range []string{"<|endoftext|>", "<|end_of_text|>", "</s>"} {
			if id, ok := ids[t]; ok {
				eos, haveEOS = id, true
				break
			}
		}
		if !haveEOS {
			return spec, errors.New("tokenizer: no eos_token in tokenizer_config.json and no <|endoftext|> token")
		}
	}
	spec.EOS = eos
	spec.BOS = eos
	if haveBOS {
		spec.BOS = bos
	}
	switch {
	case cfg.AddBOS != nil:
		spec.AddBOS = *cfg.AddBOS && haveBOS
	default:
		// The post-processor puts BOS in front when it is a template with it.
		spec.AddBOS = haveBOS && hfPostAddsBOS(tj.PostProcessor, spec.Tokens[bos])
	}
	// The end-of-turn token, when the turn ends differently from the text.
	for _, t := range []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"} {
		if id, ok := ids[t]; ok && id != eos {
			spec.EOT = id
			break
		}
	}
	if spec.ChatTemplate, err = hfChatTemplate(cfg.ChatTemplate); err != nil {
		return spec, err
	}
	if err := spec.Validate(len(spec.Tokens)); err != nil {
		return spec, err
	}
	return spec, nil
}

// hfPre names the llama.cpp pre-tokenizer a tokenizer.json pre_tokenizer is.
func hfPre(raw json.RawMessage) (string, error) {
	var p hfPreTokenizer
	if len(raw) == 0 || string(raw) == "null" {
		return "", errors.New("tokenizer.json: no pre_tokenizer (a byte-level BPE vocabulary needs one)")
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return "", fmt.Errorf("tokenizer.json: pre_tokenizer: %w", err)
	}
	byteLevel := func(p hfPreTokenizer, regex bool) bool {
		return p.Type == "ByteLevel" && !p.AddPrefixSpace && (p.UseRegex == nil || *p.UseRegex) == regex
	}
	switch {
	case byteLevel(p, true):
		return PreGPT2, nil
	case p.Type == "Sequence" && len(p.Pretokenizers) == 2:
		a, b := p.Pretokenizers[0], p.Pretokenizers[1]
		if a.Type == "Digits" && a.IndividualDigits && byteLevel(b, true) {
			return PreSmolLM, nil
		}
		if a.Type == "Split" && a.Pattern.Regex != nil && a.Behavior == "Isolated" && !a.Invert && byteLevel(b, false) {
			switch *a.Pattern.Regex {
			case regexLlama3:
				return PreLlama3, nil
			case regexQwen2:
				return PreQwen2, nil
			case regexGPT2, regexGPT2LCPP:
				return PreGPT2, nil
			}
			return "", fmt.Errorf("tokenizer.json: pre-tokenizer regex %q is not one this engine implements", *a.Pattern.Regex)
		}
	}
	return "", fmt.Errorf("tokenizer.json: pre_tokenizer %s is not one this engine implements (Llama 3, Qwen 2, GPT-2, SmolLM)", truncate(string(raw), 200))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// hfMerges reads model.merges in either spelling: "a b" strings (older
// files) or [a, b] pairs (tokenizers ≥ 0.20).
func hfMerges(raw json.RawMessage) ([]string, error) {
	out := []string{}
	if len(raw) == 0 || string(raw) == "null" {
		return out, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("tokenizer.json: merges: %w", err)
	}
	out = make([]string, 0, len(items))
	for i, it := range items {
		var s string
		if err := json.Unmarshal(it, &s); err == nil {
			if _, _, ok := parseMerge(s); !ok {
				return nil, fmt.Errorf("tokenizer.json: merge %d is %q, want \"left right\"", i, s)
			}
			out = append(out, s)
			continue
		}
		var pair []string
		if err := json.Unmarshal(it, &pair); err != nil || len(pair) != 2 {
			return nil, fmt.Errorf("tokenizer.json: merge %d is %s, want a string or a pair", i, truncate(string(it), 80))
		}
		m := pair[0] + " " + pair[1]
		if _, _, ok := parseMerge(m); !ok {
			return nil, fmt.Errorf("tokenizer.json: merge %d %q cannot be stored (a side is empty or has a space)", i, pair)
		}
		out = append(out, m)
	}
	return out, nil
}

// hfTokenText reads a tokenizer_config token: a string, {"content": …} or null.
func hfTokenText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var o struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", fmt.Errorf("tokenizer_config.json: token %s: %w", truncate(string(raw), 80), err)
	}
	return o.Content, nil
}

// hfChatTemplate reads chat_template: a string, or a list of named
// templates of which "default" (else the first) is the chat one.
func hfChatTemplate(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("tokenizer_config.json: chat_template: %w", err)
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	if len(named) > 0 {
		return named[0].Template, nil
	}
	return "", nil
}

// hfPostAddsBOS reports whether a post_processor prepends bos: a
// TemplateProcessing (alone or in a Sequence) whose single template starts
// with it.
func hfPostAddsBOS(raw json.RawMessage, bos string) bool {
	type piece struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
	}
	type post struct {
		Type       string  `json:"type"`
		Single     []piece `json:"single"`
		Processors []post  `json:"processors"`
	}
	var p post
	if len(raw) == 0 || json.Unmarshal(raw, &p) != nil {
		return false
	}
	all := append([]post{p}, p.Processors...)
	for _, q := range all {
		if q.Type == "TemplateProcessing" && len(q.Single) > 0 && q.Single[0].SpecialToken != nil && q.Single[0].SpecialToken.ID == bos {
			return true
		}
	}
	return false
}
