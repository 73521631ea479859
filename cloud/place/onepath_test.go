package place

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The drivers of placement: every decision they make must be the Placer's.
var drivers = []string{"../coordinator", "../sim"}

const (
	schedPath    = "github.com/phaseless/phaseless/cloud/sched"
	semanticPath = "github.com/phaseless/phaseless/cloud/semantic"
	prefetchPath = "github.com/phaseless/phaseless/cloud/prefetch"
)

// TestNoSecondPlacementPath fails when the coordinator or the simulator
// places a request itself instead of through the Placer: a call of a
// policy's Decide, of any cloud/sched function that returns a decision or
// builds a policy, a sched.Decision made by hand, a switch over policy
// names, or a semantic grouper or prefetch model of its own. A layer or
// policy added to one driver only is a second copy; it belongs here, where
// both run it.
func TestNoSecondPlacementPath(t *testing.T) {
	deciders := schedDeciders(t)
	for _, dir := range drivers {
		fset, files := parseDir(t, dir)
		for _, f := range secondCopies(fset, files, deciders) {
			t.Errorf("%s: %s", dir, f)
		}
	}
}

// TestSecondCopiesAreFound: what TestNoSecondPlacementPath looks for, it
// finds (and what it must not flag, it does not).
func TestSecondCopiesAreFound(t *testing.T) {
	deciders := schedDeciders(t)
	for _, tc := range []struct {
		name, body string
		found      bool
	}{
		{"a policy's Decide", `d, _ := c.policy.Decide(&sig, snap); _ = d`, true},
		{"FIFO under the breaker", `d, _ := sched.FIFO(&sig, snap); _ = d`, true},
		{"a policy built by name", `p, _ := sched.New("rules", sched.Options{}); _ = p`, true},
		{"affinity wrapped here", `p, _ := sched.NewAffinity(nil, sched.AffinityConfig{}); _ = p`, true},
		{"a decision made by hand", `d := sched.Decision{Worker: 1}; _ = d`, true},
		{"a switch over policy names", `switch name { case sched.NameRoundRobin: }`, true},
		{"a grouper of its own", `g, _ := semantic.NewGrouper(semantic.GroupConfig{}); _ = g`, true},
		{"a prefetch model of its own", `m, _ := prefetch.New(prefetch.Config{}); _ = m`, true},
		{"the Placer", `d, _ := placer.Place(&r, v); _ = d`, false},
		{"signals and roles", `w := sched.Worker{Role: sched.RoleDecode}; _ = w.Load()`, false},
	} {
		src := `package x
import (
	"` + schedPath + `"
	"` + semanticPath + `"
	"` + prefetchPath + `"
)
var _, _, _ = sched.Worker{}, semantic.Fingerprint{}, prefetch.Hint("")
func f() {
	` + tc.body + `
}`
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "x.go", src, 0)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := len(secondCopies(fset, []*ast.File{f}, deciders)) > 0; got != tc.found {
			t.Errorf("%s: found %v, want %v", tc.name, got, tc.found)
		}
	}
}

// TestPlaceImportsNoRuntime: the Placer is clock-free and runs no I/O, so
// the simulator can run it in virtual time: it links no network, no process
// or file I/O beyond what fmt brings, none of the drivers' packages, and its
// own code starts no goroutine and reads no clock.
func TestPlaceImportsNoRuntime(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := []string{"net", "os/exec", "os/signal", "crypto/tls", "database/sql", "log",
		"github.com/phaseless/phaseless/cloud/worker", "github.com/phaseless/phaseless/cloud/admit",
		"github.com/phaseless/phaseless/cloud/affinity", "github.com/phaseless/phaseless/cloud/coordinator",
		"github.com/phaseless/phaseless/cloud/sim", "github.com/phaseless/phaseless/internal/metrics"}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("cloud/place links %s", dep)
			}
		}
	}
	fset, files := parseDir(t, ".")
	clock := []string{"Now", "Since", "Until", "Sleep", "After", "AfterFunc", "Tick", "NewTimer", "NewTicker"}
	for _, f := range files {
		imports := importNames(f)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: starts a goroutine", fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && imports[id.Name] == "time" && slices.Contains(clock, n.Sel.Name) {
					t.Errorf("%s: reads the clock (time.%s)", fset.Position(n.Pos()), n.Sel.Name)
				}
			}
			return true
		})
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "context" {
				t.Errorf("%s: imports context (a Placer call never blocks)", fset.Position(imp.Pos()))
			}
		}
	}
}

// parseDir parses a directory's non-test Go files.
func parseDir(t *testing.T, dir string) (*token.FileSet, []*ast.File) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(names) == 0 {
		t.Fatalf("%s: no Go files (%v)", dir, err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return fset, files
}

// importNames maps each file-local package name to its import path.
func importNames(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		m[name] = p
	}
	return m
}

// schedDeciders are cloud/sched's exported functions that decide or build
// a policy: those returning a Decision, a Policy, or a type with a Decide
// method. Read from its source, so a new policy's constructor counts
// without this test changing.
func schedDeciders(t *testing.T) map[string]bool {
	t.Helper()
	_, files := parseDir(t, "../sched")
	policyTypes := map[string]bool{"Decision": true, "Policy": true}
	for _, f := range files {
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv != nil && fn.Name.Name == "Decide" {
				policyTypes[baseType(fn.Recv.List[0].Type)] = true
			}
		}
	}
	out := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil {
				continue
			}
			for _, r := range fn.Type.Results.List {
				if policyTypes[baseType(r.Type)] {
					out[fn.Name.Name] = true
				}
			}
		}
	}
	if !out["FIFO"] || !out["New"] || !out["NewPriced"] {
		t.Fatalf("deciders %v: the sched source did not read as expected", out)
	}
	return out
}

func baseType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return baseType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// secondCopies lists what in files places a request outside the Placer.
func secondCopies(fset *token.FileSet, files []*ast.File, deciders map[string]bool) []string {
	var found []string
	add := func(n ast.Node, what string) {
		found = append(found, fset.Position(n.Pos()).String()+": "+what)
	}
	for _, f := range files {
		imports := importNames(f)
		pkg := func(e ast.Expr) (path, sel string) {
			if s, ok := e.(*ast.SelectorExpr); ok {
				if id, ok := s.X.(*ast.Ident); ok {
					return imports[id.Name], s.Sel.Name
				}
			}
			return "", ""
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if s, ok := n.Fun.(*ast.SelectorExpr); ok && (s.Sel.Name == "Decide" || s.Sel.Name == "DecideCombo") {
					add(n, "calls a policy's "+s.Sel.Name)
				}
			case *ast.SelectorExpr:
				switch path, sel := pkg(n); {
				case path == schedPath && deciders[sel]:
					add(n, "uses sched."+sel+", which decides or builds a policy")
				case path == semanticPath && (sel == "NewGrouper" || sel == "Grouper"):
					add(n, "keeps semantic groups of its own")
				case path == prefetchPath && (sel == "New" || sel == "Model"):
					add(n, "keeps a prefetch model of its own")
				}
			case *ast.CompositeLit:
				if path, sel := pkg(n.Type); path == schedPath && sel == "Decision" {
					add(n, "makes a sched.Decision by hand")
				}
			case *ast.CaseClause:
				for _, e := range n.List {
					if path, sel := pkg(e); path == schedPath && strings.HasPrefix(sel, "Name") {
						add(e, "switches over policy names")
					}
				}
			}
			return true
		})
	}
	return found
}
