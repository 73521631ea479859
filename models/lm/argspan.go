package lm

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/toolprior"
)

// The argument rule. At a copied string's choice point (the spans of the
// request a value may be) the tool prior's span head knows the arguments
// of the tools the model was taught ("destination", "query", "name"); an
// app's own tool is new to it and to the byte-level model alike, whose own
// likelihood ranks a frequent word first ("navigate to Denver" gave
// "to"; "add eggs to the shopping list" gave item "the shopping"). For
// those, the engine adds a rule read off the request and the tool's own
// schema, as slot fillers without training data do: a value is the
// request's content words, not the words that ask for the tool (its name
// and description, less those of the argument itself: "lights" asks for
// lights_on, "room" may be in its room), not the request's opening verb,
// not words another argument of the call already took; it does not begin
// or end with a function word ("the", "to", "my"); a longer run of content
// words, a capitalised word inside the request, and the shape of the
// description's example ("Clock time, e.g. 6:30" → "5:45") count for it.
// The model's own score still breaks ties. The weights were chosen on
// models/edgemodel/testdata/homecalls_dev.jsonl alone; what the rules read
// (argument names, "%", whole-word numbers, clause boundaries) was then
// corrected from the misses of homecalls.jsonl, and homecalls2.jsonl,
// written before that, is the held-out measure (docs/tools.md).
//
// The tool rule (toolScore) does the same at the tool point: which tool
// the request's words name, from the words of each tool's name and
// description and the values its arguments would take.
//
// Both apply to models without a chat template (the byte-level models
// trained here) to requests that offer a tool the tool prior does not
// know, where the prior abstains; a model with its own template reads the
// tools in its prompt and decides alone.

// Weights of the argument rule, per feature, in the units of a choice
// score (a mean log-probability per token).
const (
	argCommandWord  = 3.0  // each word that asks for the tool
	argEdgeFunction = 2.0  // a function word at either end
	argOpeningWord  = 2.0  // the span starts the request (its verb)
	argTaken        = 5.0  // overlaps a value the call already holds
	argInnerFunc    = 1.0  // each function word inside
	argPerWord      = 0.25 // each word
	argEndsRequest  = 0.75 // the span ends the request
	argCapital      = 1.0  // each capitalised word, but the request's first
	argShape        = 2.0  // the shape of the description's example
	// argScale multiplies the rule against the model's own score, whose
	// spread between a frequent word and a name it never saw is several
	// nats a token: the rule decides, the model breaks its ties.
	argScale = 10.0
)

// argRule is what the rule reads from a request: its text and, per tool,
// the words that ask for it and its arguments' descriptions.
type argRule struct {
	text  string
	words []string // the request's words, normalised
	tools map[string]argTool
}

type argTool struct {
	name, words map[string]bool            // words of the tool's name; of its name and description
	nameStems   map[string]bool            // the name's words, stemmed
	descStems   map[string]bool            // the description's words, stemmed
	args        map[string]map[string]bool // argument → words of its name and description
	keys        map[string]map[string]bool // argument → words of its name
	shape       map[string]string          // argument → shape of its description's example
	numbers     map[string]bool            // the arguments that are numbers
	bounds      [][2]float64               // the integer arguments' bounds
	enums       []string                   // the string enums' values
}

// argRuleFor builds the rule for req, or nil where it does not apply: no
// tools, a model with its own chat template, or no user turn last.
func (e *Engine) argRuleFor(req *llm.Request) *argRule {
	n := len(req.Messages)
	if !req.HasTools() || e.m.HasChatTemplate() || e.cfg.ByteChoices || n == 0 || req.Messages[n-1].Role != "user" {
		return nil
	}
	known := map[string]bool{}
	if p := e.priorFor(); p != nil {
		for _, l := range p.Labels {
			if tool, _, err := toolprior.ParseLabel(l); err == nil {
				known[tool] = true
			}
		}
	}
	if !slices.ContainsFunc(req.Tools, func(t llm.Tool) bool { return !known[t.Name] }) {
		return nil // the prior serves every tool offered
	}
	// One tool it does not know and the prior abstains from the whole
	// call (toolprior.go): the rule serves every tool offered.
	r := &argRule{text: req.Messages[n-1].Content, tools: map[string]argTool{}}
	r.words = ruleWords(r.text)
	for _, t := range req.Tools {
		at := argTool{name: wordSet(t.Name), words: wordSet(t.Name + " " + t.Description),
			nameStems: stemSet(t.Name), descStems: stemSet(t.Description), args: map[string]map[string]bool{},
			keys: map[string]map[string]bool{}, shape: map[string]string{}, numbers: map[string]bool{}}
		var schema struct {
			Properties map[string]struct {
				Type        any      `json:"type"`
				Description string   `json:"description"`
				Enum        []any    `json:"enum"`
				Minimum     *float64 `json:"minimum"`
				Maximum     *float64 `json:"maximum"`
			} `json:"properties"`
		}
		_ = json.Unmarshal(t.Parameters, &schema) // the grammar compiled it already
		for name, p := range schema.Properties {
			at.args[name], at.keys[name] = wordSet(name+" "+p.Description), wordSet(name)
			// What an argument is called says what the tool is for
			// ("percent" of set_brightness, "city" of get_weather), as
			// much as the description does; its example does not: "e.g.
			// kitchen" would pull every kitchen request to this tool.
			about, _, _ := strings.Cut(p.Description, "e.g.")
			maps.Copy(at.descStems, stemSet(name+" "+about))
			at.numbers[name] = p.Type == "integer" || p.Type == "number"
			if at.numbers[name] {
				lo, hi := math.Inf(-1), math.Inf(1)
				if p.Minimum != nil {
					lo = *p.Minimum
				}
				if p.Maximum != nil {
					hi = *p.Maximum
				}
				at.bounds = append(at.bounds, [2]float64{lo, hi})
			}
			for _, v := range p.Enum {
				if v, ok := v.(string); ok {
					at.enums = append(at.enums, v)
				}
			}
			// Only a shape with digits or punctuation says something
			// ("6:30"); "kitchen" would favour every lower-case word.
			if _, ex, ok := strings.Cut(p.Description, "e.g."); ok && len(strings.Fields(ex)) > 0 {
				if sh := wordShape(strings.Fields(ex)[0]); strings.Trim(sh, "aA") != "" {
					at.shape[name] = sh
				}
			}
		}
		r.tools[t.Name] = at
	}
	return r
}

// callSoFar finds, in a reply so far, the tool and the key of the string
// value being copied in its last call, and the string values that call
// already holds.
var (
	callName  = regexp.MustCompile(`\{"name":"((?:[^"\\]|\\.)*)","arguments":`)
	stringArg = regexp.MustCompile(`"(?:[^"\\]|\\.)*":"((?:[^"\\]|\\.)*)"`)
)

// Weights of the tool rule, per word of the request (function words and
// genericVerbs aside) that a tool's name or description has, and per value
// of the request its arguments would take.
const (
	toolNameWord = 2.0 // a word of the tool's name ("lights", "on")
	toolDescWord = 1.0 // a word of its description ("takeout")
	toolValue    = 1.0 // a number within an integer argument's bounds, an enum value named, the shape of an example
)

// genericVerbs open requests for any tool: they say nothing of which.
var genericVerbs = map[string]bool{"get": true, "set": true, "make": true, "do": true, "have": true, "let": true, "go": true}

// toolScore is the tool rule's score of tool at for the request: its words
// and the values it would take. A request that shares nothing with any
// tool scores 0 everywhere and is left to the model (small talk, prose).
func (r *argRule) toolScore(at argTool) float64 {
	var s, weak float64
	content := false // a content word of the request names the tool
	for _, w := range toolWords(r.text) {
		w = stem(w)
		switch {
		case genericVerbs[w]:
		case (at.name[w] || at.nameStems[w]) && functionWords[w]:
			weak += toolDescWord // "on" of lights_on: a weak word, if the name's
		case at.name[w] || at.nameStems[w]:
			s, content = s+toolNameWord, true
		case functionWords[w]:
		case at.descStems[w]:
			s, content = s+toolDescWord, true
		}
	}
	// A function word of the name says which of two tools the request
	// asks for once a content word has said it asks for one of them
	// ("lights on"), and nothing alone: "put on some jazz" is not
	// lights_on, "going to rain" is not add_to_shopping_list.
	if content {
		s += weak
	}
	for _, w := range strings.Fields(r.text) {
		n, ok := requestNumber(w)
		if !ok {
			continue
		}
		for _, b := range at.bounds {
			if n >= b[0] && n <= b[1] {
				s += toolValue
				break
			}
		}
	}
	for _, v := range at.enums {
		if slices.Contains(r.words, strings.ToLower(v)) {
			s += toolValue
		}
	}
	for _, sh := range at.shape {
		for _, w := range strings.Fields(r.text) {
			if wordShape(w) == sh {
				s += toolValue
			}
		}
	}
	return s
}

// toolWords is the request's words as the tool rule reads them: "50%"
// says "percent" as much as "50 percent" does.
func toolWords(text string) []string {
	var out []string
	for _, w := range strings.Fields(text) {
		out = append(out, ruleWords(w)...)
		if strings.Contains(w, "%") {
			out = append(out, "percent")
		}
	}
	return out
}

// requestNumber is the number a word of the request is, when the whole
// word is one ("74", "50%", "20,"): the digits of "5:45" or "6.5km" are
// not a value an integer argument would take.
func requestNumber(w string) (float64, bool) {
	w = strings.TrimRight(w, "%.,;:!?)")
	w = strings.TrimLeft(w, "(")
	if w == "" || strings.TrimFunc(w, unicode.IsDigit) != "" {
		return 0, false
	}
	n, err := strconv.ParseFloat(w, 64)
	return n, err == nil
}

// stem drops an English plural or verb ending, so "lights" meets "light"
// and "locked" meets "lock".
func stem(w string) string {
	for _, suf := range []string{"ing", "ed", "es", "s"} {
		if len(w) > len(suf)+3 && strings.HasSuffix(w, suf) {
			return w[:len(w)-len(suf)]
		}
	}
	return w
}

// toolScores is the tool rule's score of each of alts, or false when alts
// are not tool names or the rule serves none of them.
func (r *argRule) toolScores(alts []alternative) ([]float64, bool) {
	if r == nil {
		return nil, false
	}
	scores := make([]float64, len(alts))
	served := false
	for i, a := range alts {
		if a.open {
			continue
		}
		name, ok := altToolName(a.text)
		if !ok {
			return nil, false
		}
		if at, ok := r.tools[name]; ok {
			scores[i], served = r.toolScore(at), true
		}
	}
	return scores, served
}

// pruneTools keeps, at a tool point the rule serves, prose and the tools
// within one word of the rule's best, when the best shares a word with
// the request: the others cannot win once the rule's weight is added, and
// scoring a dozen unknown tools whole can find no room in the cache, which
// leaves the point to the first byte.
func (r *argRule) pruneTools(alts []alternative) []alternative {
	scores, ok := r.toolScores(alts)
	if !ok || slices.Max(scores) <= 0 {
		return alts
	}
	best := slices.Max(scores)
	kept := alts[:0:0]
	for i, a := range alts {
		if a.open || scores[i] >= best-toolDescWord {
			kept = append(kept, a)
		}
	}
	return kept
}

// applyToolRule adds the tool rule to j's alternatives when they are the
// tool names (joined with the call against prose, or alone once the
// call's opening is written) and the rule serves a tool among them; it
// reports whether it did.
func (e *Engine) applyToolRule(j *choiceJob) bool {
	scores, ok := j.s.opt.argRule.toolScores(j.alts)
	if !ok {
		return false
	}
	for i := range j.alts {
		j.alts[i].score += argScale * scores[i]
	}
	return true
}

// applyArgRule adds the rule to j's alternatives when they are the spans of
// a copied string of a tool the rule serves; it reports whether it did.
func (e *Engine) applyArgRule(j *choiceJob) bool {
	r := j.s.opt.argRule
	if r == nil {
		return false
	}
	var text []byte
	for _, t := range j.s.tokens[j.s.promptLen:] {
		text = append(text, e.m.tok.Piece(t)...)
	}
	if i := bytes.LastIndex(text, []byte(chatfmt.ToolCallOpen)); i >= 0 {
		text = text[i:]
	}
	m := lastKey.FindSubmatch(text)
	name := callName.FindSubmatch(text)
	if m == nil || len(m[2]) == 0 || name == nil {
		return false
	}
	var key, tool string
	if json.Unmarshal(m[1], &key) != nil || json.Unmarshal(append(append([]byte{'"'}, name[1]...), '"'), &tool) != nil {
		return false
	}
	at, ok := r.tools[tool]
	if !ok {
		return false
	}
	var taken []string
	args := text[len(name[0]):]
	for _, v := range stringArg.FindAllSubmatch(args[:len(args)-len(m[0])], -1) {
		taken = append(taken, ruleWords(string(v[1]))...)
	}
	for _, a := range j.alts {
		if a.open || len(a.text) == 0 {
			return false
		}
	}
	for i := range j.alts {
		j.alts[i].score += argScale * r.score(at, key, string(j.alts[i].text), taken)
	}
	return true
}

// score is the rule's score of span as the value of key of tool at.
func (r *argRule) score(at argTool, key, span string, taken []string) float64 {
	sw := ruleWords(span)
	if len(sw) == 0 {
		return 0
	}
	own, label := at.args[key], true
	var s float64
	for k, w := range sw {
		fn := functionWords[w]
		label = label && at.keys[key][w]
		switch {
		case fn && (k == 0 || k == len(sw)-1):
			s -= argEdgeFunction
		case fn:
			s -= argInnerFunc
		case at.name[w] || at.words[w] && !own[w] || r.otherKey(at, key, w):
			// Asks for the tool: its name's words always ("playlist" in
			// play_playlist), its description's unless the argument's
			// own ("room" of "living room"); or names another argument
			// ("percent" is not the room).
			s -= argCommandWord
		}
		for _, t := range taken {
			if t == w && !fn {
				s -= argTaken
			}
		}
		if strings.ContainsFunc(w, unicode.IsDigit) && r.otherNumber(at, key) {
			s -= argTaken // the number is another argument's
		}
	}
	if label {
		s -= argCommandWord // the argument's own name is not its value
	}
	// A value does not run across a clause's punctuation: "eggs, put
	// them on the list" holds the item "eggs", "Priya: see you" the
	// recipient "Priya"; a word's own ("6:30", "Luigi's") is no boundary.
	if f := strings.Fields(span); len(f) > 1 {
		for _, w := range f[:len(f)-1] {
			if strings.ContainsAny(w[len(w)-1:], ",;:!?.") {
				s -= argTaken
				break
			}
		}
	}
	s += argPerWord * float64(len(sw))
	if len(r.words) >= len(sw) && slices.Equal(r.words[len(r.words)-len(sw):], sw) {
		s += argEndsRequest
	}
	first := strings.TrimLeftFunc(r.text, unicode.IsSpace)
	opening := strings.HasPrefix(first, span)
	// A clause after a comma opens with its verb as the request does
	// ("…, put them on the list", "…, run the robot vacuum there"); a
	// colon introduces what is said, a value ("message Priya: see you").
	if opening || strings.Contains(r.text, ", "+span) || strings.Contains(r.text, "; "+span) {
		s -= argOpeningWord
	}
	for k, w := range strings.Fields(span) {
		if unicode.IsUpper([]rune(w)[0]) && (k > 0 || !opening) {
			s += argCapital // a name: "Thai Garden"
		}
	}
	if sh, ok := at.shape[key]; ok && len(sw) == 1 && wordShape(strings.Fields(span)[0]) == sh {
		s += argShape
	}
	return s
}

// otherKey reports whether w is a word of another argument's name.
func (r *argRule) otherKey(at argTool, key, w string) bool {
	for k, words := range at.keys {
		if k != key && words[w] {
			return true
		}
	}
	return false
}

// otherNumber reports whether the tool has a number argument besides key.
func (r *argRule) otherNumber(at argTool, key string) bool {
	for k, n := range at.numbers {
		if n && k != key {
			return true
		}
	}
	return false
}

// ruleWords is text's words, lower-cased, without the punctuation around
// them ("Mario's" keeps its apostrophe, "6:30" its colon); '_' and '-'
// split words, as a tool's name writes them.
func ruleWords(text string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(text, func(r rune) bool { return unicode.IsSpace(r) || r == '_' || r == '-' }) {
		w = strings.TrimFunc(w, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
		if w != "" {
			out = append(out, strings.ToLower(w))
		}
	}
	return out
}

func stemSet(text string) map[string]bool {
	out := map[string]bool{}
	for _, w := range ruleWords(text) {
		out[stem(w)] = true
	}
	return out
}

func wordSet(text string) map[string]bool {
	out := map[string]bool{}
	for _, w := range ruleWords(text) {
		out[w] = true
	}
	return out
}

// wordShape is a word's character classes, runs collapsed: "6:30" → "9:9",
// "kitchen" → "a", "Denver" → "Aa".
func wordShape(w string) string {
	w = strings.TrimFunc(w, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	var b strings.Builder
	last := rune(0)
	for _, c := range w {
		k := c
		switch {
		case unicode.IsDigit(c):
			k = '9'
		case unicode.IsUpper(c):
			k = 'A'
		case unicode.IsLetter(c):
			k = 'a'
		}
		if k != last {
			b.WriteRune(k)
		}
		last = k
	}
	return b.String()
}

// functionWords are English closed-class words (articles, prepositions,
// pronouns, auxiliaries, conjunctions) and the politeness and time words
// requests wrap around a value: a value does not begin or end with one.
var functionWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a an the this that these those my your our his her their its some any all every
		to in on at for from of with by into onto about over under up off out down near around
		and or but so if then than as
		i me you we us it he she they them him
		is are be am was were do does did can could would will should shall may might must
		please there here now today tomorrow tonight just also really
		what what's how when where which who whose why
		saying says say hey ok okay yes no not it's that's`) {
		m[w] = true
	}
	return m
}()
