package gate

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestCloseWaitsForCallsInFlight(t *testing.T) {
	var g Gate
	if !g.Enter() {
		t.Fatal("a zero Gate refused a call")
	}
	var left atomic.Bool
	release := make(chan struct{})
	go func() {
		<-release
		left.Store(true)
		g.Leave()
	}()
	closed := make(chan struct{})
	go func() { g.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a call was in flight")
	case <-time.After(20 * time.Millisecond): // hang guard only: Close must still be waiting
	}
	close(release)
	<-closed
	if !left.Load() {
		t.Fatal("Close returned before Leave")
	}
	if g.Enter() {
		t.Fatal("a closed Gate admitted a call")
	}
	g.Close() // twice is fine
}
