package httpapi

import (
	"strconv"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// upPart is a text content part of an upstream message.
type upPart struct {
	Type         string        `json:"type"`
	Text         string        `json:"text"`
	CacheControl *cacheControl `json:"cache_control,omitempty"`
}

// cacheControl puts req's cache breakpoints into an upstream body, when
// the server reads them (ClientConfig.CacheControl), in the form this
// package's own decoder reads (promptCache): a message with breakpoints
// becomes text parts cut at each breakpoint, the part ending there marked;
// a tool breakpoint marks its tool. Anthropic's ttl names only 5m and 1h,
// so a lifetime x-cache-ttl set between them is left out of the mark and
// sent as the x-cache-ttl value returned (the longest such, so no pin
// lives shorter than asked).
func (c *Client) cacheControl(body *upRequest, req *llm.Request) (ttlHeader string) {
	if len(req.CacheBreakpoints) == 0 || c.cfg.CacheControl == nil || !c.cfg.CacheControl() {
		return ""
	}
	var header time.Duration
	mark := func(ttl time.Duration) *cacheControl {
		switch ttl {
		case 5 * time.Minute:
			return &cacheControl{Type: "ephemeral", TTL: "5m"}
		case time.Hour:
			return &cacheControl{Type: "ephemeral", TTL: "1h"}
		}
		header = max(header, ttl)
		return &cacheControl{Type: "ephemeral"}
	}
	parts := map[int][]upPart{}
	cut := map[int]int{} // bytes of each message already in parts
	for _, bp := range req.CacheBreakpoints {
		if bp.Tools > 0 {
			if bp.Tools <= len(body.Tools) {
				body.Tools[bp.Tools-1].CacheControl = mark(bp.TTL)
			}
			continue
		}
		content, chars := upText(req.Messages[bp.Message], bp.Chars)
		parts[bp.Message] = append(parts[bp.Message], upPart{Type: "text", Text: content[cut[bp.Message]:chars], CacheControl: mark(bp.TTL)})
		cut[bp.Message] = chars
	}
	for i, ps := range parts {
		if content, _ := upText(req.Messages[i], 0); content[cut[i]:] != "" {
			ps = append(ps, upPart{Type: "text", Text: content[cut[i]:]})
		}
		body.Messages[i].Content = ps
	}
	if header == 0 {
		return ""
	}
	return strconv.Itoa(int(header / time.Second))
}

// upText is the text m carries upstream (a failed tool result in words,
// as Generate sends it) and where chars bytes of its Content end there.
func upText(m llm.Message, chars int) (string, int) {
	if m.Role != "tool" {
		return m.Content, chars
	}
	return m.ToolResultText(), m.ToolResultChars(chars)
}
