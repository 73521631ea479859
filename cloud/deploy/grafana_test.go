package deploy

import (
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/cloud"
	"github.com/phaseless/phaseless/internal/metrics/metricstest"
)

// exportedSeries starts real clouds, one with the embedded broker and one
// with an external broker URL (its outbox metrics exist only then), and
// returns every series name their /metrics pages declare (histograms with
// their _bucket, _sum and _count), after checking the pages with expfmt.
func exportedSeries(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, mutate := range []func(*cloud.Config){
		func(c *cloud.Config) { c.MQTT = "127.0.0.1:0" },
		func(c *cloud.Config) { c.MQTTURL.Set("mqtt://127.0.0.1:1") }, // connects in the background; never needed here
	} {
		var cfg cloud.Config
		fs := flag.NewFlagSet("cloud", flag.ContinueOnError)
		cfg.RegisterFlags(fs)
		cfg.HTTP, cfg.QUIC, cfg.MQTT, cfg.MQTTTLS, cfg.DataDir, cfg.Dev = "127.0.0.1:0", "", "", "", t.TempDir(), true
		mutate(&cfg)
		c, err := cloud.New(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		var page strings.Builder
		c.Metrics().WriteText(&page)
		c.Close()
		metricstest.CheckConventions(t, metricstest.Parse(t, page.String()))
		for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`).FindAllStringSubmatch(page.String(), -1) {
			names[m[1]] = true
			if m[2] == "histogram" {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					names[m[1]+s] = true
				}
			}
		}
	}
	return names
}

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name, Type string
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource struct {
		Type, UID string
	} `json:"datasource"`
	GridPos struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

var seriesRE = regexp.MustCompile(`\bphaseless_[a-zA-Z0-9_:]*`)

// TestGrafanaDashboards checks the checked-in dashboards: valid JSON with
// the fields Grafana needs to import them (uid, title, schemaVersion,
// panels with unique ids, a type, a position on the 24-column grid, the
// Prometheus data source variable), and every PromQL expression names only
// series that the cloud exports, with balanced brackets.
func TestGrafanaDashboards(t *testing.T) {
	files, _ := filepath.Glob("grafana/*.json")
	if len(files) != 2 {
		t.Fatalf("dashboards %v, want the cloud's and the fleet's", files)
	}
	exported := exportedSeries(t)
	uids := map[string]bool{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d.UID == "" || uids[d.UID] || d.Title == "" || d.SchemaVersion < 30 || len(d.Panels) == 0 {
			t.Errorf("%s: uid %q (unique), title %q, schemaVersion %d, %d panels", f, d.UID, d.Title, d.SchemaVersion, len(d.Panels))
		}
		uids[d.UID] = true
		if len(d.Templating.List) == 0 || d.Templating.List[0].Type != "datasource" || d.Templating.List[0].Name != "datasource" {
			t.Errorf("%s: no ${datasource} variable", f)
		}
		ids := map[int]bool{}
		for _, p := range d.Panels {
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("%s: panel %q: id %d is zero or repeated", f, p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.Type != "timeseries" && p.Type != "stat" || p.Title == "" {
				t.Errorf("%s: panel %d: type %q title %q", f, p.ID, p.Type, p.Title)
			}
			if g := p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
				t.Errorf("%s: panel %q: gridPos %+v off the 24-column grid", f, p.Title, g)
			}
			if p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: panel %q: datasource %+v", f, p.Title, p.Datasource)
			}
			refs := map[string]bool{}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", f, p.Title)
			}
			for _, q := range p.Targets {
				if q.RefID == "" || refs[q.RefID] {
					t.Errorf("%s: panel %q: refId %q empty or repeated", f, p.Title, q.RefID)
				}
				refs[q.RefID] = true
				if !balanced(q.Expr) {
					t.Errorf("%s: panel %q: unbalanced brackets in %s", f, p.Title, q.Expr)
				}
				found := seriesRE.FindAllString(q.Expr, -1)
				if len(found) == 0 {
					t.Errorf("%s: panel %q: %s names no Phaseless series", f, p.Title, q.Expr)
				}
				for _, s := range found {
					if !exported[s] {
						t.Errorf("%s: panel %q: %s is not exported by the cloud", f, p.Title, s)
					}
				}
			}
		}
	}
}

func balanced(s string) bool {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	inString := false
	for _, r := range s {
		switch {
		case r == '"':
			inString = !inString
		case inString:
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0 && !inString
}
