package httpapi

import (
	"strconv"
	"time"

	"github.com/phaseless/phaseless/transport/llm"
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
		content := req.Messages[bp.Message].Content
		parts[bp.Message] = append(parts[bp.Message], upPart{Type: "text", Text: content[cut[bp.Message]:bp.Chars], CacheControl: mark(bp.TTL)})
		cut[bp.Message] = bp.Chars
	}
	for i, ps := range parts {
		if rest := req.Messages[i].Content[cut[i]:]; rest != "" {
			ps = append(ps, upPart{Type: "text", Text: rest})
		}
		body.Messages[i].Content = ps
	}
	if header == 0 {
		return ""
	}
	return strconv.Itoa(int(header / time.Second))
}
