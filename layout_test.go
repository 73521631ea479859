package phaseless

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/phaseless/phaseless"

// listed is what `go list -json` says about one package.
type listed struct {
	ImportPath string
	Name       string
	Doc        string
	Imports    []string // direct, non-test
	Deps       []string // transitive, non-test
}

// listPackages lists every package of the module (without tests: the rules
// below bind what binaries link; tests may cross the lines).
func listPackages(t *testing.T) []listed {
	t.Helper()
	out, err := exec.Command("go", "list", "-json=ImportPath,Name,Doc,Imports,Deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

// area is the top-level folder of a module package ("" for the root).
func area(path string) string {
	rest, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return ""
	}
	a, _, _ := strings.Cut(rest, "/")
	return a
}

func within(path, prefix string) bool {
	prefix = module + "/" + prefix
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// TestPackageDocs: every package says what it is for, in a doc comment that
// starts the way godoc expects ("Package x ..." or, for a binary,
// "Command x ...").
func TestPackageDocs(t *testing.T) {
	for _, p := range listPackages(t) {
		want := "Package " + p.Name + " "
		if p.Name == "main" {
			want = "Command " + p.ImportPath[strings.LastIndex(p.ImportPath, "/")+1:] + " "
		}
		if !strings.HasPrefix(p.Doc, want) {
			t.Errorf("%s: package doc %q does not start with %q", p.ImportPath, p.Doc, want)
		}
	}
}

// rule forbids the packages it matches from linking anything under the
// forbidden folders or outside modules.
type rule struct {
	from, why string
	match     func(pkg string) bool
	forbidden []string // module-relative prefixes
	// external are import-path prefixes outside the module, matched as
	// written: "github.com/eclipse/paho" covers every paho module.
	external []string
	// exact: forbidden names packages themselves, not the folders under
	// them (models/lm, the engine, but not models/lm/tokenizer).
	exact bool
	// via are direct imports (module-relative) through which the forbidden
	// packages may still be linked: a debt the rule names until it is paid.
	// Every other direct import is checked, and the package's own imports.
	via []string
}

// forbids reports whether the dependency dep falls under one of r's
// prefixes.
func (r rule) forbids(dep string) bool {
	for _, f := range r.forbidden {
		if r.exact && dep == module+"/"+f || !r.exact && within(dep, f) {
			return true
		}
	}
	for _, f := range r.external {
		if strings.HasPrefix(dep, f) {
			return true
		}
	}
	return false
}

// links is what p links under r: its transitive dependencies, or, when r
// allows some direct imports (via), its direct imports and everything the
// others link.
func (r rule) links(p listed, byPath map[string]listed) []string {
	if len(r.via) == 0 {
		return p.Deps
	}
	out := slices.Clone(p.Imports)
	for _, imp := range p.Imports {
		if !slices.ContainsFunc(r.via, func(v string) bool { return imp == module+"/"+v }) {
			out = append(out, byPath[imp].Deps...)
		}
	}
	return out
}

// TestImportRules encodes DESIGN.md §3's dependency rules on what each
// package links (transitively).
func TestImportRules(t *testing.T) {
	inArea := func(a ...string) func(string) bool {
		return func(p string) bool {
			for _, x := range a {
				if area(p) == x {
					return true
				}
			}
			return false
		}
	}
	rules := []rule{
		{from: "transport, models", why: "shared layers import nothing from agent or cloud", match: inArea("transport", "models"), forbidden: []string{"agent", "cloud"}},
		{from: "agent", why: "the agent never imports the cloud", match: inArea("agent"), forbidden: []string{"cloud"}},
		{from: "cloud", why: "the cloud never imports the agent", match: inArea("cloud"), forbidden: []string{"agent"}},
		{from: "agent", why: "the agent links no training code", match: inArea("agent"), forbidden: []string{"models/lmtrain", "models/predictor/train"}},
		{from: "firmware", why: "the OTA format is shared by agent and cloud", match: inArea("firmware"), forbidden: []string{"agent", "cloud"}},
		{
			from: "cloud/coordinator", why: "the coordinator links no fleet, broker or bbolt",
			match:     func(p string) bool { return within(p, "cloud/coordinator") },
			forbidden: []string{"cloud/fleet", "cloud/fleetapi", "cloud/ui"},
			external:  []string{"github.com/mochi-mqtt/", "github.com/eclipse/paho", "go.etcd.io/bbolt"},
		},
		{from: "models", why: "models never import transport: the fleet reads its records into training examples (cloud/fleetapi/trainset)", match: inArea("models"), forbidden: []string{"transport"}},
		{from: "phaseless-cloud", why: "the cloud binary links no training code or corpora", match: isPackage("cloud/cmd/phaseless-cloud"), forbidden: cloudTraining, external: []string{"gorgonia.org/"}},
		// The coordinator only tokenizes and hashes prompts (models/lm/tokenizer,
		// chatfmt, kvcache); cloud/worker still links the engine for its
		// in-process Builtin worker, handoffs and dev model.
		{from: "cloud/coordinator engine", why: "the coordinator tokenizes; it links the engine only through cloud/worker's built-in worker",
			match: isPackage("cloud/coordinator"), forbidden: []string{"models/lm"}, exact: true, via: []string{"cloud/worker"}},
	}
	checked := map[string]int{}
	pkgs := listPackages(t)
	byPath := map[string]listed{}
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	for _, p := range pkgs {
		for _, r := range rules {
			if !r.match(p.ImportPath) {
				continue
			}
			checked[r.from]++
			reported := map[string]bool{}
			for _, d := range r.links(p, byPath) {
				if r.forbids(d) && !reported[d] {
					reported[d] = true
					t.Errorf("%s links %s: %s", p.ImportPath, d, r.why)
				}
			}
		}
	}
	for _, r := range rules {
		if checked[r.from] == 0 {
			t.Errorf("rule for %s matched no package", r.from)
		}
	}
}

// isPackage matches one module package (module-relative path).
func isPackage(rel string) func(string) bool {
	return func(p string) bool { return p == module+"/"+rel }
}

// cloudTraining is what the cloud binary must not link: the trainers and
// the language models' training corpus (cloud/cmd/phaseless-cloud's
// deps_test.go also checks the built binary's symbols).
var cloudTraining = []string{"models/lmtrain", "models/predictor/train", "cloud/sim/learn", "cloud/fleetapi/trainset"}

// TestImportRulesCatch: the rule matcher itself catches a violation and
// does not confuse neighbouring names (agent vs agentx).
func TestImportRulesCatch(t *testing.T) {
	if !within(module+"/cloud/sched", "cloud") || within(module+"/cloudx", "cloud") || !within(module+"/models/lmtrain/corpus", "models/lmtrain") {
		t.Fatal("within mismatches")
	}
	if area(module+"/agent/route") != "agent" || area(module) != "" || area("golang.org/x/sys") != "" {
		t.Fatal("area mismatches")
	}
	r := rule{forbidden: []string{"cloud/fleet"}, external: []string{"github.com/eclipse/paho", "go.etcd.io/bbolt"}}
	for dep, want := range map[string]bool{
		module + "/cloud/fleet/broker":            true,
		module + "/cloud/fleetapi":                false,
		"github.com/eclipse/paho.golang/autopaho": true,
		"go.etcd.io/bbolt/errors":                 true,
		"github.com/eclipse/other":                false,
		module + "/go.etcd.io/bbolt":              false,
	} {
		if got := r.forbids(dep); got != want {
			t.Errorf("forbids(%s) = %v, want %v", dep, got, want)
		}
	}
	// An exact rule with an allowed import: the engine through cloud/worker
	// passes; through any other import, or imported directly, it does not;
	// the engine's subpackages are not the engine.
	r = rule{forbidden: []string{"models/lm"}, exact: true, via: []string{"cloud/worker"}}
	lm, worker, ui := module+"/models/lm", module+"/cloud/worker", module+"/cloud/ui"
	byPath := map[string]listed{worker: {Deps: []string{lm}}, ui: {Deps: []string{module + "/models/grade", lm}}}
	violates := func(imports ...string) bool {
		return slices.ContainsFunc(r.links(listed{Imports: imports}, byPath), r.forbids)
	}
	if violates(worker, module+"/models/lm/tokenizer") || !violates(worker, ui) || !violates(lm) {
		t.Fatal("via rule mismatches")
	}
	if r.forbids(module+"/models/lm/tokenizer") || !r.forbids(lm) {
		t.Fatal("exact rule mismatches")
	}
}
