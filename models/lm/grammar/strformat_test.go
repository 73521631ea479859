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
	for _, sc := range []string{`{"type":"string","format":"email"}`, `{"type":"string","format":"date","maxLength":10}`, `{"format":3}`} {
		if _, err := Schema([]byte(sc)); err == nil {
			t.Errorf("%s compiled", sc)
		}
	}
}
