package llm

import (
	"testing"
	"time"
)

func TestCheckCache(t *testing.T) {
	msgs := []Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "hi"}}
	bp := func(m, c int, ttl time.Duration) CacheBreakpoint {
		return CacheBreakpoint{Message: m, Chars: c, TTL: ttl}
	}
	for _, tc := range []struct {
		name string
		bps  []CacheBreakpoint
		ok   bool
	}{
		{"none", nil, true},
		{"system and last turn", []CacheBreakpoint{bp(0, 3, 5*time.Minute), bp(1, 2, time.Hour)}, true},
		{"same point twice", []CacheBreakpoint{bp(1, 2, 5*time.Minute), bp(1, 2, time.Hour)}, true},
		{"message past the end", []CacheBreakpoint{bp(2, 0, 5*time.Minute)}, false},
		{"chars past the content", []CacheBreakpoint{bp(0, 4, 5*time.Minute)}, false},
		{"lifetime below 5m", []CacheBreakpoint{bp(0, 3, 299*time.Second)}, false},
		{"lifetime above 1h", []CacheBreakpoint{bp(0, 3, time.Hour+time.Second)}, false},
		{"out of order", []CacheBreakpoint{bp(1, 2, 5*time.Minute), bp(0, 3, 5*time.Minute)}, false},
		{"five", []CacheBreakpoint{bp(0, 1, MinCacheTTL), bp(0, 1, MinCacheTTL), bp(0, 1, MinCacheTTL), bp(0, 1, MinCacheTTL), bp(0, 1, MinCacheTTL)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Request{Messages: msgs, CacheRequest: CacheRequest{CacheBreakpoints: tc.bps}}
			if err := r.CheckCache(); (err == nil) != tc.ok {
				t.Fatalf("CheckCache: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
