package train

import (
	"bytes"
	"os"
	"testing"

	"github.com/phaseless/phaseless/models/textfeat"
)

// TestEdgePromptsUpToDate: textfeat's edge block compares requests with
// the prompts the edge model was trained on; the embedded list must be the
// corpus's. UPDATE_EDGE_PROMPTS=1 rewrites it (after a corpus change or a
// retrained edge model, before `phaselessctl model grade` and `model train`).
func TestEdgePromptsUpToDate(t *testing.T) {
	want, err := EdgePrompts()
	if err != nil {
		t.Fatal(err)
	}
	path := "../../textfeat/" + textfeat.EdgePromptsFile
	if os.Getenv("UPDATE_EDGE_PROMPTS") != "" {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", path, len(want))
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not the edge corpus's prompt list: run UPDATE_EDGE_PROMPTS=1 go test -run TestEdgePromptsUpToDate ./models/predictor/train", path)
	}
	if n := textfeat.EdgePromptCount(); n < 1000 {
		t.Errorf("edge block indexes %d prompts, want thousands", n)
	}
}
