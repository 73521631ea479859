// Package grade decides whether a model's answer is right: exact match for
// facts, numeric equality for arithmetic, the right intent and the right
// values for in-car commands (the reply templates of models/intents),
// and word overlap with a reference answer for open questions.
//
// How it fits: the router predictor's labels come from it — a training
// prompt is "local" when the edge model's answer to it grades right
// (models/predictor/train, `phaselessctl model grade`) — and the same
// functions serve shadow evaluation in the fleet's learning loop: Against
// grades a local answer with the cloud's answer (or a human's) as the
// reference. Everything here is pure and safe for concurrent use.
package grade

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"github.com/phaseless/phaseless/models/intents"
)

// Kind is how an answer is compared with its reference.
type Kind string

// The kinds of reference.
const (
	Exact   Kind = "exact"   // a fact: the answer, normalised, is one of Answers
	Number  Kind = "number"  // arithmetic: the answer's last number equals Answers[0]
	Command Kind = "command" // an in-car command: a reply of one of Intents, containing every one of Values
	Open    Kind = "open"    // an open question: word F1 with Answers[0] at least OpenF1
)

// OpenF1 is the word-overlap F1 (content words, see Overlap) at which an
// answer to an open question counts as agreeing with the reference. Half
// the content words shared both ways is a loose bar; the project's models
// clear it only by saying what the reference says.
const OpenF1 = 0.5

// Reference is what a right answer looks like.
type Reference struct {
	Kind    Kind
	Answers []string // Exact: accepted answers; Number: the value; Open: the reference answer
	Intents []string // Command: intents (intents.ReplyMatches) whose reply forms are right
	Values  []string // Command: values the reply must repeat (a city, a temperature)
}

// Verdict is a graded answer.
type Verdict struct {
	OK    bool
	Score float64 // 1 or 0, except Open: the F1
	Why   string  // short, for reports
}

// Grade compares answer with ref.
func Grade(ref Reference, answer string) Verdict {
	answer = strings.TrimSpace(answer)
	switch ref.Kind {
	case Exact:
		a := normalize(answer)
		for _, want := range ref.Answers {
			if a != "" && a == normalize(want) {
				return Verdict{OK: true, Score: 1, Why: "exact"}
			}
		}
		return Verdict{Why: "not " + strings.Join(ref.Answers, " | ")}
	case Number:
		if len(ref.Answers) == 0 {
			return Verdict{Why: "no reference value"}
		}
		want, err := strconv.ParseFloat(ref.Answers[0], 64)
		if err != nil {
			return Verdict{Why: "bad reference value " + ref.Answers[0]}
		}
		got, ok := lastNumber(answer)
		if ok && math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want)) {
			return Verdict{OK: true, Score: 1, Why: "number"}
		}
		return Verdict{Why: "not " + ref.Answers[0]}
	case Command:
		intent := ""
		for _, in := range ref.Intents {
			if intents.ReplyMatches(in, answer) {
				intent = in
				break
			}
		}
		if intent == "" {
			return Verdict{Why: "wrong intent"}
		}
		low := " " + strings.Join(words(answer), " ") + " "
		for _, v := range ref.Values {
			if !strings.Contains(low, " "+strings.Join(words(v), " ")+" ") {
				return Verdict{Why: intent + " without " + v}
			}
		}
		return Verdict{OK: true, Score: 1, Why: intent}
	case Open:
		if len(ref.Answers) == 0 {
			return Verdict{Why: "no reference answer"}
		}
		f := Overlap(answer, ref.Answers[0])
		return Verdict{OK: f >= OpenF1, Score: f, Why: fmt.Sprintf("F1 %.2f", f)}
	}
	return Verdict{Why: fmt.Sprintf("unknown kind %q", ref.Kind)}
}

// Against grades a local answer with another answer as the reference (the
// cloud's, in shadow evaluation): short references (up to MaxExactWords
// words) must match exactly after normalisation, or as numbers when the
// reference is one; longer ones by word overlap (Open).
func Against(local, reference string) Verdict {
	return Grade(ReferenceFrom(reference), local)
}

// MaxExactWords is the longest reference Against compares exactly.
const MaxExactWords = 6

// ReferenceFrom is the Reference Against uses for a reference answer.
func ReferenceFrom(answer string) Reference {
	ws := words(answer)
	if n, ok := lastNumber(answer); ok && len(ws) <= MaxExactWords && strings.Contains(normalize(answer), strconv.FormatFloat(n, 'f', -1, 64)) {
		return Reference{Kind: Number, Answers: []string{strconv.FormatFloat(n, 'f', -1, 64)}}
	}
	if len(ws) <= MaxExactWords {
		return Reference{Kind: Exact, Answers: []string{answer}}
	}
	return Reference{Kind: Open, Answers: []string{answer}}
}

// Parse reads the one-field reference notation of the project's evaluation
// files: "=a|b" (Exact, alternatives), "#391" (Number), "@intent|intent
// value,value" (Command), "~reference answer" (Open).
func Parse(s string) (Reference, error) {
	if s == "" {
		return Reference{}, fmt.Errorf("grade: empty reference")
	}
	body := strings.TrimSpace(s[1:])
	switch s[0] {
	case '=':
		return Reference{Kind: Exact, Answers: strings.Split(body, "|")}, nil
	case '#':
		if _, err := strconv.ParseFloat(body, 64); err != nil {
			return Reference{}, fmt.Errorf("grade: number reference %q: %w", s, err)
		}
		return Reference{Kind: Number, Answers: []string{body}}, nil
	case '@':
		in, vals, _ := strings.Cut(body, " ")
		r := Reference{Kind: Command, Intents: strings.Split(in, "|")}
		if vals = strings.TrimSpace(vals); vals != "" {
			r.Values = strings.Split(vals, ",")
		}
		for _, i := range r.Intents {
			if !intents.Known(i) {
				return Reference{}, fmt.Errorf("grade: %q: no reply templates for intent %q", s, i)
			}
		}
		return r, nil
	case '~':
		return Reference{Kind: Open, Answers: []string{body}}, nil
	}
	return Reference{}, fmt.Errorf("grade: reference %q: want =, #, @ or ~ first", s)
}

// String is the Parse notation of r.
func (r Reference) String() string {
	switch r.Kind {
	case Exact:
		return "=" + strings.Join(r.Answers, "|")
	case Number:
		return "#" + strings.Join(r.Answers, "")
	case Command:
		s := "@" + strings.Join(r.Intents, "|")
		if len(r.Values) > 0 {
			s += " " + strings.Join(r.Values, ",")
		}
		return s
	case Open:
		return "~" + strings.Join(r.Answers, "")
	}
	return "?" + string(r.Kind)
}

// Overlap is the F1 of the content words (lower-cased, stopwords dropped)
// of answer against reference, in [0,1].
func Overlap(answer, reference string) float64 {
	a, r := contentWords(answer), contentWords(reference)
	if len(a) == 0 || len(r) == 0 {
		return 0
	}
	count := map[string]int{}
	for _, w := range r {
		count[w]++
	}
	common := 0
	for _, w := range a {
		if count[w] > 0 {
			count[w]--
			common++
		}
	}
	if common == 0 {
		return 0
	}
	p, rec := float64(common)/float64(len(a)), float64(common)/float64(len(r))
	return 2 * p * rec / (p + rec)
}

var stopwords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`a an the and or of in on at to for from by with as is are was were be been being it its this that
		these those there here you your i we they he she his her their our my me us them what which who how why when where do does did
		can could will would should may might so not no yes if then than into about also just very more most some any all`) {
		stopwords[w] = true
	}
}

func contentWords(s string) []string {
	var out []string
	for _, w := range words(s) {
		if !stopwords[w] {
			out = append(out, w)
		}
	}
	return out
}

// words lower-cases s and splits it into runs of letters and digits; a
// decimal point between digits stays inside its number.
func words(s string) []string {
	rs := []rune(strings.ToLower(s))
	var out []string
	var cur []rune
	for i, r := range rs {
		inNumber := r == '.' && len(cur) > 0 && unicode.IsDigit(cur[len(cur)-1]) && i+1 < len(rs) && unicode.IsDigit(rs[i+1])
		if unicode.IsLetter(r) || unicode.IsDigit(r) || inNumber {
			cur = append(cur, r)
			continue
		}
		if len(cur) > 0 {
			out = append(out, string(cur))
			cur = cur[:0]
		}
	}
	if len(cur) > 0 {
		out = append(out, string(cur))
	}
	return out
}

// normalize is the form two exact answers are compared in: words only,
// lower case, without a leading article.
func normalize(s string) string {
	ws := words(s)
	if len(ws) > 1 && (ws[0] == "the" || ws[0] == "a" || ws[0] == "an") {
		ws = ws[1:]
	}
	return strings.Join(ws, " ")
}

var numberRE = regexp.MustCompile(`-?\d[\d,]*(\.\d+)?`)

// lastNumber is the last number written in s ("The answer is 2,200." → 2200).
func lastNumber(s string) (float64, bool) {
	ms := numberRE.FindAllString(s, -1)
	if len(ms) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(ms[len(ms)-1], ",", ""), 64)
	return v, err == nil
}
