package grammar

import (
	"strings"
	"testing"
)

// TestNot checks the forms of not the compiler rewrites against the
// validator, both ways, and that the others are refused by name.
func TestNot(t *testing.T) {
	docs := []string{`null`, `true`, `0`, `1.5`, `-3`, `"a"`, `"b"`, `"c"`, `[]`, `[1]`, `{}`, `{"a":1}`, `{"b":2}`, `{"a":1,"b":2}`}
	for _, schema := range []string{
		`{"not":{"not":{"type":"string"}}}`,
		`{"type":["string","integer"],"not":{"not":{"minimum":0}}}`,
		`{"not":{"type":"null"}}`,
		`{"not":{"type":["string","number"]}}`,
		`{"type":["integer","string"],"not":{"type":"integer"}}`,
		`{"not":{"required":["a"]}}`,
		`{"type":"object","properties":{"b":{"type":"integer"}},"not":{"required":["a"]}}`,
		`{"enum":["a","b",1,[1]],"not":{"enum":["b",1.0]}}`,
		`{"enum":["a","b"],"not":{"const":"a","title":"not a"}}`,
		`{"type":"string","not":false}`,
		`{"type":"object","properties":{"a":false}}`, // what not required becomes; it once compiled as any object
	} {
		againstValidator(t, schema, docs, true)
	}
	for _, schema := range []string{
		`{"not":{}}`, `{"not":true}`, `{"not":{"type":"integer"}}`, `{"type":"string","not":{"enum":["a"]}}`,
		`{"not":{"required":["a","b"]}}`, `{"not":{"minimum":3}}`, `{"not":{"type":["null","boolean","object","array","number","string"]}}`,
	} {
		if _, err := Schema([]byte(schema)); err == nil || !strings.Contains(err.Error(), "not") {
			t.Errorf("%s: %v, want a refusal naming not", schema, err)
		}
	}
}
