package sim

import "testing"

// TestAsyncScheduling: with EngineConfig.AsyncScheduling, a request added
// while a step runs and the engine has work for the next one waits for the
// step after (vLLM schedules step k+1 while step k runs); an idle engine,
// or one whose step in flight is its last, takes it at once. Without the
// knob the next step takes it.
func TestAsyncScheduling(t *testing.T) {
	for _, async := range []bool{false, true} {
		d := mustDeployment(t, "h100", "llama3.1-8b", 1)
		d.Engine.AsyncScheduling = async
		e := NewEngine(d)
		a := &Seq{Prompt: 64, MaxOutput: 10}
		if err := e.Add(a); err != nil {
			t.Fatal(err)
		}
		if _, ok := e.Plan(); !ok || a.step != 64 {
			t.Fatalf("async %v: an idle engine did not take the first request at once (step %d)", async, a.step)
		}
		b := &Seq{Prompt: 64, MaxOutput: 10} // arrives while a's prefill runs
		if err := e.Add(b); err != nil {
			t.Fatal(err)
		}
		e.Commit(func(*Seq, bool) {})
		e.Plan()
		if got, want := b.step > 0, !async; got != want {
			t.Fatalf("async %v: the request that came during step 1 is in step 2: %v, want %v", async, got, want)
		}
		e.Commit(func(*Seq, bool) {})
		e.Plan()
		if b.step == 0 && b.computed == 0 {
			t.Fatalf("async %v: the request that came during step 1 is not in step 3 either", async)
		}
		e.Commit(func(*Seq, bool) {})
		if err := e.check(); err != nil {
			t.Fatal(err)
		}
	}
	// A step that ends the engine's work leaves nothing scheduled after it:
	// what arrives meanwhile goes in the next step.
	d := mustDeployment(t, "h100", "llama3.1-8b", 1)
	d.Engine.AsyncScheduling = true
	e := NewEngine(d)
	last := &Seq{Prompt: 64, MaxOutput: 1}
	e.Add(last)
	e.Plan()
	c := &Seq{Prompt: 64, MaxOutput: 4}
	e.Add(c)
	e.Commit(func(*Seq, bool) {})
	if e.Plan(); c.step != 64 {
		t.Fatalf("after the engine's last step, a new request waited (step %d)", c.step)
	}
}
