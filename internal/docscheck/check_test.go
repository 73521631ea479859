package docscheck

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// fixtureFacts is a small made-up code base: a tool with a group and a
// daemon.
func fixtureFacts() Facts {
	set := func(names ...string) map[string]bool {
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return m
	}
	create := &Command{Path: "phaselessctl fleet rollout create", Flags: set("cloud", "stages", "max-failures")}
	list := &Command{Path: "phaselessctl fleet rollout list", Flags: set("cloud")}
	rollout := &Command{Path: "phaselessctl fleet rollout", Subs: map[string]*Command{"create": create, "list": list}}
	fleet := &Command{Path: "phaselessctl fleet", Subs: map[string]*Command{"rollout": rollout}}
	keygen := &Command{Path: "phaselessctl ota keygen", Flags: set("dir")}
	ota := &Command{Path: "phaselessctl ota", Subs: map[string]*Command{"keygen": keygen}}
	sim := &Command{Path: "phaselessctl sim", Flags: set("trace")}
	ctl := &Command{Path: "phaselessctl", Subs: map[string]*Command{"fleet": fleet, "ota": ota, "sim": sim}}
	selfcheck := &Command{Path: "phaseless-agent selfcheck", Flags: map[string]bool{}}
	agent := &Command{Path: "phaseless-agent", Flags: set("listen", "mqtt", "config"), Subs: map[string]*Command{"selfcheck": selfcheck}}
	return Facts{
		Binaries: map[string]*Command{"phaselessctl": ctl, "phaseless-agent": agent},
		Metrics: map[string]string{
			"phaseless_api_requests_total": "counter", "phaseless_api_ttft_seconds": "histogram",
			"phaseless_fleet_devices": "gauge", "phaseless_worker_queue": "gauge", "phaseless_worker_inflight": "gauge",
			"phaseless_engine_host_kv_stores_total": "counter", "phaseless_engine_host_kv_loads_total": "counter",
		},
		Headers: set("x-phaseless-route", "x-fallback-reason"),
		Endpoint: func(p string) bool {
			return slices.Contains([]string{"/v1/chat/completions", "/v1/fleet/devices/x", "/metrics"}, p)
		},
		Tests: set("TestKillAfterAnswersKeepsEveryRecord", "FuzzDecodeChat", "BenchmarkAgentHTTP"),
	}
}

// TestCheckFixture: a doc that names only what the fixture code has passes
// (every form the docs use); the same doc with one made-up flag, subcommand,
// metric, header or endpoint fails on that line, and a flag no doc names is
// reported.
func TestCheckFixture(t *testing.T) {
	good, err := os.ReadFile("testdata/good.md")
	if err != nil {
		t.Fatal(err)
	}
	if ps := Check([]Doc{Parse("good.md", string(good))}, fixtureFacts()); len(ps) != 0 {
		t.Fatalf("the good fixture has problems:\n%s", join(ps))
	}
	for _, tc := range []struct {
		name, add, want string
	}{
		{"made-up flag after a command", "Run `phaselessctl fleet rollout create --stages 50% --canary 3`.", "phaselessctl fleet rollout create has no flag --canary"},
		{"made-up flag in a code block", "```sh\nphaseless-agent --listen 127.0.0.1:7070 --turbo\n```", "phaseless-agent has no flag --turbo"},
		{"made-up flag in prose", "Pass --frobnicate to go faster.", "no binary or command has a flag --frobnicate"},
		{"made-up flag in a span", "Set `--frobnicate 3`.", "no binary or command has a flag --frobnicate"},
		{"made-up flag after a group span", "Then `ota keygen --force`.", "phaselessctl ota keygen has no flag --force"},
		{"flag of another command", "`phaselessctl fleet rollout list --stages 1%`", "phaselessctl fleet rollout list has no flag --stages"},
		{"made-up subcommand", "`phaselessctl fleet rollout promote`", `phaselessctl fleet rollout has no subcommand "promote"`},
		{"made-up alternative", "`phaselessctl fleet rollout create|promote`", `phaselessctl fleet rollout has no subcommand "promote"`},
		{"made-up metric", "`phaseless_api_latency_seconds`", "no binary exposes a metric family phaseless_api_latency_seconds"},
		{"made-up alternative metric", "`phaseless_worker_{queue,kv_usage}{worker}`", "no binary exposes a metric family phaseless_worker_kv_usage"},
		{"made-up metric prefix", "`phaseless_gpu_*`", "no binary exposes a metric family phaseless_gpu_*"},
		{"counter suffix on a gauge", "`phaseless_fleet_devices_count`", "no binary exposes a metric family phaseless_fleet_devices_count"},
		{"made-up header", "`x-phaseless-priority: high`", "no code reads or writes a header x-phaseless-priority"},
		{"made-up endpoint", "`POST /v1/fleet/reboot`", "no binary serves /v1/fleet/reboot"},
		{"made-up test", "`go test -run TestKillDuringReboot ./agent`", "no test, fuzz target or benchmark is named TestKillDuringReboot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := Check([]Doc{Parse("bad.md", string(good)+"\n"+tc.add+"\n")}, fixtureFacts())
			if len(ps) != 1 || !strings.Contains(ps[0].Msg, tc.want) || ps[0].Line < strings.Count(string(good), "\n")+2 {
				t.Fatalf("want one problem %q on the added line, got:\n%s", tc.want, join(ps))
			}
		})
	}
	// Remove the only mention of a metric family: it is undocumented.
	doc := strings.ReplaceAll(string(good), "{queue,inflight}", "{queue}")
	if ps := Check([]Doc{Parse("good.md", doc)}, fixtureFacts()); len(ps) != 1 || ps[0].Msg != "metric family phaseless_worker_inflight is documented nowhere in README.md or docs/*.md (by its whole name)" {
		t.Fatalf("want phaseless_worker_inflight undocumented, got:\n%s", join(ps))
	}
	// A header the code has and no doc names is undocumented.
	facts := fixtureFacts()
	facts.Headers["x-phaseless-decode"] = true
	if ps := Check([]Doc{Parse("good.md", string(good))}, facts); len(ps) != 1 || ps[0].Msg != "header x-phaseless-decode is documented nowhere in README.md or docs/*.md" {
		t.Fatalf("want x-phaseless-decode undocumented, got:\n%s", join(ps))
	}
	// Remove the only mention of a command: it is undocumented.
	doc = strings.ReplaceAll(string(good), "`phaselessctl sim --trace t.csv` runs the simulator.", "")
	if ps := Check([]Doc{Parse("good.md", doc)}, fixtureFacts()); len(ps) != 2 || ps[0].Msg != "phaselessctl sim is documented nowhere in README.md or docs/*.md" {
		t.Fatalf("want sim and its --trace undocumented, got:\n%s", join(ps))
	}
	// Remove the only mention of a flag: it is undocumented.
	doc = strings.ReplaceAll(string(good), "--mqtt", "--listen")
	ps := Check([]Doc{Parse("good.md", doc)}, fixtureFacts())
	if len(ps) != 1 || ps[0].Msg != "phaseless-agent --mqtt is documented nowhere in README.md or docs/*.md" {
		t.Fatalf("want --mqtt undocumented, got:\n%s", join(ps))
	}
}

// TestBlocks: markers, continuation lines and comments.
func TestBlocks(t *testing.T) {
	d := Parse("x.md", "text\n<!-- docscheck: run -->\n```sh\n$ phaselessctl pki init \\\n    --dir pki   # the CA\n\n# a comment\nphaselessctl pki device --dir pki --id 'car 1'\n```\n\n```\nnot marked\n```\n")
	bs := d.Blocks()
	if len(bs) != 2 || bs[0].Marker != "run" || bs[1].Marker != "" || bs[0].Line != 4 || bs[0].Info != "sh" {
		t.Fatalf("blocks: %+v", bs)
	}
	want := []string{"phaselessctl pki init --dir pki", "phaselessctl pki device --dir pki --id 'car 1'"}
	if got := bs[0].Commands(); !slices.Equal(got, want) {
		t.Fatalf("commands %q, want %q", got, want)
	}
}

func join(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String() + "\n")
	}
	return b.String()
}
