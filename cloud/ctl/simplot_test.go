package ctl

import (
	"fmt"
	"testing"

	"github.com/phaseless/phaseless/cloud/sched"
)

// TestSimPlotStyles: every policy --policy all plots has a colour of its
// own and a marker and dash pattern of its own, and the default scheduler,
// whose line coincides with the policy it runs, is drawn wider than that
// policy, under it, and says in the legend what it runs.
func TestSimPlotStyles(t *testing.T) {
	colours, shapes := map[string]string{}, map[string]string{}
	var def, runs float64
	for k, p := range sched.Names() {
		ls, gs := simStyle(k, p)
		r, g, b, _ := ls.Color.RGBA()
		c := fmt.Sprint(r>>8, g>>8, b>>8)
		if q, ok := colours[c]; ok {
			t.Errorf("%s and %s share colour %s", p, q, c)
		}
		colours[c] = p
		if p == sched.NameScheduler {
			def = float64(ls.Width)
			continue // drawn solid and wide instead
		}
		sh := fmt.Sprintf("%T %v", gs.Shape, ls.Dashes)
		if q, ok := shapes[sh]; ok {
			t.Errorf("%s and %s share marker and dashes %s", p, q, sh)
		}
		shapes[sh] = p
		if p == sched.DefaultPolicy {
			runs = float64(ls.Width)
		}
	}
	if !(def > 2*runs) || runs == 0 || simLabel(sched.NameScheduler) != "scheduler (= "+sched.DefaultPolicy+")" {
		t.Fatalf("scheduler width %v, %s width %v, label %q", def, sched.DefaultPolicy, runs, simLabel(sched.NameScheduler))
	}
}
