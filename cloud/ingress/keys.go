// Package ingress is how work enters the coordinator: the HTTP listener
// (the OpenAI/Anthropic compatible API from transport/httpapi, health,
// metrics and the fleet admin routes, behind API keys) and the QUIC listener
// for agents (transport/quic, device identity from mutual TLS).
package ingress

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/phaseless/phaseless/llm"
)

// Key is one API key's tenant, token budget and role.
type Key struct {
	Tenant string
	// Budget is the key's burst budget in tokens (refilled at Budget per
	// minute); 0 means the coordinator's default.
	Budget int64
	// Role is what the key reaches (roles.go); RoleInference unless the
	// line says otherwise.
	Role Role
	// ID names the key in logs and the audit log without revealing it
	// (TenantOf's hash).
	ID string
}

// Keys is a parsed --api-keys file.
type Keys struct {
	byKey    map[string]Key
	byTenant map[string]int64
	digests  []keyDigest // what lookup compares against
}

type keyDigest struct {
	sum [sha256.Size]byte
	key Key
}

// maxKeyLine bounds one line of the keys file.
const maxKeyLine = 4096

// ParseKeys reads one key per line: `key [tenant] [budget] [role=ROLE]`,
// separated by spaces or tabs; blank lines and lines starting with # are
// ignored. Without a tenant the key gets its own, named after a hash of the
// key so the secret never appears in logs or metrics. Without a role it is
// an inference key (the only kind files written before roles held, which
// keep their meaning for the OpenAI/Anthropic surface).
func ParseKeys(r io.Reader) (*Keys, error) {
	k := &Keys{byKey: map[string]Key{}, byTenant: map[string]int64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1024), maxKeyLine)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		role := RoleInference
		if last := f[len(f)-1]; len(f) > 1 && strings.HasPrefix(last, "role=") {
			r, err := ParseRole(strings.TrimPrefix(last, "role="))
			if err != nil {
				return nil, fmt.Errorf("api keys line %d: %w", n, err)
			}
			role, f = r, f[:len(f)-1]
		}
		if len(f) > 3 {
			return nil, fmt.Errorf("api keys line %d: %d fields, want `key [tenant] [budget] [role=ROLE]`", n, len(f))
		}
		key := Key{Tenant: TenantOf(f[0]), Role: role, ID: TenantOf(f[0])}
		if len(f) >= 2 {
			key.Tenant = f[1]
		}
		if len(f) == 3 {
			b, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil || b <= 0 {
				return nil, fmt.Errorf("api keys line %d: budget %q must be a positive number of tokens", n, f[2])
			}
			key.Budget = b
		}
		if strings.HasPrefix(f[0], "role=") {
			return nil, fmt.Errorf("api keys line %d: a line starts with the key; role= goes last", n)
		}
		if len(f[0]) < 8 {
			return nil, fmt.Errorf("api keys line %d: key shorter than 8 characters", n)
		}
		if _, dup := k.byKey[f[0]]; dup {
			return nil, fmt.Errorf("api keys line %d: duplicate key", n)
		}
		k.byKey[f[0]] = key
		if key.Budget > k.byTenant[key.Tenant] {
			k.byTenant[key.Tenant] = key.Budget
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("api keys: %w", err)
	}
	if len(k.byKey) == 0 {
		return nil, fmt.Errorf("api keys: no keys")
	}
	for raw, e := range k.byKey {
		k.digests = append(k.digests, keyDigest{sum: sha256.Sum256([]byte(raw)), key: e})
	}
	return k, nil
}

// LoadKeys parses the file at path.
func LoadKeys(path string) (*Keys, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("api keys: %w", err)
	}
	defer f.Close()
	k, err := ParseKeys(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// TenantOf is the tenant name of a key listed without one.
func TenantOf(key string) string {
	h := sha256.Sum256([]byte(key))
	return "key-" + hex.EncodeToString(h[:4])
}

// Len is the number of keys.
func (k *Keys) Len() int { return len(k.byKey) }

// Budget returns tenant's burst budget, 0 when it has none of its own.
func (k *Keys) Budget(tenant string) int64 { return k.byTenant[tenant] }

// Authenticate finds the caller's key in `Authorization: Bearer KEY` (the
// OpenAI SDKs) or `x-api-key: KEY` (the Anthropic SDKs) and returns its
// tenant, or an authentication *llm.Error (401). It checks no role: the
// inference surface uses Gate.Inference, which does.
func (k *Keys) Authenticate(r *http.Request) (string, error) {
	e, err := k.AuthenticateKey(r)
	return e.Tenant, err
}

// AuthenticateKey is Authenticate returning the whole Key.
func (k *Keys) AuthenticateKey(r *http.Request) (Key, error) {
	key := r.Header.Get("x-api-key")
	if key == "" {
		if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			key = strings.TrimSpace(a[7:])
		}
	}
	if key == "" {
		return Key{}, errMissingKey
	}
	if e, ok := k.lookup(key); ok {
		return e, nil
	}
	return Key{}, &llm.Error{Code: llm.CodeAuth, Message: "invalid API key"}
}

// errMissingKey is a request without credentials: not counted as a failed
// guess by the Gate's limiter (a browser or a probe that sends none).
var errMissingKey = &llm.Error{Code: llm.CodeAuth, Message: "missing API key (Authorization: Bearer KEY or x-api-key: KEY)"}

// lookup compares SHA-256 digests of the candidate and of every stored key
// in constant time, visiting all of them: the time taken depends on neither
// how much of a guess was right nor its length (ConstantTimeCompare returns
// early on a length mismatch, so raw keys of different lengths would leak
// the length), nor on which key matched.
func (k *Keys) lookup(key string) (Key, bool) {
	want := sha256.Sum256([]byte(key))
	var found Key
	ok := 0
	for _, s := range k.digests {
		m := subtle.ConstantTimeCompare(s.sum[:], want[:])
		if m == 1 {
			found = s.key
		}
		ok |= m
	}
	return found, ok == 1
}
