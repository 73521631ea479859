package lm

import (
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// chatRenderer renders a conversation with a model's own chat template
// (models/lm/chattmpl, unless the build leaves Jinja out: chat_nojinja.go).
type chatRenderer interface {
	Render(msgs []llm.Message, addGenerationPrompt bool) (string, error)
}

// parseChatTemplate compiles the vocabulary's chat template, if it has one
// and this build renders templates.
func parseChatTemplate(spec tokenizer.Spec) (chatRenderer, error) {
	if spec.ChatTemplate == "" {
		return nil, nil
	}
	text := func(id int32) string {
		if id >= 0 && int(id) < len(spec.Tokens) {
			return spec.Tokens[id]
		}
		return ""
	}
	bos := ""
	if spec.AddBOS || spec.BOS != spec.EOS {
		bos = text(spec.BOS)
	}
	return compileChatTemplate(spec.ChatTemplate, bos, text(spec.EOS))
}

// ChatTemplateSkipped reports whether the model has a chat template that
// this build does not render (built with the lm_nojinja tag): its chats use
// chatfmt.Prompt's format instead, which the model was not trained on.
func (m *Model) ChatTemplateSkipped() bool { return m.tokSpec.ChatTemplate != "" && m.chat == nil }

// HasChatTemplate reports whether the model renders chats with its own
// template (tokenizer.chat_template) rather than chatfmt.Prompt's.
func (m *Model) HasChatTemplate() bool { return m.chat != nil }

// ChatPromptTokens is the prompt Generate runs for msgs. With the model's own
// chat template it is the rendered text with its special tokens parsed
// (<|im_start|> becomes that token, as llama.cpp's server does), BOS first
// when the model wants it and the template did not write it; otherwise
// chatfmt.Prompt encoded as plain text after BOS, as before chat templates.
func (m *Model) ChatPromptTokens(msgs []llm.Message) ([]int32, error) {
	var ids []int32
	if m.chat != nil {
		text, err := m.chat.Render(msgs, true)
		if err != nil {
			return nil, err
		}
		ids = m.tok.Tokenize(text, true)
	} else {
		ids = m.tok.Encode(chatfmt.Prompt(msgs))
	}
	if m.tok.AddBOS() && (len(ids) == 0 || ids[0] != m.tok.BOS()) {
		ids = append([]int32{m.tok.BOS()}, ids...)
	}
	return ids, nil
}

// ChatTokens is ChatPromptTokens for callers that only hash the prompt
// (BlockHashes, to ask engines what they have cached): nil when the model's
// template refuses msgs, which Generate then reports.
func (m *Model) ChatTokens(msgs []llm.Message) []int32 {
	ids, err := m.ChatPromptTokens(msgs)
	if err != nil {
		return nil
	}
	return ids
}
