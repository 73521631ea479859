package grammar

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestFormats checks each enforced format against the validator with
// format assertions on: what the grammar accepts validates, and the
// expected spellings are accepted.
func TestFormats(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for format, tc := range map[string]struct{ accept, reject []string }{
		"date":      {[]string{"2024-02-28", "1999-12-31", "0001-04-30"}, []string{"2024-02-29", "2024-02-30", "2024-04-31", "2024-13-01", "2024-00-10", "2024-1-01", "24-01-01"}},
		"time":      {[]string{"23:59:59Z", "00:00:00.123+05:30", "12:30:00-08:00"}, []string{"24:00:00Z", "12:60:00Z", "12:00:00", "12:00Z", "23:59:60Z"}},
		"date-time": {[]string{"2024-01-31T23:59:59Z", "2024-06-30T00:00:00.5+01:00"}, []string{"2024-01-31 23:59:59Z", "2024-06-31T00:00:00Z"}},
		"uuid":      {[]string{"123e4567-e89b-12d3-a456-426614174000", "ABCDEF01-2345-6789-ABCD-EF0123456789"}, []string{"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"}},
		"ipv4":      {[]string{"0.0.0.0", "192.168.1.255", "255.255.255.255"}, []string{"256.1.1.1", "01.1.1.1", "1.1.1", "1.1.1.1.1"}},
		"uri": {[]string{"https://example.com", "http://user:pw@host.example:8080/a/b%20c?q=1&r=a/b#frag", "mailto:jane.doe@example.org", "urn:isbn:0451450523", "file:///etc/hosts", "s3://bucket/key", "x:"},
			[]string{"example.com", "/relative/path", "http://exa mple.com", "http://host:80a/", "ht tp://x", "1http://x", "http://x/%zz", "http://[::1]/", "http://ex%41mple.com", "", "https://exämple.com"}},
		"uri-reference": {[]string{"https://example.com/a", "/relative/path?x=1", "../up/one", "#frag", "", "//cdn.example.com/lib.js", "a/b:c"},
			[]string{"a:b c", "http://x/%zz", "\\\\server", "c:d:e f"}},
		"email": {[]string{"jane.doe@example.com", "a+tag@sub.example.co.uk", "x@y", "o'neil_99@mail-host.org"},
			[]string{"plainaddress", "@example.com", "jane@", "jane..doe@example.com", ".jane@example.com", "jane.@example.com", "jane@-example.com", "jane@example-.com", "jane doe@example.com", "jane@exa_mple.com", strings.Repeat("a", 60) + "@example.com"}},
		"hostname": {[]string{"localhost", "example.com", "a-b.c-d.example", "xn--bcher-kva.example", "123.example"},
			[]string{"-example.com", "example-.com", "exa_mple.com", "example..com", "", ".example.com", strings.Repeat("a", 64), strings.Repeat("a.", 31) + "aa"}},
	} {
		sc := `{"type":"string","format":"` + format + `"}`
		g, err := Schema([]byte(sc))
		if err != nil {
			t.Fatalf("%s: %v", sc, err)
		}
		doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(sc))
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		if err := c.AddResource("s.json", doc); err != nil {
			t.Fatal(err)
		}
		v, err := c.Compile("s.json")
		if err != nil {
			t.Fatal(err)
		}
		quote := func(l []string) []string {
			out := make([]string, len(l))
			for i, x := range l {
				out[i] = `"` + x + `"`
			}
			return out
		}
		checkMatches(t, g, v, format, quote(tc.accept), quote(tc.reject))
		// Random sentences of the format validate too.
		for range 100 {
			if out, ok := walk(g, rng, 200, 0.3); ok && !validates(v, string(out)) {
				t.Fatalf("%s: sentence %s does not validate", format, out)
			}
		}
	}
	for _, sc := range []string{`{"type":"string","format":"ipv6"}`, `{"type":"string","format":"duration"}`, `{"type":"string","format":"date","maxLength":10}`, `{"format":3}`} {
		if _, err := Schema([]byte(sc)); err == nil {
			t.Errorf("%s compiled", sc)
		}
	}
	// A format no draft defines is an annotation: it constrains nothing,
	// so the keywords beside it still apply and other types pass.
	g, err := Schema([]byte(`{"type":["string","integer"],"format":"semver","maxLength":3}`))
	if err != nil {
		t.Fatal(err)
	}
	for doc, want := range map[string]bool{`"1.2"`: true, `"anything"`: false, `7`: true} {
		if g.Match([]byte(doc)) != want {
			t.Errorf("format semver: %s matched %v", doc, !want)
		}
	}
}
