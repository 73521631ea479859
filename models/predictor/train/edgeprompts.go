package train

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"sort"

	"github.com/phaseless/phaseless/models/lmtrain/corpus"
)

// EdgePrompts is the content of textfeat's embedded EdgePromptsFile: the
// distinct prompts (PromptKey) the shipped edge model was trained on
// (corpus.Edge(EdgeCorpusSeed).Train), sorted, one a line, gzip without a
// name or time so the same corpus gives the same bytes.
func EdgePrompts() ([]byte, error) {
	edge, err := corpus.Edge(EdgeCorpusSeed)
	if err != nil {
		return nil, fmt.Errorf("edge prompts: %w", err)
	}
	seen := map[string]bool{}
	var keys []string
	for _, e := range edge.Train {
		k := PromptKey(e.Prompt)
		if k != "" && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	for _, k := range keys {
		fmt.Fprintln(zw, k)
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
