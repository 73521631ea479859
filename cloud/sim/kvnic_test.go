package sim

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestHandoffCannotHoldTheNIC: a handoff claiming a prompt longer than
// the model takes is refused, and a transfer its client gives up returns
// its time on the NIC, so an honest transfer after either does not wait
// behind it.
func TestHandoffCannotHoldTheNIC(t *testing.T) {
	f, err := StartFleet("sim://h100?model=llama3.1-8b&n=1")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var waits []time.Duration
	s := f.servers[0]
	s.kv.sleep = func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		if len(waits) == 1 {
			return context.Canceled // the client hangs up
		}
		return nil
	}
	post := func(tokens int) int {
		body := fmt.Sprintf(`{"sim_kv":1,"model":%q,"prompt_tokens":%d,"fleet":"","gpu":"H100","kv_bytes":1}`, s.model, tokens)
		resp, err := http.Post(f.URLs()[0]+"/v1/kv/handoffs", SimHandoffContentType, bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(1 << 40); code != http.StatusBadRequest {
		t.Fatalf("a handoff of 2^40 prompt tokens: %d, want 400", code)
	}
	if len(waits) != 0 {
		t.Fatalf("the refused handoff reserved the NIC for %v", waits)
	}
	post(100_000) // given up
	if code := post(100); code != http.StatusOK {
		t.Fatalf("honest handoff: %d", code)
	}
	if len(waits) != 2 || waits[1] >= waits[0] {
		t.Fatalf("waits %v: the honest 100-token transfer waited behind the 100k-token one its client gave up", waits)
	}
}
