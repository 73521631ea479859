// Package corpus builds the training text of the project's default language
// models from data shipped in this repository (data/, with LICENSE and
// ATTRIBUTION.md): CLINC150 requests paired with replies the project wrote for
// the in-vehicle edge model, plus world and science facts the project wrote
// for the general cloud model. Wikipedia sentences (Wiki) serve as examples of
// general questions for the router predictor's training. Everything is seeded, so one command rebuilds the same corpus.
package corpus

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/phaseless/phaseless/models/intents"
)

//go:embed data/clinc150-incar.json
var clincJSON []byte

//go:embed data/wiki-sentences.txt
var wikiText string

// Example is one chat exchange.
type Example struct {
	Prompt, Answer string
	// System, when set, is a system turn before the request (the tools
	// turn of EdgeWithTools).
	System string
	Intent string // CLINC150 intent, "incar-N" (N-th in-car template group) or "wiki"
}

// Split is a corpus with its held-out part. No prompt text of Test appears in Train.
type Split struct {
	Train, Test []Example
}

// EdgeSources and CloudSources list the data behind each corpus with its
// licence, for the models' metadata.
var (
	EdgeSources = []string{
		"CLINC150 (clinc/oos-eval data_small.json; Larson et al., EMNLP 2019), CC BY 3.0: utterances of 64 intents",
		"Replies and in-car request templates written by the Phaseless project, Apache-2.0",
	}
	CloudSources = append(slices.Clip(EdgeSources),
		"World and science facts (capitals, continents, languages, currencies of 64 countries; symbols of 25 elements) and their questions, written by the Phaseless project, Apache-2.0")
)

// Chat renders e in models/lm/chatfmt.Prompt's template followed by the
// reply and the start of the next turn, "<|", which is the engine's stop
// sequence (chatfmt.TurnEnd): the model learns to end its turn there.
func (e Example) Chat() string {
	if e.System != "" {
		return "<|system|>\n" + e.System + "\n<|user|>\n" + strings.TrimSpace(e.Prompt) + "\n<|assistant|>\n" + e.Answer + "\n<|"
	}
	return "<|user|>\n" + strings.TrimSpace(e.Prompt) + "\n<|assistant|>\n" + e.Answer + "\n<|"
}

// filler draws slot values; one filler is used per example so a slot repeated
// in request and reply has the same value.
type filler struct {
	rng  *rand.Rand
	vals map[string]string
}

var slotRE = regexp.MustCompile(`\{([a-z]+)\}`)

func (f *filler) value(name string) string {
	if v, ok := f.vals[name]; ok {
		return v
	}
	var v string
	switch {
	case name == "time":
		v = fmt.Sprintf("%d:%02d %s", 1+f.rng.IntN(12), 5*f.rng.IntN(12), []string{"am", "pm"}[f.rng.IntN(2)])
	case name == "rate":
		v = strconv.FormatFloat(0.5+f.rng.Float64()*150, 'f', 2, 64)
	case numberSlots[name] != [2]int{}:
		r := numberSlots[name]
		v = strconv.Itoa(r[0] + f.rng.IntN(r[1]-r[0]+1))
	case slotValues[name] != nil:
		v = slotValues[name][f.rng.IntN(len(slotValues[name]))]
	case extraSlots[name] != nil:
		v = extraSlots[name][f.rng.IntN(len(extraSlots[name]))]
	default:
		panic("corpus: no values for slot " + name)
	}
	f.vals[name] = v
	return v
}

func (f *filler) fill(tmpl string) string {
	return slotRE.ReplaceAllStringFunc(tmpl, func(m string) string { return f.value(m[1 : len(m)-1]) })
}

func newFiller(rng *rand.Rand) *filler { return &filler{rng: rng, vals: map[string]string{}} }

var calcRE = regexp.MustCompile(`(\d+)\s*([-+*x/]|plus|minus|times|divided by)\s*(\d+)`)

// calculatorAnswer computes simple "a op b" requests so the replies are right.
func calculatorAnswer(u string) (string, bool) {
	m := calcRE.FindStringSubmatch(u)
	if m == nil {
		return "", false
	}
	a, _ := strconv.Atoi(m[1])
	b, _ := strconv.Atoi(m[3])
	var r float64
	switch m[2] {
	case "+", "plus":
		r = float64(a + b)
	case "-", "minus":
		r = float64(a - b)
	case "*", "x", "times":
		r = float64(a * b)
	default:
		if b == 0 {
			return "", false
		}
		r = float64(a) / float64(b)
	}
	return "The answer is " + strconv.FormatFloat(r, 'f', -1, 64) + ".", true
}

// reply picks and fills one of the intent's replies for utterance u.
func reply(intent, u string, rng *rand.Rand) string {
	if intent == "calculator" {
		if a, ok := calculatorAnswer(u); ok {
			return a
		}
		return "Let me show that calculation on the screen."
	}
	ts := intents.Replies[intent]
	return newFiller(rng).fill(ts[rng.IntN(len(ts))])
}

type clincFile struct {
	Train, Val, Test [][2]string
}

// Edge is the in-vehicle assistant's corpus: every CLINC150 train and val
// utterance of the handled intents with a reply (twice, with different slot
// draws), CLINC150's test utterances held out, and the in-car templates
// expanded with slot variation, a fifth of them held out.
func Edge(seed uint64) (Split, error) {
	var f clincFile
	if err := json.Unmarshal(clincJSON, &f); err != nil {
		return Split{}, fmt.Errorf("corpus: clinc150: %w", err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	var s Split
	for _, set := range [][][2]string{f.Train, f.Val} {
		for _, r := range set {
			if _, ok := intents.Replies[r[1]]; !ok {
				return Split{}, fmt.Errorf("corpus: no replies for intent %q", r[1])
			}
			for range 2 {
				s.Train = append(s.Train, Example{Prompt: r[0], Answer: reply(r[1], r[0], rng), Intent: r[1]})
			}
		}
	}
	for _, r := range f.Test {
		s.Test = append(s.Test, Example{Prompt: r[0], Answer: reply(r[1], r[0], rng), Intent: r[1]})
	}
	seenTest := map[string]bool{}
	for gi, t := range intents.InCar {
		for range 60 {
			fl := newFiller(rng)
			e := Example{Prompt: fl.fill(t.Asks[rng.IntN(len(t.Asks))]), Answer: fl.fill(t.Replies[rng.IntN(len(t.Replies))]), Intent: intents.InCarIntent(gi)}
			// Hold out by prompt text so a test prompt is never trained on.
			if held(e.Prompt, seed) || seenTest[e.Prompt] {
				seenTest[e.Prompt] = true
				s.Test = append(s.Test, e)
			} else {
				s.Train = append(s.Train, e)
			}
		}
	}
	s.Train = slices.DeleteFunc(s.Train, func(e Example) bool { return seenTest[e.Prompt] })
	shuffle(rng, s.Train)
	shuffle(rng, s.Test)
	return s, nil
}

// held puts about a fifth of distinct prompts in the test split, by hash so
// the choice does not depend on generation order.
func held(prompt string, seed uint64) bool {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", seed, prompt)
	return h.Sum64()%5 == 0
}

var stopwords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`the a an and or of in on at to for from by with as is was were are be been
		his her its their it he she they this that these those which who whom what when where while after before
		into over under also has had have not but than then there other some many most more such only first one two
		three new known later during between would could about can may will up out all no so any each both after`) {
		stopwords[w] = true
	}
}

// topic picks the sentence's most specific word: the longest word that is not
// a stopword (ties to the first), the thing a "tell me about" question names.
func topic(sentence string) string {
	best := ""
	for _, w := range strings.Fields(sentence) {
		if !stopwords[w] && len(w) > len(best) {
			best = w
		}
	}
	return best
}

// wikiAsks are the ways a general question names its topic. Beyond "tell
// me about", they cover the question words people use for knowledge they
// do not have (who, why, how does, when, what causes), so that a router
// learns the form of an open question rather than one phrase.
var wikiAsks = []string{"tell me about {t}", "what do you know about {t}", "say something about {t}", "{t}?", "can you tell me about {t}", "explain {t}",
	"what is {t}", "who was {t}", "what was {t}", "how does {t} work", "why is {t} important", "explain how {t} works",
	"what does {t} mean", "when did {t} happen", "give me a summary of {t}", "what's the history of {t}", "how did {t} start",
	"who invented {t}", "is {t} real", "what causes {t}", "describe {t}", "why do people care about {t}", "what are the facts about {t}",
	"how big is {t}", "how old is {t}", "teach me about {t}", "i want to learn about {t}", "who discovered {t}"}

// Wiki turns each Wikipedia sentence into a question about its topic word and
// the sentence as the reply; 5% of sentences are held out.
func Wiki(seed uint64) Split {
	rng := rand.New(rand.NewPCG(seed, 2))
	var s Split
	for _, line := range strings.Split(wikiText, "\n") {
		line = strings.TrimSpace(line)
		t := topic(line)
		if len(line) < 20 || len(line) > 220 || t == "" {
			continue
		}
		ans := strings.ToUpper(line[:1]) + line[1:] + "."
		e := Example{Prompt: strings.ReplaceAll(wikiAsks[rng.IntN(len(wikiAsks))], "{t}", t), Answer: ans, Intent: "wiki"}
		if rng.IntN(20) == 0 {
			s.Test = append(s.Test, e)
		} else {
			s.Train = append(s.Train, e)
		}
	}
	return s
}

// factCopies is how often each trained (fact, wording) pair appears in the
// cloud corpus: 12 makes about 17k fact examples beside the edge corpus's
// 9.9k, so about 60% of what the cloud model reads is facts — each of the
// 345 facts is seen a few hundred times in a preset run, which is what a
// model this size needs to recall it.
const factCopies = 12

// Cloud is the general model's corpus: the world and science facts plus the
// edge corpus, so the cloud model also answers car requests.
func Cloud(seed uint64) (Split, error) {
	e, err := Edge(seed)
	if err != nil {
		return Split{}, err
	}
	f := Facts(seed, factCopies)
	// Car requests get the fact questions' capitalisation and question
	// marks too: a first run that varied only the fact questions learned
	// "capitalised means a fact" ("Turn the fan to level 2" → "France.").
	rng := rand.New(rand.NewPCG(seed, 3))
	for _, set := range [][]Example{e.Train, e.Test} {
		for i := range set {
			set[i].Prompt = typed(set[i].Prompt, rng)
		}
	}
	s := Split{Train: append(f.Train, e.Train...), Test: append(f.Test, e.Test...)}
	shuffle(rng, s.Train)
	shuffle(rng, s.Test)
	return s, nil
}

func shuffle(rng *rand.Rand, xs []Example) {
	rng.Shuffle(len(xs), func(i, j int) { xs[i], xs[j] = xs[j], xs[i] })
}

// CalculatorValue is the exact result of a simple "a op b" request, the
// value the calculator intent's reply should state, and false when the
// request is not one.
func CalculatorValue(u string) (float64, bool) {
	a, ok := calculatorAnswer(u)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimPrefix(a, "The answer is "), "."), 64)
	return v, err == nil
}
