package ingress

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
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

// Roles are an optional last field; files without them keep working, every
// key in them an inference key.
func TestParseKeysRoles(t *testing.T) {
	k, err := ParseKeys(strings.NewReader(`
sk-infer-0001 apps 5000
sk-ops-000001 ops role=operator
sk-view-00001 dash 10 role=viewer
sk-bare-00001 role=inference
`))
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]Key{
		"sk-infer-0001": {Tenant: "apps", Budget: 5000, Role: RoleInference},
		"sk-ops-000001": {Tenant: "ops", Role: RoleOperator},
		"sk-view-00001": {Tenant: "dash", Budget: 10, Role: RoleViewer},
		"sk-bare-00001": {Tenant: TenantOf("sk-bare-00001"), Role: RoleInference},
	} {
		want.ID = TenantOf(key)
		if got := k.byKey[key]; got != want {
			t.Errorf("%s: %+v, want %+v", key, got, want)
		}
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
		"unknown role":  "sk-alpha-0001 t role=admin\n",
		"role first":    "role=operator sk-alpha-0001\n",
		"role only key": "role=operator\n",
		"role too many": "sk-alpha-0001 t 5 x role=viewer\n",
	} {
		if _, err := ParseKeys(strings.NewReader(text)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzParseKeys(f *testing.F) {
	f.Add("sk-alpha-0001 acme 5000\n# c\n\nsk-bravo-0002\n")
	f.Add("sk-x 1 2 3")
	f.Add("sk-ops-00001 ops role=operator\nsk-view-0001 role=viewer\n")
	f.Fuzz(func(t *testing.T, text string) {
		k, err := ParseKeys(strings.NewReader(text))
		if err != nil {
			return
		}
		if k.Len() == 0 {
			t.Fatal("accepted a file without keys")
		}
		for key, e := range k.byKey {
			if _, err := ParseRole(string(e.Role)); len(key) < 8 || e.Tenant == "" || e.Budget < 0 || err != nil || e.ID != TenantOf(key) {
				t.Fatalf("bad entry %q %+v", key, e)
			}
		}
	})
}
