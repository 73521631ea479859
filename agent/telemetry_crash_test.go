package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/agent/telemetry"
	"github.com/phaseless/phaseless/internal/crashtest"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestKillAfterAnswersKeepsEveryRecord is issue 27's item 7 as it was
// found: an agent process answers requests from many clients at once, is
// killed with SIGKILL as soon as the last answer has been read, and
// restarts on the same data directory, round after round (4, or
// PHASELESS_CRASH_CYCLES). Every request
// whose answer a client received (status, body to its end, [DONE] for a
// stream) must have its telemetry record in telemetry.db, and the
// restarted agent must count them all as pending.
func TestKillAfterAnswersKeepsEveryRecord(t *testing.T) {
	var dir string
	if !crashtest.IsChild(t) {
		dir = t.TempDir()
	}
	// The child is an agent on dir that acknowledges its address and
	// serves until it is killed.
	child := func(dir string, ack *crashtest.Acker) {
		a, err := New(testConfigIn(dir), nil)
		if err != nil {
			crashtest.Fail("agent: %v", err)
		}
		go func() {
			if err := a.Run(context.Background()); err != nil {
				crashtest.Fail("agent Run: %v", err)
			}
		}()
		ack.Ack("%s", a.Addr())
		select {}
	}
	const clients, perClient = 16, 5
	if raceEnabled {
		// It kills processes, not goroutines: the race detector adds
		// only minutes here. make test runs it without -race.
		t.Skip("make test runs this crash test without -race")
	}
	rounds := crashtest.Cycles(t, 4)
	answered := map[string]bool{} // x-request-id of every answer received
	var total int                 // records in the store after the last kill
	for round := range rounds {
		p := crashtest.Start(t, dir, round, child)
		ids := askAll(t, "http://"+p.Ack()+"/v1/chat/completions", clients, perClient)
		if extra := p.Kill(); len(extra) != 0 {
			t.Fatalf("round %d: unexpected lines %q", round, extra)
		}
		for _, id := range ids {
			answered[id] = true
		}
		var stored map[string]bool
		stored, total = storedTraceIDs(t, filepath.Join(dir, "telemetry.db"))
		var missing []string
		for id := range answered {
			if !stored[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			t.Fatalf("round %d: %d of %d answered requests have no telemetry record after kill -9 (%d stored): %v",
				round, len(missing), len(answered), len(stored), missing[:min(5, len(missing))])
		}
		t.Logf("round %d: %d answered so far, all stored", round, len(answered))
	}
	// The agent restarted on the same directory counts every one.
	p := crashtest.Start(t, dir, rounds, child)
	base := "http://" + p.Ack()
	if got := scrape(t, base+"/metrics", "phaseless_agent_telemetry_pending"); got != fmt.Sprint(total) {
		t.Errorf("restarted agent: phaseless_agent_telemetry_pending %s, want the %d records stored", got, total)
	}
	p.Kill()
}

// askAll sends clients*perClient chat requests, clients at a time, half of
// them streamed, and returns the request id of each answer read whole.
func askAll(t *testing.T, url string, clients, perClient int) []string {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer c.CloseIdleConnections()
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for w := range clients {
		wg.Go(func() {
			for n := range perClient {
				stream := (w+n)%2 == 0
				body := fmt.Sprintf(`{"messages":[{"role":"user","content":"turn on the seat heater %d %d"}],"max_tokens":4,"temperature":0,"stream":%t}`, w, n, stream)
				id, err := askOne(c, url, body, stream)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return ids
}

// askOne posts body and reads the answer to its end: the JSON body, or the
// event stream through [DONE].
func askOne(c *http.Client, url, body string, stream bool) (string, error) {
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	id := resp.Header.Get("x-request-id")
	switch {
	case resp.StatusCode != http.StatusOK || id == "":
		return "", fmt.Errorf("status %d id %q: %s", resp.StatusCode, id, b)
	case stream && !strings.HasSuffix(string(b), "data: [DONE]\n\n"):
		return "", fmt.Errorf("stream without [DONE]: %s", b)
	case !stream && !json.Valid(b):
		return "", fmt.Errorf("body is not JSON: %s", b)
	}
	return id, nil
}

// storedTraceIDs opens the killed agent's store, as its restart does, and
// returns the trace ids of its request records and how many records it
// holds in all.
func storedTraceIDs(t *testing.T, path string) (map[string]bool, int) {
	t.Helper()
	crashtest.CheckBolt(t, path)
	s, err := telemetry.Open(path, telemetry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, err := s.Pending(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	ids := make(map[string]bool, len(recs))
	for _, r := range recs {
		var rr fleetwire.RequestRecord
		if r.Kind != telemetry.KindRequest {
			continue
		}
		if err := json.Unmarshal(r.Data, &rr); err != nil {
			t.Fatal(err)
		}
		ids[rr.TraceID] = true
	}
	return ids, len(recs)
}

// scrape returns the value of the unlabelled series name on a /metrics page.
func scrape(t *testing.T, url, name string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	t.Fatalf("%s: no series %s", url, name)
	return ""
}
