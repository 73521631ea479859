package ingress

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/transport/llm"
)

func TestParseKeys(t *testing.T) {
	k, err := ParseKeys(strings.NewReader(`
# comment
sk-alpha-0001 acme 5000
sk-bravo-0002	acme
sk-charlie-03
`))
	if err != nil {
		t.Fatal(err)
	}
	if k.Len() != 3 || k.Budget("acme") != 5000 || k.Budget(TenantOf("sk-charlie-03")) != 0 {
		t.Fatalf("parsed %+v", k)
	}
	for _, tc := range []struct{ hdr, val, want string }{
		{"Authorization", "Bearer sk-alpha-0001", "acme"},
		{"Authorization", "bearer sk-bravo-0002", "acme"},
		{"x-api-key", "sk-charlie-03", TenantOf("sk-charlie-03")},
	} {
		r := httptest.NewRequest("POST", "/v1/messages", nil)
		r.Header.Set(tc.hdr, tc.val)
		got, err := k.Authenticate(r)
		if err != nil || got != tc.want {
			t.Errorf("%s: %q: tenant %q err %v, want %q", tc.hdr, tc.val, got, err, tc.want)
		}
	}
	for _, val := range []string{"", "Bearer nope-nope-nope", "Basic sk-alpha-0001"} {
		r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
		if val != "" {
			r.Header.Set("Authorization", val)
		}
		if _, err := k.Authenticate(r); llm.CodeOf(err) != llm.CodeAuth {
			t.Errorf("%q: err %v, want authentication", val, err)
		}
	}
	if strings.Contains(TenantOf("sk-secret-key"), "secret") {
		t.Fatal("tenant name leaks the key")
	}
}

func TestParseKeysRejects(t *testing.T) {
	for name, text := range map[string]string{
		"empty":         "# nothing\n",
		"short key":     "abc\n",
		"bad budget":    "sk-alpha-0001 t -5\n",
		"extra field":   "sk-alpha-0001 t 5 x\n",
		"duplicate key": "sk-alpha-0001\nsk-alpha-0001 other\n",
		"huge line":     strings.Repeat("x", maxKeyLine+10) + "\n",
	} {
		if _, err := ParseKeys(strings.NewReader(text)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzParseKeys(f *testing.F) {
	f.Add("sk-alpha-0001 acme 5000\n# c\n\nsk-bravo-0002\n")
	f.Add("sk-x 1 2 3")
	f.Fuzz(func(t *testing.T, text string) {
		k, err := ParseKeys(strings.NewReader(text))
		if err != nil {
			return
		}
		if k.Len() == 0 {
			t.Fatal("accepted a file without keys")
		}
		for key, e := range k.byKey {
			if len(key) < 8 || e.Tenant == "" || e.Budget < 0 {
				t.Fatalf("bad entry %q %+v", key, e)
			}
		}
	})
}
