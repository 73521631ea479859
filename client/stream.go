package client

import (
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/phaseless/phaseless/internal/backoff"
	"github.com/phaseless/phaseless/transport/httpapi"
	"github.com/phaseless/phaseless/transport/sse"
)

// statsField is the SSE field that carries the server's own numbers.
const statsField = httpapi.StatsField

// decoder reads one streamed answer in either API's shape.
type decoder struct {
	api    API
	clock  backoff.Clock
	start  time.Time
	onText func(string) error

	st        *Stats // the Response's, filled as the stream goes
	text      []byte
	reasm     Reassembler
	delivered bool // text reached onText: the attempt can no longer be retried
	last      time.Time
	itlSum    time.Duration
	itlN      int
	genSum    time.Duration
	genN      int
}

// serverStats is the StatsField value, on token events and the final one.
type serverStats struct {
	GenUS                 *int64   `json:"gen_us"`
	PromptTokens          *int     `json:"prompt_tokens"`
	PrefixHitTokens       *int     `json:"prefix_hit_tokens"`
	PrefixCacheEfficiency *float64 `json:"prefix_cache_efficiency"`
}

// run reads the stream into resp until its end event.
func (d *decoder) run(body io.Reader, resp *Response) error {
	d.st = &resp.Stats
	r := sse.NewReader(body, 0)
	for {
		ev, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // no end event: the server or the link died
			}
			return &Error{Message: "stream cut before its end: " + err.Error(), Transport: true, MidStream: d.delivered, err: err}
		}
		if raw, ok := ev.Fields[statsField]; ok {
			d.serverStats(raw, resp)
		}
		var done bool
		if d.api == Anthropic {
			done, err = d.anthropic(ev, resp)
		} else {
			done, err = d.openAI(ev, resp)
		}
		if err != nil {
			return err
		}
		if done {
			break
		}
	}
	if err := d.emit(d.reasm.Flush()); err != nil {
		return err
	}
	resp.Text = string(d.text)
	s := d.st
	s.Total = d.clock.Now().Sub(d.start)
	if d.itlN > 0 {
		s.ITLMean = d.itlSum / time.Duration(d.itlN)
	}
	if d.genN > 0 {
		s.ServerGenMean = d.genSum / time.Duration(d.genN)
	}
	tokens := resp.Usage.CompletionTokens
	if tokens == 0 {
		tokens = s.Chunks
	}
	if s.Total > 0 {
		s.TokensPerSecond = float64(tokens) / s.Total.Seconds()
	}
	return nil
}

// delta takes one raw text delta (a JSON string literal).
func (d *decoder) delta(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	b, err := unquoteRaw(raw)
	if err != nil {
		return &Error{Message: "bad text delta: " + err.Error(), MidStream: d.delivered}
	}
	return d.emit(d.reasm.Write(b))
}

// emit hands complete text to the caller and times it.
func (d *decoder) emit(text string) error {
	if text == "" {
		return nil
	}
	now := d.clock.Now()
	if d.st.Chunks == 0 {
		d.st.TTFT = now.Sub(d.start)
	} else {
		gap := now.Sub(d.last)
		d.itlSum += gap
		d.itlN++
		d.st.ITLMax = max(d.st.ITLMax, gap)
	}
	d.st.Chunks++
	d.last = now
	d.text = append(d.text, text...)
	if d.onText == nil {
		return nil
	}
	d.delivered = true
	return d.onText(text)
}

func (d *decoder) serverStats(raw []byte, resp *Response) {
	var st serverStats
	if json.Unmarshal(raw, &st) != nil {
		return // a field for someone else's reader; never fatal
	}
	if st.GenUS != nil && *st.GenUS >= 0 {
		d.genSum += time.Duration(*st.GenUS) * time.Microsecond
		d.genN++
	}
	if st.PrefixCacheEfficiency != nil {
		resp.Stats.PrefixCacheEfficiency, resp.Stats.HasPrefixCache = *st.PrefixCacheEfficiency, true
	}
}

// streamError is an error event or object in the middle of a stream.
type streamError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"`
}

func (d *decoder) fail(se *streamError) error {
	e := &Error{Type: se.Type, Message: se.Message, MidStream: d.delivered}
	if s, ok := se.Code.(string); ok {
		e.Code = s
	}
	return e
}

func (d *decoder) badEvent(err error) error {
	return &Error{Message: "bad stream event: " + err.Error(), MidStream: d.delivered}
}

// openAI handles one chat.completion.chunk event.
func (d *decoder) openAI(ev sse.Event, resp *Response) (bool, error) {
	if len(ev.Data) == 0 {
		return false, nil
	}
	if string(ev.Data) == "[DONE]" {
		return true, nil
	}
	var c struct {
		Choices []struct {
			Delta struct {
				Content json.RawMessage `json:"content"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *httpapi.ChatUsage `json:"usage"`
		Error *streamError       `json:"error"`
	}
	if err := json.Unmarshal(ev.Data, &c); err != nil {
		return false, d.badEvent(err)
	}
	if c.Error != nil {
		return false, d.fail(c.Error)
	}
	for _, ch := range c.Choices {
		if err := d.delta(ch.Delta.Content); err != nil {
			return false, err
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			resp.FinishReason = finish(*ch.FinishReason)
		}
	}
	if u := c.Usage; u != nil {
		resp.Usage = Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, CachedTokens: u.PromptTokensDetails.CachedTokens}
	}
	return false, nil
}

// antUsage is Anthropic's usage: input_tokens excludes cache reads and
// writes, so the prompt is their sum.
type antUsage struct {
	InputTokens              *int `json:"input_tokens"`
	OutputTokens             *int `json:"output_tokens"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
}

func (u *antUsage) apply(to *Usage) {
	if u == nil {
		return
	}
	if u.InputTokens != nil {
		to.PromptTokens = *u.InputTokens
		for _, p := range []*int{u.CacheReadInputTokens, u.CacheCreationInputTokens} {
			if p != nil {
				to.PromptTokens += *p
			}
		}
	}
	if u.CacheReadInputTokens != nil {
		to.CachedTokens = *u.CacheReadInputTokens
	}
	if u.OutputTokens != nil {
		to.CompletionTokens = *u.OutputTokens
	}
}

// anthropic handles one Messages stream event.
func (d *decoder) anthropic(ev sse.Event, resp *Response) (bool, error) {
	var e struct {
		Message *struct {
			Usage *antUsage `json:"usage"`
		} `json:"message"`
		Delta *struct {
			Type       string          `json:"type"`
			Text       json.RawMessage `json:"text"`
			StopReason *string         `json:"stop_reason"`
		} `json:"delta"`
		Usage *antUsage    `json:"usage"`
		Error *streamError `json:"error"`
	}
	switch ev.Name {
	case "message_stop":
		return true, nil
	case "message_start", "content_block_delta", "message_delta", "error":
	default:
		return false, nil // ping, content_block_start/stop, and events to come
	}
	if err := json.Unmarshal(ev.Data, &e); err != nil {
		return false, d.badEvent(err)
	}
	switch ev.Name {
	case "error":
		if e.Error == nil {
			e.Error = &streamError{Message: string(ev.Data)}
		}
		return false, d.fail(e.Error)
	case "message_start":
		if e.Message != nil {
			e.Message.Usage.apply(&resp.Usage)
		}
	case "content_block_delta":
		if e.Delta != nil && e.Delta.Type == "text_delta" {
			return false, d.delta(e.Delta.Text)
		}
	case "message_delta":
		if e.Delta != nil && e.Delta.StopReason != nil {
			resp.FinishReason = finish(*e.Delta.StopReason)
		}
		e.Usage.apply(&resp.Usage)
	}
	return false, nil
}

// finish maps both APIs' reasons onto stop and length.
func finish(r string) string {
	if r == "length" || r == "max_tokens" {
		return "length"
	}
	return "stop"
}
