package lm

import "testing"

func TestStopMatcher(t *testing.T) {
	m := &stopMatcher{stops: []string{"<|", "STOP"}}
	var out string
	for _, piece := range []string{"hi ", "<", "x", "ST", "O", "P!"} {
		o, stopped := m.push(piece, true)
		out += o
		if stopped {
			break
		}
	}
	if out != "hi <xST"[:len("hi <x")] {
		t.Fatalf("emitted %q before STOP, want %q", out, "hi <x")
	}
	m = &stopMatcher{stops: []string{"<|"}}
	a, _ := m.push("a<", true)
	if a != "a" {
		t.Fatalf("held %q: a possible stop prefix must wait", a)
	}
	if b, stopped := m.push("|user", true); b != "" || !stopped {
		t.Fatalf("got %q stopped=%v", b, stopped)
	}
}

// TestStopMatcherContentAndCuts checks the two ways a stop's text is not a
// stop: inside an unfinished grammar document it is content (and the
// matcher still holds back the prefix after it), and at a length cut a
// withheld prefix is dropped while at a natural end it goes out.
func TestStopMatcherContentAndCuts(t *testing.T) {
	m := &stopMatcher{stops: []string{"<|", "STOP"}}
	out, stopped := m.push(`{"a":"x<|y<`, false)
	if stopped || out != `{"a":"x<|y` || m.held != "<" {
		t.Fatalf("content push: %q stopped=%v held %q", out, stopped, m.held)
	}
	if out, stopped = m.push(`|`, true); !stopped || out != "" {
		t.Fatalf("a counting stop after content: %q stopped=%v", out, stopped)
	}
	for _, tc := range []struct {
		cut  bool
		want string
	}{{true, ""}, {false, "<"}} {
		m = &stopMatcher{stops: []string{"<|"}}
		out, _ := m.push("in Paris.\n<", true)
		if tail := m.flush(tc.cut); out != "in Paris.\n" || tail != tc.want {
			t.Errorf("cut=%v: emitted %q then %q, want %q then %q", tc.cut, out, tail, "in Paris.\n", tc.want)
		}
	}
}
