package firmware

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// probeKey is a fixed key, so the fuzz seeds in testdata hold probe sets
// that verify.
var probeKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))

func testProbeSet() ProbeSet {
	return ProbeSet{Name: "incar", Margin: 0.05, Probes: []Probe{
		{Prompt: "navigate to Denver", Expect: "@navigate Denver"},
		{Prompt: "what is 2+2", Expect: "#4"},
	}}
}

func TestProbeSetSignOpen(t *testing.T) {
	pub := probeKey.Public().(ed25519.PublicKey)
	raw, err := SignProbeSet(probeKey, testProbeSet())
	if err != nil {
		t.Fatal(err)
	}
	ps, err := OpenProbeSet(raw, pub)
	if err != nil {
		t.Fatal(err)
	}
	if ps.Name != "incar" || ps.Margin != 0.05 || len(ps.Probes) != 2 || ps.Probes[0].Expect != "@navigate Denver" || ps.Tokens() != DefaultProbeTokens {
		t.Fatalf("opened %+v", ps)
	}
	// Whitespace is not signed: a re-indented file still verifies.
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenProbeSet(compact.Bytes(), pub); err != nil {
		t.Fatalf("compacted file: %v", err)
	}

	otherPub, _, _ := ed25519.GenerateKey(nil)
	tampered := bytes.Replace(raw, []byte("0.05"), []byte("0.95"), 1)
	for name, c := range map[string]struct {
		raw []byte
		key ed25519.PublicKey
	}{
		"other key": {raw, otherPub},
		"tampered":  {tampered, pub},
		"no key":    {raw, nil},
		"not json":  {[]byte("probes"), pub},
	} {
		if _, err := OpenProbeSet(c.raw, c.key); !errors.Is(err, ErrProbeSet) {
			t.Errorf("%s: %v, want ErrProbeSet", name, err)
		}
	}

	for name, ps := range map[string]ProbeSet{
		"no probes":    {Margin: 0.1},
		"margin":       {Margin: 1.5, Probes: testProbeSet().Probes},
		"tokens":       {MaxTokens: 100000, Probes: testProbeSet().Probes},
		"empty prompt": {Probes: []Probe{{Expect: "=x"}}},
		"no expect":    {Probes: []Probe{{Prompt: "x"}}},
		"long name":    {Name: strings.Repeat("n", 65), Probes: testProbeSet().Probes},
	} {
		if _, err := SignProbeSet(probeKey, ps); err == nil {
			t.Errorf("%s: signed %+v", name, ps)
		}
	}
}

// FuzzOpenProbeSet feeds the probe-set reader arbitrary files, and
// arbitrary probe-set bodies signed with the trusted key so they get past
// the signature: whatever it accepts must pass Check.
func FuzzOpenProbeSet(f *testing.F) {
	pub := probeKey.Public().(ed25519.PublicKey)
	raw, err := SignProbeSet(probeKey, testProbeSet())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw, false)
	f.Add([]byte(`{"name":"x","margin":0.1,"probes":[{"prompt":"p","expect":"=q"}]}`), true)
	f.Add([]byte(`{"margin":-1,"probes":[]}`), true)
	f.Fuzz(func(t *testing.T, in []byte, sign bool) {
		if sign {
			var body bytes.Buffer
			if json.Compact(&body, in) != nil {
				return
			}
			file, _ := json.Marshal(map[string]any{"probe_set": json.RawMessage(body.Bytes()), "signature": ed25519.Sign(probeKey, body.Bytes())})
			in = file
		}
		ps, err := OpenProbeSet(in, pub)
		if err != nil {
			if !errors.Is(err, ErrProbeSet) {
				t.Fatalf("error %v is not ErrProbeSet", err)
			}
			return
		}
		if err := ps.Check(); err != nil {
			t.Fatalf("accepted %+v: %v", ps, err)
		}
	})
}
