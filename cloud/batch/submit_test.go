package batch

import (
	"testing"
	"time"
)

// fakeClock is a manual clock for the batcher's Now and AfterFunc.
type fakeClock struct {
	now time.Time
	at  time.Time
	f   func()
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.at, c.f = c.now.Add(d), f
	return c
}

func (c *fakeClock) Reset(d time.Duration) bool { c.at = c.now.Add(d); return true }
func (c *fakeClock) Stop() bool                 { c.f = nil; return true }

// advance moves the clock and fires the timer when due.
func (c *fakeClock) advance(d time.Duration) {
	c.now = c.now.Add(d)
	if f := c.f; f != nil && !c.now.Before(c.at) {
		c.f = nil
		f()
	}
}

// TestSubmit: the non-blocking form releases at once when there is room,
// shortest prompts first on Kick, and by the window on the injected clock.
func TestSubmit(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	room := 1
	b, err := New(Config{Window: 150 * time.Millisecond, Now: clk.Now, AfterFunc: clk.AfterFunc}, func() int { return room })
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	rel := func(name string) func(int) { return func(n int) { got = append(got, name) } }
	b.Submit(10, rel("first"))
	if len(got) != 1 {
		t.Fatalf("not straight in with room: %v", got)
	}
	room = 0
	b.Submit(2000, rel("long"))
	b.Submit(20, rel("short"))
	if len(got) != 1 || b.Waiting() != 2 {
		t.Fatalf("released without room: %v", got)
	}
	room = 1
	b.Kick()
	if len(got) != 2 || got[1] != "short" {
		t.Fatalf("Kick released %v, want the short prompt", got)
	}
	room = 0
	clk.advance(149 * time.Millisecond)
	if len(got) != 2 {
		t.Fatalf("released before the window: %v", got)
	}
	clk.advance(time.Millisecond)
	if len(got) != 3 || got[2] != "long" {
		t.Fatalf("window did not release the long prompt: %v", got)
	}
	b.Submit(5, rel("late"))
	b.Close()
	b.Submit(5, func(n int) {
		if n != 0 {
			t.Errorf("submit after close released with %d", n)
		}
	})
	if len(got) != 4 {
		t.Fatalf("close did not release the waiter: %v", got)
	}
}
