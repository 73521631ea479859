// Package grammartest holds schemas that tests on every tier send to the
// schema compiler (models/lm/grammar): the agent's and the cloud's HTTP
// tests and the compiler's own. Only tests import it.
package grammartest

import (
	"fmt"
	"strings"
)

// HugeEnumSchema is issue 27's schema: a string enum of 100,000 values,
// about 3.7 MB, under the HTTP APIs' 4 MiB body limit and far over
// grammar.MaxEnumValues.
func HugeEnumSchema() string {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{"city":{"type":"string","enum":[`)
	for i := range 100_000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"city-name-number-%016d"`, i)
	}
	b.WriteString(`]}},"required":["city"]}`)
	return b.String()
}
