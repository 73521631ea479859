package cloud

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/admit/redistest"
	"github.com/phaseless/phaseless/internal/crashtest"
)

const crashBudget = 100000

// TestReplicaKilledBudgetHolds runs coordinator replicas on one Redis and
// kills one with SIGKILL while it answers a tenant's requests, several
// times. The surviving replica must always see at least what the killed
// ones' answered requests spent (their tokens are gone from the shared
// budget; a request cut off mid-answer stays charged in full, which errs
// on the budget's side), however the kill fell.
func TestReplicaKilledBudgetHolds(t *testing.T) {
	dir := t.TempDir()
	url := ""
	if !crashtest.IsChild(t) {
		url = redistest.Start(t)
	}
	keysFile := filepath.Join(dir, "keys")
	// The child gets the parent's Redis and keys file: "url keys".
	replica := func(t *testing.T, arg string) *Cloud {
		url, keys, _ := strings.Cut(arg, " ")
		return startCloud(t, func(cfg *Config) {
			cfg.Dev, cfg.APIKeys, cfg.BuiltinWorkers = false, keys, 1
			if err := cfg.Redis.Set(url); err != nil {
				t.Fatal(err)
			}
			cfg.Budget, cfg.BudgetPeriod = crashBudget, 24*time.Hour // refills ~1 token/s
		})
	}
	var survivor *Cloud
	fresh := 0 // what the survivor reports for an unused tenant: the budget less one probe
	spent := 0 // tokens of every request a killed replica answered
	start := time.Now()
	crashtest.Run(t, crashtest.Config{
		Cycles: crashtest.Cycles(t, 2), // each cycle starts a replica: heavy
		Arg:    url + " " + keysFile,
		MinRun: 3 * time.Second, // a replica starts and answers in seconds under -race
		MaxRun: 8 * time.Second,
		Setup: func(t *testing.T) {
			if err := os.WriteFile(keysFile, []byte("sk-shared-key-1 shared\nsk-solo-key-01 solo\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			survivor = replica(t, url+" "+keysFile)
			fresh = probe(t, survivor.HTTPAddr(), "sk-solo-key-01")
		},
		Child: func(arg string, ack *crashtest.Acker) {
			c := replica(t, arg)
			var wg sync.WaitGroup
			for range 2 { // two at once, so a kill finds one mid-answer
				wg.Go(func() {
					for {
						used, err := answer(c.HTTPAddr(), "sk-shared-key-1", 4)
						if err != nil {
							crashtest.Fail("%v", err)
						}
						ack.Ack("%d", used)
					}
				})
			}
			wg.Wait()
		},
		Verify: func(t *testing.T, _ int, lines, _ []string) {
			for _, l := range lines {
				n, err := strconv.Atoi(l)
				if err != nil {
					t.Fatalf("bad line %q", l)
				}
				spent += n
			}
			refill := int(float64(crashBudget)*time.Since(start).Seconds()/(24*3600)) + 1
			if got := probe(t, survivor.HTTPAddr(), "sk-shared-key-1"); got > fresh-spent+refill {
				t.Fatalf("survivor reports %d remaining; the killed replicas' answers spent %d of %d (probe alone leaves %d, refill ≤ %d)", got, spent, crashBudget, fresh, refill)
			}
		},
	})
	if spent == 0 {
		t.Fatal("no request was answered before a kill")
	}
}

// probe asks for one token and returns x-burst-budget-remaining.
func probe(t *testing.T, addr, key string) int {
	t.Helper()
	r := chat(t, addr, key, "", "hello there", 1)
	n, err := strconv.Atoi(r.header.Get("x-burst-budget-remaining"))
	if r.status != 200 || err != nil {
		t.Fatalf("status %d, remaining %q: %s", r.status, r.header.Get("x-burst-budget-remaining"), r.body)
	}
	return n
}

// answer runs one non-streamed request and returns the tokens it used.
func answer(addr, key string, maxTokens int) (int, error) {
	body := fmt.Sprintf(`{"model":"auto","max_tokens":%d,"messages":[{"role":"user","content":"tell me about the weather on the coast"}]}`, maxTokens)
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return out.Usage.Prompt + out.Usage.Completion, nil
}
