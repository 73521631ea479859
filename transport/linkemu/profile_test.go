package linkemu

import (
	"strings"
	"testing"
	"time"
)

func TestProfilesValidateAndMatchTheirDocs(t *testing.T) {
	for _, p := range Profiles() {
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
	poor, _ := Lookup("lte-poor")
	// The lte-poor: ≈120 ms RTT, 3% loss, 2 Mb/s.
	if poor.RTT() != 120*time.Millisecond || poor.SmoothedRTT() != 140*time.Millisecond || poor.Up.Rate != 2_000_000 {
		t.Errorf("lte-poor RTT %v (smoothed %v), rate %d", poor.RTT(), poor.SmoothedRTT(), poor.Up.Rate)
	}
	if loss := 1 - (1-poor.Up.Loss)*(1-poor.Up.Burst.MeanLoss()); loss < 0.029 || loss > 0.031 {
		t.Errorf("lte-poor loses %.4f, want 3%%", loss)
	}
	tunnel, _ := Lookup("tunnel")
	if len(tunnel.Blackouts) == 0 {
		t.Error("tunnel has no blackouts")
	}
}

func TestParseProfile(t *testing.T) {
	for _, tc := range []struct {
		spec  string
		check func(Profile) bool
		err   string
	}{
		{spec: "lte-poor", check: func(p Profile) bool { return p.Name == "lte-poor" }},
		{spec: "lte-good,loss=5%,delay=80ms", check: func(p Profile) bool {
			return p.Up.Loss == 0.05 && p.Down.Delay == 80*time.Millisecond && p.Name == "lte-good,loss=5%,delay=80ms"
		}},
		{spec: "loopback,rate=1mbit,queue=32k,reorder=0.01,reorder-by=20ms,jitter=5ms", check: func(p Profile) bool {
			return p.Down.Rate == 1_000_000 && p.Up.Queue == 32<<10 && p.Up.Reorder == 0.01 && p.Up.ReorderBy == 20*time.Millisecond && p.Up.Jitter == 5*time.Millisecond
		}},
		{spec: "lte-good,ge=1%/20%/50%,blackout=5s+10s,every=60s,rebind=3s", check: func(p Profile) bool {
			return p.Up.Burst == GilbertElliott{P: 0.01, R: 0.2, LossBad: 0.5} && len(p.Blackouts) == 1 &&
				p.BlackoutEvery == time.Minute && len(p.PathChanges) == 1
		}},
		{spec: "tunnel,blackout=50s+10s", err: "ends after BlackoutEvery"},
		{spec: "lte-great", err: "unknown profile"},
		{spec: "lte-good,loss=150%", err: "not a probability"},
		{spec: "lte-good,speed=1", err: "unknown key"},
		{spec: "lte-good,delay", err: "not key=value"},
		{spec: "lte-good,ge=1%/2%", err: "P/R/LossBad"},
		{spec: "lte-good,rate=99999999999999999g", err: "out of range"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			p, err := ParseProfile(tc.spec)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !tc.check(p) {
				t.Fatalf("%+v, %v", p, err)
			}
		})
	}
	// Overrides never leak into the named profile.
	ParseProfile("tunnel,blackout=1s+1s")
	if tn, _ := Lookup("tunnel"); len(tn.Blackouts) != 1 {
		t.Error("ParseProfile changed the named profile")
	}
}

// FuzzParseProfile: any spec either fails or yields a profile that
// validates and a relay can run.
func FuzzParseProfile(f *testing.F) {
	for _, s := range []string{"lte-poor", "lte-good,loss=5%,delay=80ms", "loopback,rate=1mbit,queue=32k", "tunnel,ge=1%/20%/50%,blackout=5s+10s,every=60s,rebind=3s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		p, err := ParseProfile(spec)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("%q parsed into an invalid profile: %v", spec, err)
		}
		s := newShaper(p.Up, p.RTT(), 1, 1)
		for i := range 10 {
			s.packet(t0.Add(time.Duration(i)*time.Millisecond), 1200)
		}
	})
}
