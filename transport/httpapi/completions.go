package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/phaseless/phaseless/llm"
)

// OpenAI's legacy text completions, POST /v1/completions: a plain prompt
// continued as it stands, with no chat template. It is how a model that
// has none (a base model such as the stories260K fixture) is served. The
// request becomes an llm.Request with Raw set; only a device's built-in
// engine runs those, so the cloud answers 400 (Options.Cloud) and the
// agent keeps them on the device (agent/route).

// CompletionRequest is the subset of OpenAI's completions request that
// Phaseless honours; the fields it does not (echo, suffix, logprobs,
// best_of) are refused when set rather than ignored.
type CompletionRequest struct {
	Model     string          `json:"model"`
	Prompt    json.RawMessage `json:"prompt"` // a string, or an array of exactly one string
	MaxTokens *int            `json:"max_tokens"`
	oaiSampling

	Echo     bool            `json:"echo"`
	Suffix   *string         `json:"suffix"`
	Logprobs json.RawMessage `json:"logprobs"`
	BestOf   *int            `json:"best_of"`
}

// defaultCompletionTokens is OpenAI's max_tokens default for completions
// (its API reference: "Defaults to 16"), so a client that relies on it
// gets what it would get there.
const defaultCompletionTokens = 16

// decodeCompletion decodes and validates a completions body.
func decodeCompletion(body []byte, lim limits) (*llm.Request, chatStream, *apiError) {
	var cr CompletionRequest
	if err := json.Unmarshal(body, &cr); err != nil {
		return nil, chatStream{}, invalid("", "request body is not a valid completions request: %v", err)
	}
	req := &llm.Request{Raw: true}
	var e *apiError
	if req.Model, e = lim.checkModel(cr.Model); e != nil {
		return nil, chatStream{}, e
	}
	if req.Prompt, e = completionPrompt(cr.Prompt); e != nil {
		return nil, chatStream{}, e
	}
	switch {
	case cr.Echo:
		return nil, chatStream{}, invalid("echo", "echo is not supported")
	case cr.Suffix != nil && *cr.Suffix != "":
		return nil, chatStream{}, invalid("suffix", "suffix (insertion) is not supported")
	case len(cr.Logprobs) > 0 && string(cr.Logprobs) != "null":
		return nil, chatStream{}, invalid("logprobs", "logprobs is not supported")
	case cr.BestOf != nil && *cr.BestOf != 1:
		return nil, chatStream{}, invalid("best_of", "best_of must be 1")
	}
	req.MaxTokens = min(defaultCompletionTokens, lim.maxTokens)
	if cr.MaxTokens != nil {
		if e := lim.checkMaxTokens("max_tokens", *cr.MaxTokens); e != nil {
			return nil, chatStream{}, e
		}
		req.MaxTokens = *cr.MaxTokens
	}
	cs, e := cr.decode(req)
	if e != nil {
		return nil, chatStream{}, e
	}
	return req, cs, nil
}

// completionPrompt reads prompt: a string, or an array holding one string
// (what the official SDKs send for a list). Missing is OpenAI's default,
// the empty prompt: the model starts from BOS. Token-id prompts and
// several prompts at once are refused.
func completionPrompt(raw json.RawMessage) (string, *apiError) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return "", nil
	}
	var one string
	if s[0] == '"' {
		if err := json.Unmarshal(raw, &one); err != nil {
			return "", invalid("prompt", "prompt: %v", err)
		}
		return one, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return "", invalid("prompt", "prompt must be a string (token-id prompts are not supported)")
	}
	if len(many) != 1 {
		return "", invalid("prompt", "prompt must be one string; got an array of %d", len(many))
	}
	return many[0], nil
}

func (h *Handler) serveCompletions(w http.ResponseWriter, r *http.Request, tenant string) {
	if h.opts.Cloud {
		h.fail(w, apiOpenAI, invalid("", "raw completions (/v1/completions) run on a device's built-in engine (phaseless-agent --model): the cloud serves chat, POST /v1/chat/completions"))
		return
	}
	req, cs, ok := decodeRequest(h, w, r, apiOpenAI, tenant, decodeCompletion)
	if !ok {
		return
	}
	base := chatBase{ID: "cmpl-" + req.ID, Object: "text_completion", Created: h.opts.Now().Unix(), Model: req.Model}
	h.run(w, r, apiOpenAI, req, &completionWriter{base: base, stream: cs.stream, includeUsage: cs.includeUsage})
}

// textCompletion is OpenAI's completion object; a stream sends it once per
// token with that token's text, then once with the finish reason.
type textCompletion struct {
	chatBase
	Choices []completionChoice `json:"choices"`
	Usage   *ChatUsage         `json:"usage,omitempty"`
}

type completionChoice struct {
	Text         string          `json:"text"`
	Index        int             `json:"index"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// completionWriter answers a completion, streamed (SSE `data:` events,
// then `data: [DONE]`) or collected into one object.
type completionWriter struct {
	base                 chatBase
	stream, includeUsage bool
	text                 strings.Builder // collected text (not streamed)
	gen                  genLatency
}

func (c *completionWriter) begin(w http.ResponseWriter) error {
	if c.stream {
		sseHeaders(w)
	}
	return nil
}

func (c *completionWriter) event(w http.ResponseWriter, tc textCompletion, stats []byte) error {
	tc.chatBase = c.base
	b, err := json.Marshal(tc)
	if err != nil {
		return err
	}
	return writeEventStats(w, "", b, stats)
}

func (c *completionWriter) token(w http.ResponseWriter, t llm.Token) error {
	if !c.stream {
		c.text.WriteString(t.Text)
		c.gen.add(t)
		return nil
	}
	return c.event(w, textCompletion{Choices: []completionChoice{{Text: t.Text, Logprobs: json.RawMessage("null")}}}, tokenStats(t))
}

func (c *completionWriter) end(w http.ResponseWriter, fin llm.Final) {
	reason := openAIFinish(fin.FinishReason)
	if !c.stream {
		c.gen.writeHeaders(w.Header(), fin)
		writeJSON(w, http.StatusOK, textCompletion{chatBase: c.base,
			Choices: []completionChoice{{Text: c.text.String(), Logprobs: json.RawMessage("null"), FinishReason: &reason}},
			Usage:   chatUsage(fin)})
		return
	}
	if c.event(w, textCompletion{Choices: []completionChoice{{Logprobs: json.RawMessage("null"), FinishReason: &reason}}}, nil) != nil {
		return
	}
	if c.includeUsage {
		if c.event(w, textCompletion{Choices: []completionChoice{}, Usage: chatUsage(fin)}, nil) != nil {
			return
		}
	}
	writeEventStats(w, "", []byte("[DONE]"), endStats(fin))
}

// fail ends a stream with OpenAI's in-stream error object and no [DONE];
// a collected answer has sent nothing yet, so run answers it whole.
func (c *completionWriter) fail(w http.ResponseWriter, e *apiError) {
	if c.stream {
		writeEvent(w, "", e.body(apiOpenAI))
		return
	}
	e.write(w, apiOpenAI)
}
