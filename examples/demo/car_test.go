package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/lmtrain/corpus"
)

// TestCarRequestsAreFresh: the demo's car requests are none of the tool
// evaluation sets' requests nor a training template's wording, so the demo
// shows the model on words it was neither trained nor measured on.
func TestCarRequestsAreFresh(t *testing.T) {
	sets, err := filepath.Glob("../../models/edgemodel/testdata/toolcalls*.jsonl")
	if err != nil || len(sets) < 3 {
		t.Fatalf("evaluation sets: %v %v", sets, err)
	}
	seen := map[string]string{}
	for _, set := range sets {
		f, err := os.Open(set)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var c struct {
				Request string `json:"request"`
			}
			if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
				t.Fatal(err)
			}
			seen[strings.ToLower(c.Request)] = set
		}
		f.Close()
	}
	for _, r := range carRequests {
		if set, ok := seen[strings.ToLower(r)]; ok {
			t.Errorf("demo request %q is in %s", r, set)
		}
		if corpus.FromToolTemplate(r) {
			t.Errorf("demo request %q is a training template's wording", r)
		}
	}
}
