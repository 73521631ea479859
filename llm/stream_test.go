package llm

import (
	"errors"
	"reflect"
	"testing"
)

// collect records a stream's events.
type collect struct {
	events []Token
	err    error // returned from every emit when set
}

func (c *collect) emit(t Token) error {
	c.events = append(c.events, t)
	return c.err
}

func TestStreamSendsBeginFirstAndOnce(t *testing.T) {
	var c collect
	s := NewStream(c.emit)
	s.Meta.Route = RouteLocal
	if s.Begun() {
		t.Fatal("begun before any event")
	}
	for _, txt := range []string{"a", "b"} {
		if err := s.Emit(Token{Text: txt}); err != nil {
			t.Fatal(err)
		}
	}
	s.Meta.Route = RouteCloud // after begin: not seen
	if err := s.Begin(); err != nil {
		t.Fatal(err)
	}
	if len(c.events) != 3 || c.events[0].Meta == nil || c.events[0].Meta.Route != RouteLocal || c.events[0].Text != "" ||
		c.events[1].Text != "a" || c.events[1].Meta != nil || c.events[2].Text != "b" {
		t.Fatalf("events %+v", c.events)
	}
}

func TestStreamBeginWithoutTokens(t *testing.T) {
	var c collect
	s := NewStream(c.emit)
	s.Meta = Meta{Route: RouteCloud, Pool: "stream", Worker: "w1"}
	if err := s.Begin(); err != nil || !s.Begun() {
		t.Fatal(err)
	}
	if len(c.events) != 1 || c.events[0].Meta.RouteHeader() != "cloud/stream/w1" {
		t.Fatalf("events %+v", c.events)
	}
}

// TestStreamMergesInnerBegin: an outer generator's route and fallback win;
// the inner (cloud) begin event supplies placement, hint and budget; the
// reader sees one begin event.
func TestStreamMergesInnerBegin(t *testing.T) {
	var c collect
	s := NewStream(c.emit)
	outer := Fallback{Cause: FallbackLocalRefused, From: RouteLocal, Code: CodeContextLength, Detail: "local engine refused"}
	s.Meta = Meta{Route: RouteCloud, Fallback: outer}
	inner := Meta{Route: RouteCloud, Pool: "decode-heavy", Worker: "w0", SchedulerHint: "ABC",
		Fallback: Fallback{Cause: FallbackPoolOverloaded, From: "w9"}, BudgetRemaining: 7, HasBudget: true}
	if err := s.Emit(Token{Meta: &inner}); err != nil {
		t.Fatal(err)
	}
	if len(c.events) != 0 {
		t.Fatalf("inner begin passed on: %+v", c.events)
	}
	s.Emit(Token{Text: "x"})
	got := *c.events[0].Meta
	want := Meta{Route: RouteCloud, Pool: "decode-heavy", Worker: "w0", SchedulerHint: "ABC", Fallback: outer, BudgetRemaining: 7, HasBudget: true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("merged %+v\nwant   %+v", got, want)
	}
	if got.RouteHeader() != "cloud/decode-heavy/w0" {
		t.Fatalf("route header %q", got.RouteHeader())
	}
	// A late inner begin (after the response started) changes nothing.
	late := Meta{SchedulerHint: "ZZZ"}
	s.Emit(Token{Meta: &late})
	if len(c.events) != 2 {
		t.Fatalf("late begin produced an event: %+v", c.events)
	}
}

func TestStreamEmitErrorStops(t *testing.T) {
	gone := errors.New("client left")
	c := collect{err: gone}
	s := NewStream(c.emit)
	if err := s.Emit(Token{Text: "a"}); !errors.Is(err, gone) {
		t.Fatalf("err %v", err)
	}
	if len(c.events) != 1 {
		t.Fatalf("a token followed a failed begin: %+v", c.events)
	}
}

func TestFallbackString(t *testing.T) {
	tests := []struct {
		f    Fallback
		want string
	}{
		{Fallback{}, ""},
		{Fallback{Cause: FallbackNoCloud}, "no_cloud"},
		{Fallback{Cause: FallbackCloudError, Detail: "cloud failed before first token: boom"}, "cloud failed before first token: boom"},
	}
	for _, tt := range tests {
		if got := tt.f.String(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.f, got, tt.want)
		}
	}
	for c := FallbackCause(0); c < numFallbackCauses; c++ {
		if !c.Valid() || (c != FallbackNone && c.String() == "") {
			t.Errorf("cause %d: %q", c, c.String())
		}
	}
	if FallbackCause(200).Valid() {
		t.Error("cause 200 is valid")
	}
}
