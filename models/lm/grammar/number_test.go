package grammar

import (
	"math/big"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/lm/grammar/grammartest"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestNumberBoundsExact checks that a bounded number admits exactly the
// decimals within its bounds, fractions included ({"minimum":0.1} accepts
// 0.5: issue 29), around each bound and across integer parts.
func TestNumberBoundsExact(t *testing.T) {
	for _, b := range []struct{ lo, hi string }{
		{`"minimum":0.1`, ``}, {`"minimum":-2.5`, `,"maximum":7`}, {`"exclusiveMinimum":0.5`, `,"maximum":3.25`},
		{`"exclusiveMinimum":-0.05`, `,"exclusiveMaximum":0`}, {`"minimum":1.25`, `,"maximum":1.5`}, {`"minimum":1.205`, `,"exclusiveMaximum":1.21`},
		{`"minimum":-3`, `,"maximum":-1.75`}, {`"exclusiveMinimum":0`, `,"maximum":0.3`}, {`"maximum":0.5`, ``},
	} {
		sc := `{"type":"number",` + b.lo + b.hi + `}`
		g, err := Schema([]byte(sc))
		if err != nil {
			t.Fatalf("%s: %v", sc, err)
		}
		v := grammartest.Validator(t, sc)
		var ins []string
		for i := -4000; i <= 8000; i += 5 {
			r := big.NewRat(int64(i), 1000)
			ins = append(ins, r.FloatString(3))
			if i%25 == 0 {
				ins = append(ins, r.FloatString(2), r.FloatString(4))
			}
		}
		ins = append(ins, "0.1", "0.09", "0.10", "0.5", "0.50", "0.51", "1.2049", "1.2099999", "1.21", "1.205", "-0.049", "1.5000001", "3.2500")
		for _, in := range ins {
			want := validates(v, in)
			if got := g.Match([]byte(in)); got != want {
				t.Fatalf("%s: %s matched %v, the validator says %v", sc, in, got, want)
			}
		}
	}
}

func TestNumberBoundsRefused(t *testing.T) {
	for _, sc := range []string{`{"type":"number","minimum":1.5,"maximum":1.25}`, `{"type":"number","exclusiveMinimum":2,"exclusiveMaximum":2}`,
		`{"type":"integer","minimum":1.2,"maximum":1.8}`, `{"type":"number","minimum":1e-60}`} {
		if _, err := Schema([]byte(sc)); err == nil {
			t.Errorf("%s compiled", sc)
		}
	}
	if _, err := Schema([]byte(`{"type":"number","minimum":1e-30,"maximum":1}`)); err != nil {
		t.Error(err)
	}
}

// validates reports whether the validator accepts the JSON text in.
func validates(v *jsonschema.Schema, in string) bool {
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(in))
	return err == nil && v.Validate(inst) == nil
}
