// Package intents is the in-vehicle edge model's repertoire: the CLINC150
// intents it handles and the project's in-car request groups, each with the
// reply templates the project wrote for it, and the test of whether a reply
// has one of an intent's forms.
//
// How it fits: the training corpus (models/lmtrain/corpus) fills the
// templates in to make training text; the grader (models/grade) and the
// router's labels (models/predictor/train) match answers against them. It
// is its own package so that grading, which the cloud links for shadow
// evaluation, does not link the training corpus and its embedded data.
package intents

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// InCarIntent names the in-car group of InCar at index i ("incar-N").
func InCarIntent(i int) string { return fmt.Sprintf("incar-%d", i) }

// CLINC lists the CLINC150 intents the edge model answers (the keys of
// Replies), sorted.
func CLINC() []string {
	out := make([]string, 0, len(Replies))
	for k := range Replies {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// calculatorReplies are the calculator's reply forms besides its
// templates: the result of a computable "a op b" request, and the reply to
// one that is not (what the corpus writes for each).
var calculatorReplies = []string{"The answer is {n}.", "Let me show that calculation on the screen."}

// replyPatterns maps each intent to regular expressions of its replies, slots
// as wildcards, for ReplyMatches.
var replyPatterns = func() map[string][]*regexp.Regexp {
	compile := func(tmpls []string) []*regexp.Regexp {
		var out []*regexp.Regexp
		for _, t := range tmpls {
			q := regexp.QuoteMeta(t)
			q = regexp.MustCompile(`\\\{[a-z]+\\\}`).ReplaceAllString(q, `(.+?)`)
			out = append(out, regexp.MustCompile("^"+q+"$"))
		}
		return out
	}
	m := map[string][]*regexp.Regexp{}
	for intent, ts := range Replies {
		m[intent] = compile(ts)
	}
	m["calculator"] = append(m["calculator"], compile(calculatorReplies)...)
	for gi, t := range InCar {
		m[InCarIntent(gi)] = compile(t.Replies)
	}
	return m
}()

// ReplyMatches reports whether reply has the form of one of intent's replies
// (any slot values): the measure of whether a model chose the right kind of
// answer, independent of the made-up values in it.
func ReplyMatches(intent, reply string) bool {
	for _, re := range replyPatterns[intent] {
		if re.MatchString(strings.TrimSpace(reply)) {
			return true
		}
	}
	return false
}

// Known reports whether ReplyMatches knows reply forms for intent: a
// CLINC150 intent of the edge corpus or an in-car group ("incar-N").
func Known(intent string) bool { return len(replyPatterns[intent]) > 0 }

// ReplySlots returns the slot values of reply (what the placeholders of the
// first of intent's reply templates it matches stand for), nil when it
// matches none. A grader compares them with the request's own values.
func ReplySlots(intent, reply string) []string {
	for _, re := range replyPatterns[intent] {
		if m := re.FindStringSubmatch(strings.TrimSpace(reply)); m != nil {
			return m[1:]
		}
	}
	return nil
}
