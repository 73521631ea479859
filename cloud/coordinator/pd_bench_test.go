package coordinator

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/batch"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/sched/schedtest"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/cloudmodel"
	"github.com/phaseless/phaseless/models/lm"
)

// BenchmarkSplitVsColocated runs the same requests, alternately, colocated
// on one built-in worker and split between two (prefill on one, KV handed in
// memory to the other, decode there), on the shipped cloud model with one
// thread per engine (as `phaseless-cloud --dev` gives each of its workers on
// two cores). Every request has a prompt of its own, so no prefix cache
// helps either side. It reports the handoff's bytes per prompt token, each
// side's mean request time and time to first token, and split/colocated,
// the ratio of request times measured in the same run.
//
//	go test ./cloud/coordinator -run '^$' -bench SplitVsColocated -benchtime 20x
func BenchmarkSplitVsColocated(b *testing.B) {
	model, err := cloudmodel.Open()
	if err != nil {
		b.Fatal(err)
	}
	newWorker := func(name string, role sched.Role) *worker.Worker {
		eng, err := lm.NewEngine(model, lm.EngineConfig{Threads: 1})
		if err != nil {
			b.Fatal(err)
		}
		w, err := worker.New(worker.Config{Name: name, Role: role, Batch: &batch.Config{}}, worker.NewBuiltin(eng))
		if err != nil {
			b.Fatal(err)
		}
		return w
	}
	clk := &clock{t: time.Unix(1e9, 0)}
	for _, words := range []int{8, 24, 40} {
		b.Run(fmt.Sprintf("prompt=%dwords", words), func(b *testing.B) {
			colo, _ := newCoordinatorWith(b, clk, schedtest.Fixed{D: sched.Decision{Worker: 0, Pool: sched.RoleDecode}}, newWorker("solo", sched.RoleDecode))
			split, reg := newCoordinatorWith(b, clk, splitAt(0, 1, sched.RolePrefill), newWorker("pre", sched.RolePrefill), newWorker("dec", sched.RoleDecode))
			var coloT, splitT, coloFirst, splitFirst time.Duration
			var bytes, prompt int64
			timed := func(c *Coordinator, req *llm.Request) (time.Duration, time.Duration, llm.Meta, llm.Final) {
				start := time.Now()
				var first time.Duration
				var begin llm.Meta
				fin, err := c.Generate(b.Context(), req, func(tk llm.Token) error {
					if tk.Meta != nil {
						begin = *tk.Meta
					} else if first == 0 {
						first = time.Since(start)
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				return time.Since(start), first, begin, fin
			}
			b.ResetTimer()
			for i := range b.N {
				text := fmt.Sprintf("request %d: %s", i, strings.Repeat("the engine hands its keys and values over ", words/7+1))
				text = strings.Join(strings.Fields(text)[:words], " ")
				req := greedy(text, 16)
				d, f, _, _ := timed(colo, req)
				coloT, coloFirst = coloT+d, coloFirst+f
				d, f, begin, fin := timed(split, req)
				splitT, splitFirst = splitT+d, splitFirst+f
				if !begin.Split.IsSet() {
					b.Fatalf("request %d was not split: %+v", i, begin)
				}
				bytes += begin.Split.KVBytes
				prompt += int64(fin.PromptTokens)
			}
			n := float64(b.N)
			b.ReportMetric(float64(bytes)/float64(prompt), "handoff-B/prompt-token")
			b.ReportMetric(float64(prompt)/n, "prompt-tokens")
			b.ReportMetric(coloT.Seconds()*1e3/n, "colocated-ms/req")
			b.ReportMetric(splitT.Seconds()*1e3/n, "split-ms/req")
			b.ReportMetric(coloFirst.Seconds()*1e3/n, "colocated-ttft-ms")
			b.ReportMetric(splitFirst.Seconds()*1e3/n, "split-ttft-ms")
			b.ReportMetric(splitT.Seconds()/coloT.Seconds(), "split/colocated")
			b.ReportMetric(HandoffMeanSeconds(reg, "transfer")*1e6, "transfer-µs")
		})
	}
}
