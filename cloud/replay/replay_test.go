package replay

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseTraces(t *testing.T) {
	f, err := os.Open("testdata/traces/azure-code-head.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	az, err := parseAzureTrace(f, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(az) != 1000 || az[0].At != 0 || az[0].Input != 4808 || az[0].Output != 10 || az[1].At != 52*time.Millisecond {
		t.Fatalf("azure: %d requests, first %+v second %+v", len(az), az[0], az[1])
	}
	g, err := os.Open("testdata/traces/mooncake-conversation-head.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	mc, err := parseMooncakeTrace(g, 50)
	if err != nil {
		t.Fatal(err)
	}
	if len(mc) != 50 || mc[0].Input != 6758 || mc[0].Output != 500 || len(mc[0].Blocks) != 14 || mc[1].Blocks[0] != 0 {
		t.Fatalf("mooncake: %d, first %+v", len(mc), mc[0])
	}
}

func TestParseTracesRejects(t *testing.T) {
	azure := map[string]string{
		"header":      "a,b,c\n",
		"empty":       "TIMESTAMP,ContextTokens,GeneratedTokens\n",
		"timestamp":   "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n",
		"negative":    "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,-1,2\n",
		"huge":        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,99999999999,2\n",
		"backwards":   "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,1,2\n2023-11-16 18:17:02.97,1,2\n",
		"short field": "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,1\n",
	}
	for name, text := range azure {
		if _, err := parseAzureTrace(strings.NewReader(text), 0); err == nil {
			t.Errorf("azure %s: accepted", name)
		}
	}
	mooncake := map[string]string{
		"not json":     "{\n",
		"missing":      `{"timestamp": 0, "input_length": 5}`,
		"negative":     `{"timestamp": 0, "input_length": -5, "output_length": 1}`,
		"too many ids": `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1,2,3]}`,
		"backwards":    "{\"timestamp\": 10, \"input_length\": 1, \"output_length\": 1}\n{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 1}",
		"empty":        "\n\n",
	}
	for name, text := range mooncake {
		if _, err := parseMooncakeTrace(strings.NewReader(text), 0); err == nil {
			t.Errorf("mooncake %s: accepted", name)
		}
	}
}

func FuzzParseAzureTrace(f *testing.F) {
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.0319600,3180,8\n")
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\n\"2023-11-16 18:17:03\",1,1\n")
	f.Fuzz(func(t *testing.T, text string) {
		reqs, err := parseAzureTrace(strings.NewReader(text), 100)
		if err != nil {
			return
		}
		for i, r := range reqs {
			if r.Input < 0 || r.Output < 0 || r.Input > maxTraceTokens || (i > 0 && r.At < reqs[i-1].At) {
				t.Fatalf("accepted %+v", r)
			}
		}
	})
}

func FuzzParseMooncakeTrace(f *testing.F) {
	f.Add(`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}` + "\n" +
		`{"timestamp": 3, "input_length": 2290, "output_length": 316, "hash_ids": [0, 42, 43, 44, 45]}`)
	f.Add(`{"timestamp": 9223372036854775807, "input_length": 1, "output_length": 1}`)
	f.Add(`{"timestamp": 0, "input_length": 547, "output_length": 248, "prefix_id": 3, "prefix_length": 120}`)
	f.Fuzz(func(t *testing.T, text string) {
		reqs, err := parseMooncakeTrace(strings.NewReader(text), 100)
		if err != nil {
			return
		}
		for i, r := range reqs {
			if r.Input < 0 || r.Output < 0 || r.At < 0 || len(r.Blocks) > r.Input/512+1 || (i > 0 && r.At < reqs[i-1].At) || r.PrefixLen < 0 || r.PrefixLen > 0 && r.PrefixLen >= r.Input {
				t.Fatalf("accepted %+v", r)
			}
		}
	})
}

// TestPromptMaker: equal hash ids give equal text, so the trace's shared
// prefixes are shared prefixes at the engines; lengths follow the scale.
func TestPromptMaker(t *testing.T) {
	p := promptMaker{salt: 1, scale: 0.1, maxInput: 800, charsPerToken: 1}
	a := p.prompt(0, traceRequest{Input: 2048, Blocks: []int{0, 1, 2, 3}})
	b := p.prompt(1, traceRequest{Input: 2048, Blocks: []int{0, 1, 9, 10}})
	if len(a) != 205 || len(b) != 205 {
		t.Fatalf("lengths %d %d, want 205 (2048 × 0.1)", len(a), len(b))
	}
	shared := 0
	for shared < len(a) && a[shared] == b[shared] {
		shared++
	}
	if shared < 100 || shared >= 160 {
		t.Fatalf("shared prefix %d chars, want the two 51-char blocks", shared)
	}
	q := p
	q.salt = 2
	if q.prompt(0, traceRequest{Input: 2048, Blocks: []int{0}})[:40] == a[:40] {
		t.Fatal("another run's prompts repeat this run's text")
	}
	if c := p.prompt(5, traceRequest{Input: 100000}); len(c) != 800 {
		t.Fatalf("cap: %d", len(c))
	}
}

// TestWriteTrace: a trace written with shared prefixes reads back the
// same (to the millisecond), and the replay's prompts share the prefix's
// text exactly when they share its id.
func TestWriteTrace(t *testing.T) {
	in := []TraceRequest{{At: 0, Input: 547, Output: 248, PrefixID: 0, PrefixLen: 120}, {At: 125 * time.Millisecond, Input: 600, Output: 10, PrefixID: 0, PrefixLen: 120},
		{At: 250 * time.Millisecond, Input: 600, Output: 10, PrefixID: 1, PrefixLen: 120}, {At: time.Second, Input: 2048, Output: 5, Blocks: []int{0, 1, 2, 3}}}
	var b bytes.Buffer
	if err := WriteTrace(&b, in); err != nil {
		t.Fatal(err)
	}
	out, err := parseMooncakeTrace(&b, 0)
	if err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("read back %+v (%v), wrote %+v", out, err, in)
	}
	p := promptMaker{salt: 1, charsPerToken: 4, scale: 1, maxInput: 1 << 20}
	a, c, d := p.prompt(0, out[0]), p.prompt(1, out[1]), p.prompt(2, out[2])
	if a[:400] != c[:400] || a[:400] == d[:400] || a[480:] == c[480:len(a)] {
		t.Fatalf("prefix text: shared %v, other id shared %v", a[:400] == c[:400], a[:400] == d[:400])
	}
}
