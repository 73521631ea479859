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

	"github.com/phaseless/phaseless/transport/llm"
)

// Key is one API key's tenant and token budget.
type Key struct {
	Tenant string
	// Budget is the key's burst budget in tokens (refilled at Budget per
	// minute); 0 means the coordinator's default.
	Budget int64
}

// Keys is a parsed --api-keys file.
type Keys struct {
	byKey    map[string]Key
	byTenant map[string]int64
}

// maxKeyLine bounds one line of the keys file.
const maxKeyLine = 4096

// ParseKeys reads one key per line: `key [tenant] [budget]`, separated by
// spaces or tabs; blank lines and lines starting with # are ignored. Without
// a tenant the key gets its own, named after a hash of the key so the
// secret never appears in logs or metrics.
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
		if len(f) > 3 {
			return nil, fmt.Errorf("api keys line %d: %d fields, want `key [tenant] [budget]`", n, len(f))
		}
		key := Key{Tenant: TenantOf(f[0])}
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
// tenant, or an authentication *llm.Error (401).
func (k *Keys) Authenticate(r *http.Request) (string, error) {
	key := r.Header.Get("x-api-key")
	if key == "" {
		if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			key = strings.TrimSpace(a[7:])
		}
	}
	if key == "" {
		return "", &llm.Error{Code: llm.CodeAuth, Message: "missing API key (Authorization: Bearer KEY or x-api-key: KEY)"}
	}
	if e, ok := k.lookup(key); ok {
		return e.Tenant, nil
	}
	return "", &llm.Error{Code: llm.CodeAuth, Message: "invalid API key"}
}

// lookup compares in constant time per stored key, so response timing does
// not reveal how much of a guessed key was right.
func (k *Keys) lookup(key string) (Key, bool) {
	var found Key
	ok := false
	for stored, e := range k.byKey {
		if subtle.ConstantTimeCompare([]byte(stored), []byte(key)) == 1 {
			found, ok = e, true
		}
	}
	return found, ok
}
