package admit

import (
	"testing"

	"github.com/phaseless/phaseless/llm"
)

// TestFairSubmit: the non-blocking form grants at once when a slot is
// free, in VTC order on Release, and refuses when the queue is full.
func TestFairSubmit(t *testing.T) {
	f, err := NewFair(FairConfig{Slots: 1, MaxQueue: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var granted []string
	var tickets []*Ticket
	grant := func(name string) func(*Ticket) {
		return func(tk *Ticket) { granted, tickets = append(granted, name), append(tickets, tk) }
	}
	if err := f.Submit("a", 100, grant("a1")); err != nil || len(granted) != 1 {
		t.Fatalf("free slot: %v %v", granted, err)
	}
	if err := f.Submit("a", 100, grant("a2")); err != nil {
		t.Fatal(err)
	}
	if err := f.Submit("b", 10, grant("b1")); err != nil {
		t.Fatal(err)
	}
	if err := f.Submit("c", 10, grant("c1")); llm.CodeOf(err) != llm.CodeOverloaded {
		t.Fatalf("full queue: %v", err)
	}
	tickets[0].Output(50) // a is served 100 more (output ×2) than b, lifted to a's 100 on arrival
	tickets[0].Release()
	// b has been served less than a: it goes first, though a2 came earlier.
	if len(granted) != 2 || granted[1] != "b1" {
		t.Fatalf("granted %v, want b1 next", granted)
	}
	tickets[1].Release()
	if len(granted) != 3 || granted[2] != "a2" {
		t.Fatalf("granted %v", granted)
	}
	tickets[2].Release()
	if s := f.Stats(); s.Running != 0 || s.Waiting != 0 {
		t.Fatalf("stats %+v", s)
	}
}
