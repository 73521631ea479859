package train

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/phaseless/phaseless/models/intents"
	"github.com/phaseless/phaseless/models/lmtrain/corpus"
	"github.com/phaseless/phaseless/models/textfeat"
)

// Label sets a run can train on (Options.Labels).
const (
	// LabelsEdge (the default) labels a request by what the device's own
	// edge model can answer: the CLINC150 intents its corpus covers and the
	// in-car requests it was trained on are local, everything else cloud.
	LabelsEdge = "edge"
	// LabelsRouteLLM is the first predictor's label set: RouteLLM's
	// "Mixtral-8x7B answered wrong" on MMLU, every CLINC150 in-scope
	// intent local, out-of-scope cloud (docs/predictor.md, "RouteLLM labels").
	LabelsRouteLLM = "routellm"
)

// WikiEvery keeps one Wikipedia question in WikiEvery (by hash of the
// prompt): 14k "tell me about" questions of one form add little over 3.5k,
// and each one costs a graded reply in the cache.
const WikiEvery = 4

// EdgeCorpusSeed is the seed the shipped edge model's corpus was built with
// (models/lmtrain presets): the in-car requests the edge model held out are
// the ones the router is tested on.
const EdgeCorpusSeed = 1

// Sources of the edge label set (Example.Source). Local (label 0):
// SourceEdgeCLINC and SourceInCar. Cloud (label 1): the rest.
const (
	SourceEdgeCLINC  = "edge-clinc"  // CLINC150 utterance of an intent in intents.CLINC()
	SourceInCar      = "incar"       // the edge corpus's in-car template requests
	SourceOtherCLINC = "clinc-other" // CLINC150 utterance of any other intent (banking, home, small talk…)
	SourceOOS        = "clinc-oos"   // CLINC150 out-of-scope utterance
	SourceMMLU       = "mmlu"        // RouteLLM MMLU exam question
	SourceWiki       = "wiki"        // general-knowledge question about a Wikipedia sentence's topic
	SourceFacts      = "facts"       // world or science fact question the cloud model answers (corpus.Facts)
	// SourceTelemetry is a fleet request labelled by its outcome and
	// quality signals (cloud/fleetapi/trainset), either label.
	SourceTelemetry = "telemetry"
)

// EdgeSources lists the edge label set's sources, local ones first.
var EdgeSources = []string{SourceEdgeCLINC, SourceInCar, SourceSpokenCar, SourceOtherCLINC, SourceOOS, SourceMMLU, SourceWiki, SourceFacts, SourceSpokenOpen}

// AllEdgeSources adds the fresh set's sources, which only evaluation reads.
var AllEdgeSources = append(slices.Clip(EdgeSources), SourceDevCar, SourceDevOpen, SourceDev2Car, SourceDev2Open, SourceFreshCar, SourceFreshOpen, SourceFresh2Car, SourceFresh2Open, SourceFresh3Car, SourceFresh3Open)

// IsCarSource reports whether a source holds requests the edge model
// answers: the ones that should stay on the device.
func IsCarSource(source string) bool {
	return source == SourceEdgeCLINC || source == SourceInCar || source == SourceSpokenCar
}

// EdgeSourceWeights are the default loss shares for the edge label set:
// half the loss on the device's requests, half on the others, spread over
// their sources so that thousands of CLINC150 utterances of other domains
// do not drown 100 out-of-scope ones, and the in-car templates (a few
// hundred distinct prompts) count as much as a CLINC domain would. With
// graded labels and the fresh set as the judge (docs/predictor.md), the
// varied Wikipedia questions (0.2) and out-of-scope requests (0.15) carry
// most of what open questions look like; MMLU (long exam questions, sent
// to the cloud whatever their weight) needs little. Measured on held-out
// data, seed 1: the version-1 shares (wiki 0.05, out-of-scope 0.1, other
// CLINC 0.15, MMLU 0.1) sent 53.6% of fresh open questions and 7.6% of
// fresh car commands to the cloud, these 54.9% and 4.3%.
//
// The spoken set (SpokenFile, hand-written requests in the forms people
// use) has the largest open share and as much as the in-car templates on
// the car side. Chosen with EdgeL2 in one step on the development set
// (seed 1, no probe): spoken 0.15/0.1 with L2 0.03 sent 66.9% of dev.tsv's
// open questions and 4.5% of its car commands to the cloud, 0.3/0.15 with
// L2 0.01 77.5% and 5.5%. With 191 more spoken requests (version 4) and
// the threshold chosen on the development set (ChooseDevThreshold), the
// spoken open share 0.5 left the smaller of dev's two goal shares at
// 89.1–93.1% over seeds 1–3 (32 hidden units), against 89.1–90.0% for
// 0.3; with EdgeHidden's 64 units 0.7 and a spoken car share of 0.25 were
// no better than 0.5 and 0.15 (docs/predictor.md).
var EdgeSourceWeights = map[string]float64{
	SourceEdgeCLINC: 0.35, SourceInCar: 0.15, SourceSpokenCar: 0.15,
	SourceOtherCLINC: 0.1, SourceOOS: 0.15, SourceMMLU: 0.05, SourceWiki: 0.2, SourceFacts: 0.1, SourceSpokenOpen: 0.5,
	SourceTelemetry: 0.2,
}

// EdgeHidden is the hidden width of edge-label runs (Config.Hidden unset;
// the RouteLLM runs keep 32). Measured on the development set with the
// spoken open share 0.5, seeds 1–3 (docs/predictor.md, "Version 4"): at
// the threshold ChooseDevThreshold picks, the smaller of dev's two goal
// shares was 90.9–92.5% with 64 units and 89.1–93.1% with 32. The model
// is 58.5 KB, under the 64 KB budget.
const EdgeHidden = 64

// EdgeL2 is the weight decay of edge-label runs (Config.L2 unset), chosen
// with the spoken shares above (the RouteLLM runs keep 0.03).
const EdgeL2 = 0.01

// EdgeSplit is the edge label set split by prompt: no normalised prompt
// text is in two of Train, Val and Test, and each holds a prompt once.
type EdgeSplit struct {
	Train, Val, Test []Example
	// Fresh is the project's own evaluation set (Data.Fresh), never
	// trained on and disjoint from the rest by prompt.
	Fresh []Example
	// Fresh2 is the second held-out set (Data.Fresh2), likewise.
	Fresh2 []Example
	// Fresh3 is the third held-out set (Data.Fresh3), likewise.
	Fresh3 []Example
	// Dev is the development set (Data.Dev), likewise never trained on.
	Dev []Example
}

// EdgeSplit labels the corpus for the edge model and splits it by prompt:
//   - CLINC150: its own train / val / test splits (the demo's workload is
//     drawn from test, so the router never trained on it);
//   - MMLU: the subjects HeldOut names go to Test (unseen subjects), an
//     eighth of the other prompts by hash to Val;
//   - in-car requests, Wikipedia and fact questions (models/lmtrain/corpus, seed
//     EdgeCorpusSeed): what the edge or cloud corpus held out goes to Test,
//     an eighth of the rest by hash to Val.
//
// A prompt whose normalised text is in Test is then dropped from Val and
// Train, and one in Val from Train, so the splits share no prompt text.
func (d *Data) EdgeSplit() (*EdgeSplit, error) {
	local := map[string]bool{}
	for _, in := range intents.CLINC() {
		local[in] = true
	}
	var train, val, test []Example
	add := func(e Example, split string) {
		switch split {
		case "test":
			test = append(test, e)
		case "val":
			val = append(val, e)
		default:
			train = append(train, e)
		}
	}
	byHash := func(text string) string {
		if promptBucket(text)%8 == 0 {
			return "val"
		}
		return "train"
	}
	for _, u := range d.CLINC {
		e := Example{Text: u.Text, Features: textfeat.ExtractLeaveOut(u.Text), Group: u.Intent, Label: 1}
		switch {
		case u.Intent == "oos":
			e.Source = SourceOOS
		case local[u.Intent]:
			e.Source, e.Label = SourceEdgeCLINC, 0
		default:
			e.Source = SourceOtherCLINC
		}
		add(e, u.Split)
	}
	for _, p := range d.MMLU {
		e := Example{Text: p.Prompt, Features: textfeat.ExtractLeaveOut(p.Prompt), Label: 1, Source: SourceMMLU, Group: p.Subject, Weak: p.Weak, Strong: p.Strong}
		if HeldOut(p.Subject) {
			add(e, "test")
		} else {
			add(e, byHash(p.Prompt))
		}
	}
	edge, err := corpus.Edge(EdgeCorpusSeed)
	if err != nil {
		return nil, fmt.Errorf("edge split: %w", err)
	}
	wiki := corpus.Wiki(EdgeCorpusSeed)
	facts := corpus.Facts(EdgeCorpusSeed, 1)
	for _, set := range []struct {
		ex     []corpus.Example
		isTest bool
	}{{edge.Train, false}, {edge.Test, true}, {wiki.Train, false}, {wiki.Test, true}, {facts.Train, false}, {facts.Test, true}} {
		for _, c := range set.ex {
			var e Example
			_, fact := corpus.FactAnswer(c.Intent)
			switch {
			case strings.HasPrefix(c.Intent, "incar-"):
				e = Example{Source: SourceInCar, Label: 0}
			case c.Intent == "wiki":
				e = Example{Source: SourceWiki, Label: 1}
			case fact:
				e = Example{Source: SourceFacts, Label: 1}
			default:
				continue // CLINC150 utterances come from the routing data above
			}
			if e.Source == SourceWiki && wikiBucket(c.Prompt)%WikiEvery != 0 {
				continue
			}
			e.Text, e.Features, e.Group, e.Answer = c.Prompt, textfeat.ExtractLeaveOut(c.Prompt), c.Intent, c.Answer
			if set.isTest {
				add(e, "test")
			} else {
				add(e, byHash(c.Prompt))
			}
		}
	}

	for _, e := range d.Spoken {
		add(e, byHash(e.Text))
	}

	s := &EdgeSplit{}
	seen := map[string]bool{}
	keep := func(ex []Example) []Example {
		var out []Example
		for _, e := range ex {
			k := PromptKey(e.Text)
			if !seen[k] {
				seen[k] = true
				out = append(out, e)
			}
		}
		return out
	}
	// Test first, then Val, then Train: a prompt lands in the first split
	// that claims it.
	s.Test = keep(test)
	s.Val = keep(val)
	s.Train = keep(train)
	s.Fresh = slices.Clone(d.Fresh)
	s.Fresh2 = slices.Clone(d.Fresh2)
	s.Fresh3 = slices.Clone(d.Fresh3)
	s.Dev = slices.Clone(d.Dev)
	return s, nil
}

// PromptKey is the text two prompts share when they are "the same prompt"
// for the split: normalised (textfeat.Normalize), lower-cased, white space
// collapsed.
func PromptKey(text string) string {
	return strings.Join(strings.Fields(strings.ToLower(textfeat.Normalize(text))), " ")
}

// wikiBucket draws the Wikipedia subsample (WikiEvery) with its own salt:
// promptBucket's would correlate with the validation split.
func wikiBucket(text string) uint64 { return keyHash("predictor-wiki/", text) }

func promptBucket(text string) uint64 { return keyHash("predictor-split/", text) }

// keyHash is FNV-1a of salt and the prompt key, finished with a 64-bit
// mixer: the low bits of FNV-1a depend only on the low bits of the bytes,
// so "hash mod 8" put half of the Wikipedia questions (which end alike) in
// one bucket before the mixer.
func keyHash(salt, text string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(salt))
	h.Write([]byte(PromptKey(text)))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}
