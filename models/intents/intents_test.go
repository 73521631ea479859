package intents

import (
	"slices"
	"testing"
)

func TestReplyMatches(t *testing.T) {
	for _, tc := range []struct {
		intent, reply string
		want          bool
	}{
		{"change_volume", "Volume set to 7.", true},
		{"calculator", "The answer is 391.", true},
		{InCarIntent(6), "  Starting navigation to Denver. About 35 minutes.  ", true},
		{"weather", "Dialing Mom.", false},
		{"make_call", "It is 40 degrees and sunny right now.", false},
		{"balance", "Volume set to 7.", false}, // not an intent the edge model answers
	} {
		if got := ReplyMatches(tc.intent, tc.reply); got != tc.want {
			t.Errorf("ReplyMatches(%q, %q) = %v", tc.intent, tc.reply, got)
		}
	}
}

func TestReplySlotsAndKnown(t *testing.T) {
	got := ReplySlots("incar-6", "Starting navigation to Denver. About 35 minutes.")
	if len(got) != 2 || got[0] != "Denver" || got[1] != "35" {
		t.Fatalf("slots %q", got)
	}
	if ReplySlots("incar-6", "Playing jazz music.") != nil {
		t.Fatal("a reply of another intent has slots")
	}
	if !Known("next_song") || !Known("incar-0") || !Known(InCarIntent(len(InCar)-1)) || Known(InCarIntent(len(InCar))) || Known("balance") {
		t.Fatal("Known")
	}
	c := CLINC()
	if len(c) != len(Replies) || !slices.IsSorted(c) || !slices.Contains(c, "calculator") {
		t.Fatalf("CLINC() = %v", c)
	}
}
