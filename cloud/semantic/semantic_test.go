package semantic

import (
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
)

func TestSimilarityTracksSharedShingles(t *testing.T) {
	// CLINC150 train utterances (clinc/oos-eval): two of intent
	// direct_deposit, one of another intent.
	a := OfText("i need to get my paycheck direct deposited to my chase account")
	b := OfText("i'd like to have my paycheck direct deposited to my chase account")
	c := OfText("what is the weather like in boston tomorrow")
	same := a
	if s := Similarity(&a, &same); s != 1 {
		t.Fatalf("self similarity %v", s)
	}
	ab, ac := Similarity(&a, &b), Similarity(&a, &c)
	// The two share 8 of their 15 distinct bigrams (Jaccard 8/15 ≈ 0.53).
	if ab < 0.3 || ab > 0.8 || ac > 0.15 {
		t.Fatalf("similar %.2f, unrelated %.2f", ab, ac)
	}
	// Normalisation: case and punctuation do not matter.
	d := OfText("I need to get my PAYCHECK, direct-deposited to my Chase account!")
	if s := Similarity(&a, &d); s != 1 {
		t.Fatalf("normalised text similarity %v, want 1", s)
	}
}

func TestModes(t *testing.T) {
	sys := llm.Message{Role: "system", Content: "You are the car assistant of a family sedan with climate control and navigation."}
	conv := func(user string) []llm.Message { return []llm.Message{sys, {Role: "user", Content: user}} }
	x, y := conv("turn the heat up to twenty two degrees"), conv("navigate to the nearest charging station")
	fi, gi := Of(x, ModeIntent), Of(y, ModeIntent)
	ft, gt := Of(x, ModeTopic), Of(y, ModeTopic)
	fh, gh := Of(x, ModeHybrid), Of(y, ModeHybrid)
	si, st, sh := Similarity(&fi, &gi), Similarity(&ft, &gt), Similarity(&fh, &gh)
	// The same system prompt makes the topics alike; the intents differ.
	if !(si < sh && sh < st) {
		t.Fatalf("intent %.2f, hybrid %.2f, topic %.2f: want intent < hybrid < topic", si, sh, st)
	}
	if def := Of(x, ""); def != fh {
		t.Fatal("the default mode is not hybrid")
	}
}

type clock struct{ t time.Time }

func TestGrouperFormsGroupsWithinTheWindow(t *testing.T) {
	clk := &clock{t: time.Unix(100, 0)}
	g, err := NewGrouper(GroupConfig{MaxSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	lead := OfText("set up direct deposit for me please")
	near := OfText("set up direct deposit for me now")
	far := OfText("what is the weather like in boston tomorrow")
	if _, r := g.Join(clk.t, &lead, 7, 0); r != NoGroup {
		t.Fatal("joined a group before any opened")
	}
	g.Open(clk.t, &lead, 7, 3)
	if _, r := g.Join(clk.t, &far, 7, 0); r != NoGroup {
		t.Fatal("an unrelated request joined")
	}
	for i := 2; i <= 4; i++ {
		want := Joined
		if i == 3 {
			want = Formed // MinSize 3
		}
		w, r := g.Join(clk.t, &near, 7, 0)
		if r != want || w != 3 {
			t.Fatalf("member %d: worker %d result %d, want worker 3, result %d", i, w, r, want)
		}
	}
	if _, r := g.Join(clk.t, &near, 7, 0); r != NoGroup {
		t.Fatal("a fifth member joined a group of at most 4")
	}
	st := g.Stats()
	if st.Formed != 1 || st.Joined != 3 || st.Sizes[4] != 1 {
		t.Fatalf("stats %+v", st)
	}

	// A new group closes when the window passes: a later request opens its own.
	g.Open(clk.t, &lead, 7, 5)
	clk.t = clk.t.Add(150 * time.Millisecond)
	if _, r := g.Join(clk.t, &near, 7, 0); r != NoGroup {
		t.Fatal("joined a group after its window")
	}
	if st := g.Stats(); st.Sizes[1] != 1 || st.Formed != 1 {
		t.Fatalf("after the window: %+v", st)
	}
}

func TestGrouperThresholdAndConflicts(t *testing.T) {
	clk := &clock{t: time.Unix(100, 0)}
	g, _ := NewGrouper(GroupConfig{})
	lead := OfText("i need to get my paycheck direct deposited to my chase account")
	near := OfText("i'd like to have my paycheck direct deposited to my chase account")
	s := Similarity(&lead, &near)
	g.Open(clk.t, &lead, 1, 0)
	if _, r := g.Join(clk.t, &near, 1, s+0.05); r != NoGroup {
		t.Fatalf("joined above its own threshold (similarity %.2f)", s)
	}
	if _, r := g.Join(clk.t, &near, 1, s); r != Joined {
		t.Fatalf("did not join at its similarity %.2f", s)
	}
	// Similar, but the prompt starts differently (another system prompt):
	// a conflict, kept out.
	if _, r := g.Join(clk.t, &near, 2, 0.1); r != Conflict {
		t.Fatal("a diverging prompt joined")
	}
	if st := g.Stats(); st.Conflicts != 1 {
		t.Fatalf("conflicts %d, want 1", st.Conflicts)
	}
}

func TestGroupConfigValidate(t *testing.T) {
	for _, c := range []GroupConfig{{Window: -1}, {MinSize: 5, MaxSize: 4}, {Threshold: 1.5}} {
		if _, err := NewGrouper(c); err == nil {
			t.Fatalf("%+v accepted", c)
		}
	}
}

func BenchmarkJoin(b *testing.B) {
	g, _ := NewGrouper(GroupConfig{Window: time.Hour})
	clk := &clock{t: time.Unix(100, 0)}
	for i := range 1000 {
		fp := OfText("request number " + string(rune('a'+i%26)) + " about topic " + string(rune('a'+i%7)))
		g.Open(clk.t, &fp, 1, i)
	}
	fp := OfText("request number q about topic c")
	b.ReportAllocs()
	for b.Loop() {
		g.Join(clk.t, &fp, 1, 0)
	}
}
