package train

import (
	"compress/gzip"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/phaseless/phaseless/models/grade"
	"github.com/phaseless/phaseless/models/textfeat"
)

// MMLUPrompt is one RouteLLM MMLU row: a multiple-choice prompt and whether
// the weak (Mixtral-8x7B) and strong (GPT-4) models answered it correctly.
type MMLUPrompt struct {
	Subject string
	Prompt  string
	Weak    bool
	Strong  bool
}

// Utterance is one CLINC150 utterance. Intent "oos" marks out-of-scope.
type Utterance struct {
	Text   string
	Intent string
	Split  string // train | val | test
}

// Data is the routing corpus: ../shared/data/routing or the subset the repo
// keeps in models/data/routing.
type Data struct {
	MMLU  []MMLUPrompt
	CLINC []Utterance
	// Fresh is the project's own evaluation set (FreshFile): requests
	// written as people say them, never used for training.
	Fresh []Example
	// Fresh2 is the second held-out set (Fresh2File), never used for
	// training or for a choice.
	Fresh2 []Example
	// Fresh3 is the third held-out set (Fresh3File), likewise.
	Fresh3 []Example
	// Dev is the hand-written development set (DevFile, then Dev2File
	// under its own sources), never trained on.
	Dev []Example
	// Spoken are hand-written training requests (SpokenFile).
	Spoken []Example
}

// LoadRouting reads dir/mmlu/mmlu_<subject>.csv[.gz] and
// dir/clinc150-small.json[.gz].
func LoadRouting(dir string) (*Data, error) {
	d := &Data{}
	files, err := filepath.Glob(filepath.Join(dir, "mmlu", "mmlu_*.csv*"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("load routing data: no mmlu/mmlu_*.csv in %s", dir)
	}
	sort.Strings(files)
	for _, f := range files {
		subject := strings.TrimPrefix(filepath.Base(f), "mmlu_")
		subject = strings.TrimSuffix(strings.TrimSuffix(subject, ".gz"), ".csv")
		rows, err := readMMLU(f, subject)
		if err != nil {
			return nil, err
		}
		d.MMLU = append(d.MMLU, rows...)
	}
	clinc, err := openMaybeGzip(filepath.Join(dir, "clinc150-small.json"))
	if err != nil {
		return nil, fmt.Errorf("load routing data: %w", err)
	}
	defer clinc.Close()
	var raw map[string][][2]string
	if err := json.NewDecoder(clinc).Decode(&raw); err != nil {
		return nil, fmt.Errorf("load routing data: clinc150: %w", err)
	}
	for _, split := range []string{"train", "val", "test", "oos_train", "oos_val", "oos_test"} {
		for _, u := range raw[split] {
			d.CLINC = append(d.CLINC, Utterance{Text: u[0], Intent: u[1], Split: strings.TrimPrefix(split, "oos_")})
		}
	}
	if d.Fresh, err = loadFresh(filepath.Join(dir, FreshFile), SourceFreshOpen, SourceFreshCar, false); err != nil {
		return nil, err
	}
	if d.Fresh2, err = loadFresh(filepath.Join(dir, Fresh2File), SourceFresh2Open, SourceFresh2Car, false); err != nil {
		return nil, err
	}
	if d.Fresh3, err = loadFresh(filepath.Join(dir, Fresh3File), SourceFresh3Open, SourceFresh3Car, false); err != nil {
		return nil, err
	}
	if d.Dev, err = loadFresh(filepath.Join(dir, DevFile), SourceDevOpen, SourceDevCar, false); err != nil {
		return nil, err
	}
	dev2, err := loadFresh(filepath.Join(dir, Dev2File), SourceDev2Open, SourceDev2Car, false)
	if err != nil {
		return nil, err
	}
	d.Dev = append(d.Dev, dev2...)
	if d.Spoken, err = loadFresh(filepath.Join(dir, SpokenFile), SourceSpokenOpen, SourceSpokenCar, true); err != nil {
		return nil, err
	}
	return d, nil
}

func readMMLU(path, subject string) ([]MMLUPrompt, error) {
	f, err := openMaybeGzip(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = 3
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if header[0] != "prompt" {
		return nil, fmt.Errorf("%s: header %q, want prompt,<weak>,<strong>", path, header)
	}
	var out []MMLUPrompt
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, MMLUPrompt{Subject: subject, Prompt: rec[0], Weak: rec[1] == "True", Strong: rec[2] == "True"})
	}
}

// openMaybeGzip opens path, or path.gz decompressed, whichever exists; a
// path ending in .gz is decompressed.
func openMaybeGzip(path string) (io.ReadCloser, error) {
	if !strings.HasSuffix(path, ".gz") {
		if f, err := os.Open(path); err == nil {
			return f, nil
		}
		path += ".gz"
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	z, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{z, f}, nil
}

// HeldOut reports whether an MMLU subject or a CLINC intent belongs to the
// evaluation side of the split. The rule depends only on the name (not on
// the seed or the data), so every run and every data subset evaluates on
// the same unseen subjects and intents: about one in five.
func HeldOut(name string) bool {
	h := fnv.New32a()
	h.Write([]byte(name))
	return h.Sum32()%5 == 0
}

// Example is one training or evaluation row.
type Example struct {
	Text     string // the prompt, where known (not for telemetry)
	Features []float32
	Label    float32 // 1 = needs the cloud
	Source   string  // mmlu | clinc | clinc-oos | telemetry
	Group    string  // MMLU subject or CLINC intent
	Weak     bool    // MMLU: Mixtral right; graded sets: the edge model's answer graded right
	Strong   bool    // MMLU: GPT-4 right; graded sets: the cloud model's answer graded right
	// Answer is the corpus's reference reply (in-car, fact and Wikipedia
	// prompts), and Ref the grader's reference where a file states it (the
	// fresh set); see Reference.
	Answer string
	Ref    *grade.Reference
	// Graded: the example has a reference and EdgeOK / CloudOK say whether
	// the edge and cloud models' answers grade right (ApplyGraded).
	Graded, EdgeOK, CloudOK bool
}

// RouteLLM labels (LabelsRouteLLM, documented in docs/predictor.md):
//   - MMLU: 1 when the weak model answered wrong (a small model cannot keep
//     it), else 0.
//   - CLINC in-scope commands: 0 (the device answers them); out-of-scope: 1.
func mmluExample(p MMLUPrompt) Example {
	e := Example{Text: p.Prompt, Features: textfeat.Extract(p.Prompt), Source: "mmlu", Group: p.Subject, Weak: p.Weak, Strong: p.Strong}
	if !p.Weak {
		e.Label = 1
	}
	return e
}

func clincExample(u Utterance) Example {
	if u.Intent == "oos" {
		return Example{Text: u.Text, Features: textfeat.Extract(u.Text), Label: 1, Source: "clinc-oos", Group: "oos"}
	}
	return Example{Text: u.Text, Features: textfeat.Extract(u.Text), Source: "clinc", Group: u.Intent}
}

// TrainExamples returns the training side: MMLU prompts of subjects not
// held out; CLINC train and val utterances of intents not held out, plus the
// out-of-scope train and val utterances.
func (d *Data) TrainExamples() []Example {
	var out []Example
	for _, p := range d.MMLU {
		if !HeldOut(p.Subject) {
			out = append(out, mmluExample(p))
		}
	}
	for _, u := range d.CLINC {
		if u.Split == "test" || (u.Intent != "oos" && HeldOut(u.Intent)) {
			continue
		}
		out = append(out, clincExample(u))
	}
	return out
}

// EvalSets returns the evaluation side: MMLU prompts of held-out subjects,
// and CLINC test utterances of held-out intents plus the out-of-scope test
// utterances.
func (d *Data) EvalSets() (mmlu, clinc []Example) {
	for _, p := range d.MMLU {
		if HeldOut(p.Subject) {
			mmlu = append(mmlu, mmluExample(p))
		}
	}
	for _, u := range d.CLINC {
		if u.Split == "test" && (u.Intent == "oos" || HeldOut(u.Intent)) {
			clinc = append(clinc, clincExample(u))
		}
	}
	return mmlu, clinc
}
