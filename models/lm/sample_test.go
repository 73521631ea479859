package lm

import "testing"

func TestStopMatcher(t *testing.T) {
	m := &stopMatcher{stops: []string{"<|", "STOP"}}
	var out string
	for _, piece := range []string{"hi ", "<", "x", "ST", "O", "P!"} {
		o, stopped := m.push(piece)
		out += o
		if stopped {
			break
		}
	}
	if out != "hi <xST"[:len("hi <x")] {
		t.Fatalf("emitted %q before STOP, want %q", out, "hi <x")
	}
	m = &stopMatcher{stops: []string{"<|"}}
	a, _ := m.push("a<")
	if a != "a" {
		t.Fatalf("held %q: a possible stop prefix must wait", a)
	}
	if b, stopped := m.push("|user"); b != "" || !stopped {
		t.Fatalf("got %q stopped=%v", b, stopped)
	}
}
