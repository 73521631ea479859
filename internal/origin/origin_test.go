package origin

import "testing"

func TestParseAndOf(t *testing.T) {
	for raw, want := range map[string]string{
		"http://localhost:3000":      "http://localhost:3000",
		"HTTPS://Cloud.Example:443/": "https://cloud.example",
		"http://cloud.example:80":    "http://cloud.example",
		"https://cloud.example:8443": "https://cloud.example:8443",
		"http://[::1]:8080":          "http://[::1]:8080",
		"http://[::1]":               "http://[::1]",
	} {
		u, ok := Parse(raw)
		if !ok {
			t.Errorf("Parse(%q) refused", raw)
			continue
		}
		if got := Of(u); got != want {
			t.Errorf("Of(%q) = %q, want %q", raw, got, want)
		}
	}
	for _, raw := range []string{"", "null", "ftp://x", "http://", "http://u:p@x", "http://x/path", "http://x?q=1", "http://x#f", "localhost:3000"} {
		if _, ok := Parse(raw); ok {
			t.Errorf("Parse(%q) accepted", raw)
		}
	}
}
