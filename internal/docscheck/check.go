package docscheck

import (
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Command is one command of a binary as the code defines it.
type Command struct {
	Path  string          // "phaselessctl fleet rollout create"
	Flags map[string]bool // names without dashes; nil for a command whose flags could not be asked for
	Subs  map[string]*Command
}

// Facts is what the code has, gathered by the caller from the binaries.
type Facts struct {
	Binaries map[string]*Command // "phaselessctl", "phaseless-agent", "phaseless-cloud"
	// Metrics are the families the binaries expose, by name, with their
	// type ("counter", "histogram", …).
	Metrics map[string]string
	// Headers are the x- header names (lower case) the code reads or writes.
	Headers map[string]bool
	// Endpoint reports whether some binary serves the path (any method).
	Endpoint func(path string) bool
	// Tests are the module's Test, Fuzz and Benchmark functions; nil skips
	// the check.
	Tests map[string]bool
}

// Problem is one false or missing statement.
type Problem struct {
	File string
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// foreignTools are programs whose flags the docs quote and that are not ours.
var foreignTools = map[string]bool{
	"go": true, "curl": true, "make": true, "kubectl": true, "npm": true, "npx": true, "node": true,
	"docker": true, "git": true, "env": true, "time": true, "cd": true, "cat": true, "echo": true,
	"mosquitto": true, "mosquitto_passwd": true, "mosquitto_sub": true, "mosquitto_pub": true,
	"redis-server": true, "redis-cli": true, "systemctl": true, "systemd-analyze": true, "journalctl": true,
	"openssl": true, "python3": true, "pip": true, "apt-get": true, "helm": true, "benchstat": true,
	"ls": true, "export": true, "tar": true, "install": true, "mkdir": true, "touch": true, "grep": true,
	"jq": true, "bash": true, "sh": true, "chromium": true, "qemu-aarch64-static": true, "qemu-arm-static": true,
	"tee": true, "perf": true, "pprof": true, "watch": true, "sed": true, "awk": true, "sort": true,
	"head": true, "tail": true, "wc": true, "xargs": true, "rm": true, "cp": true, "mv": true, "ssh": true,
	"scp": true, "vllm": true, "cmake": true, "gcc": true, "python": true, "llama-server": true, "ollama": true, "ps": true, "du": true,
}

// foreignFlags are other programs' flags the docs name in prose, with
// the program.
var foreignFlags = map[string]string{
	"enable-prefix-caching": "vLLM", "max-num-seqs": "vLLM", "max-model-len": "vLLM",
}

// foreignEndpoints are other servers' paths the docs name.
var foreignEndpoints = map[string]string{
	"/v1/traces": "an OpenTelemetry collector's OTLP/HTTP endpoint",
}

// builtinFlags are the flag package's own: every command takes them.
var builtinFlags = map[string]bool{"help": true, "h": true}

var (
	flagRE     = regexp.MustCompile(`(?:^|[\s(\[,|=/'"])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)`)
	metricRE   = regexp.MustCompile(`phaseless_[a-z0-9_{},*="'-]*`)
	headerRE   = regexp.MustCompile(`(?i)(?:^|[^a-z0-9/-])(x-[a-z0-9]+(?:-[a-z0-9]+)*)`) // not a MIME type's application/x-…
	testRE     = regexp.MustCompile(`\b(?:Test|Fuzz|Benchmark)[A-Z0-9][A-Za-z0-9_]*`)
	endpointRE = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.\-/])(/(?:v1/[A-Za-z0-9_.{}<>:-]+|ui|metrics|healthz|readyz|debug/pprof)(?:/[A-Za-z0-9_.{}<>:-]*)*)`)
)

// Check returns every problem in docs against f, in doc order.
func Check(docs []Doc, f Facts) []Problem {
	c := &checker{f: f, allFlags: map[string]bool{}, documented: map[string]bool{}, docText: map[string]string{}}
	for _, b := range f.Binaries {
		walk(b, func(cmd *Command) {
			for fl := range cmd.Flags {
				c.allFlags[fl] = true
			}
			if cmd.Flags == nil && len(cmd.Subs) == 0 {
				c.flagsUnknown = true
			}
		})
	}
	for _, d := range docs {
		c.docText[d.Path] = strings.Join(d.Lines, "\n")
		for _, s := range d.spans() {
			c.span(d.Path, s)
		}
	}
	c.undocumented()
	return c.problems
}

type checker struct {
	f        Facts
	allFlags map[string]bool
	// flagsUnknown: some command's flags could not be asked for, so a flag
	// outside a command that no known command has may still be its.
	flagsUnknown bool
	documented   map[string]bool   // "phaselessctl lm train", "phaselessctl lm train --out", and "--out" for any mention
	docText      map[string]string // doc path → text, for flags documented beside their command
	problems     []Problem
}

func (c *checker) add(file string, line int, format string, args ...any) {
	c.problems = append(c.problems, Problem{File: file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func walk(c *Command, fn func(*Command)) {
	fn(c)
	for _, n := range slices.Sorted(maps.Keys(c.Subs)) {
		walk(c.Subs[n], fn)
	}
}

func (c *checker) span(file string, s span) {
	if !s.oldColumn {
		c.metrics(file, s)
	}
	if s.kind == prose {
		for _, m := range flagRE.FindAllStringSubmatch(s.text, -1) {
			c.looseFlag(file, s.line, m[1])
		}
		return
	}
	c.headers(file, s)
	c.endpoints(file, s)
	c.tests(file, s)
	for _, seg := range segments(s.text) {
		c.command(file, s.line, seg, s.kind == inline)
	}
}

// segments splits a command line at pipes and command separators.
func segments(text string) [][]string {
	var out [][]string
	var cur []string
	for _, w := range shellWords(text) {
		switch w {
		case "|", "||", "&&", ";", "&":
			out = append(out, cur)
			cur = nil
			continue
		}
		cur = append(cur, w)
	}
	return append(out, cur)
}

// shellWords splits a line into words the way a shell would for the
// purposes here: quotes group, and are kept off the word.
func shellWords(s string) []string {
	var out []string
	var b strings.Builder
	var quote rune
	in := false
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				b.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, b.String())
				b.Reset()
				in = false
			}
		default:
			b.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, b.String())
	}
	return out
}

// command checks one command line's words: a binary with its subcommands
// and flags, another program (whose flags are not ours), or a bare mention.
func (c *checker) command(file string, line int, words []string, inline bool) {
	i := 0
	for i < len(words) && (words[i] == "sudo" || strings.Contains(words[i], "=") && !strings.HasPrefix(words[i], "-")) {
		i++ // sudo, VAR=value
	}
	if i >= len(words) {
		return
	}
	for j := i; j < len(words); j++ {
		if b := c.f.Binaries[path.Base(words[j])]; b != nil {
			c.resolve(file, line, b, words[j+1:], true)
			return
		}
	}
	if foreignTools[path.Base(words[i])] {
		return
	}
	// A code span naming a phaselessctl group and one of its subcommands
	// ("fleet rollout create …", "ota sign --kind predictor").
	if ctl := c.f.Binaries["phaselessctl"]; ctl != nil && inline {
		if top := ctl.Subs[words[i]]; top != nil {
			next := ""
			if i+1 < len(words) {
				next = strings.Split(strings.Trim(words[i+1], "[]"), "|")[0]
			}
			if top.Subs[next] != nil || len(top.Subs) == 0 && strings.HasPrefix(next, "--") {
				c.resolve(file, line, ctl, words[i:], false)
				return
			}
		}
	}
	for _, w := range words[i:] {
		if m := flagRE.FindStringSubmatch(w); m != nil && strings.HasPrefix(w, "--") {
			c.looseFlag(file, line, m[1])
		}
	}
}

// resolve walks words under cmd: subcommand words first (a|b alternatives
// each), then flags, which must be flags of the command reached. strict: the
// words followed a binary's name, so an unknown subcommand is an error.
func (c *checker) resolve(file string, line int, cmd *Command, words []string, strict bool) {
	cmds := []*Command{cmd}
	resolving := true
	for _, w := range words {
		w = strings.Trim(w, "[]()")
		if w == "" {
			continue
		}
		if strings.HasPrefix(w, "-") && len(w) > 1 && w != "--" {
			resolving = false
			name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
			if !flagRE.MatchString(" --" + name) {
				continue
			}
			for _, cm := range cmds {
				c.cmdFlag(file, line, cm, name)
			}
			continue
		}
		if !resolving || !hasSubs(cmds) {
			continue
		}
		if w == "..." || w == "…" || !lowerWord(w) {
			resolving = false
			continue
		}
		var next []*Command
		for _, alt := range strings.Split(w, "|") {
			for _, cm := range cmds {
				if s := cm.Subs[alt]; s != nil {
					next = append(next, s)
				} else if strict && len(cm.Subs) > 0 && len(cm.Flags) == 0 {
					c.add(file, line, "%s has no subcommand %q", cm.Path, alt)
				}
			}
		}
		if len(next) == 0 {
			resolving = false
			continue
		}
		for _, cm := range next {
			c.documented[cm.Path] = true
		}
		cmds = next
	}
}

func hasSubs(cmds []*Command) bool {
	for _, c := range cmds {
		if len(c.Subs) > 0 {
			return true
		}
	}
	return false
}

var lowerWordRE = regexp.MustCompile(`^[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)*$`)

func lowerWord(w string) bool { return lowerWordRE.MatchString(w) }

// cmdFlag checks a flag written after a command: a flag of that command, or
// for a group (`phaselessctl fleet … --cloud`) of one of its commands.
func (c *checker) cmdFlag(file string, line int, cmd *Command, name string) {
	found := false
	walk(cmd, func(s *Command) {
		if s.Flags == nil && len(s.Subs) == 0 { // flags not known
			found = true
		}
		if s.Flags[name] {
			found = true
			c.documented[s.Path+" --"+name] = true
		}
	})
	c.documented["--"+name] = true
	if !found && !builtinFlags[name] {
		c.add(file, line, "%s has no flag --%s", cmd.Path, name)
	}
}

// looseFlag checks a flag named outside a command: some binary must have it.
func (c *checker) looseFlag(file string, line int, name string) {
	c.documented["--"+name] = true
	if !c.allFlags[name] && !builtinFlags[name] && foreignFlags[name] == "" && !c.flagsUnknown {
		c.add(file, line, "no binary or command has a flag --%s", name)
	}
}

// metrics checks every phaseless_ family the span names.
func (c *checker) metrics(file string, s span) {
	for _, m := range metricRE.FindAllString(s.text, -1) {
		for _, name := range expand(m) {
			c.documented[name] = true
			if !c.metricExists(name) {
				c.add(file, s.line, "no binary exposes a metric family %s", name)
			}
		}
	}
}

func (c *checker) metricExists(name string) bool {
	if p, ok := strings.CutSuffix(name, "*"); ok || strings.HasSuffix(name, "_") {
		if !ok {
			p = name
		}
		for fam := range c.f.Metrics {
			if strings.HasPrefix(fam, p) {
				return true
			}
		}
		return false
	}
	if _, ok := c.f.Metrics[name]; ok {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok && c.f.Metrics[base] == "histogram" {
			return true
		}
	}
	return false
}

// expand turns a documented family into names: {a,b} after an underscore
// are alternatives (each may carry {labels}), {…} after a name are labels.
func expand(s string) []string {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return []string{strings.TrimRight(s, `=",'-`)}
	}
	end := matching(s, i)
	if end < 0 {
		return []string{strings.TrimRight(s[:i], `=",'-`)}
	}
	if i == 0 || s[i-1] != '_' { // labels end the name
		return []string{s[:i]}
	}
	var out []string
	rest := expand(s[end+1:])
	for _, alt := range splitTop(s[i+1 : end]) {
		for _, a := range expand(alt) {
			for _, r := range rest {
				out = append(out, s[:i]+a+r)
			}
		}
	}
	return out
}

func matching(s string, open int) int {
	depth := 0
	for j := open; j < len(s); j++ {
		switch s[j] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for j := 0; j < len(s); j++ {
		switch s[j] {
		case '{':
			depth++
		case '}':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:j])
				start = j + 1
			}
		}
	}
	return append(out, s[start:])
}

func (c *checker) headers(file string, s span) {
	for _, m := range headerRE.FindAllStringSubmatch(s.text, -1) {
		h := strings.ToLower(m[1])
		c.documented[h] = true
		if !c.f.Headers[h] {
			c.add(file, s.line, "no code reads or writes a header %s", h)
		}
	}
}

// tests checks the Go tests a span names; a prefix of one counts, as a
// `go test -run` pattern does.
func (c *checker) tests(file string, s span) {
	if c.f.Tests == nil {
		return
	}
	for _, name := range testRE.FindAllString(s.text, -1) {
		if c.f.Tests[name] || name == "TestX" || name == "FuzzX" || name == "BenchmarkX" { // X: a placeholder
			continue
		}
		found := false
		for t := range c.f.Tests {
			if strings.HasPrefix(t, name) {
				found = true
				break
			}
		}
		if !found {
			c.add(file, s.line, "no test, fuzz target or benchmark is named %s", name)
		}
	}
}

var placeholderRE = regexp.MustCompile(`^(\{[^}]*\}|<[^>]*>|[A-Z][A-Z0-9_]*|:[a-z]+)$`)

func (c *checker) endpoints(file string, s span) {
	if c.f.Endpoint == nil {
		return
	}
	for _, m := range endpointRE.FindAllStringSubmatch(s.text, -1) {
		p := strings.TrimRight(m[1], ".,:;")
		segs := strings.Split(p, "/")
		for i, seg := range segs {
			if placeholderRE.MatchString(seg) {
				segs[i] = "x"
			}
		}
		if foreignEndpoints[p] == "" && !c.f.Endpoint(strings.Join(segs, "/")) {
			c.add(file, s.line, "no binary serves %s", p)
		}
	}
}

// undocumented reports each phaseless_ metric family, x-phaseless- header,
// command and flag no doc names: a family by its whole name (or {a,b}
// alternatives, not a wildcard); a command by its words ("fleet rollout
// create"); a binary's own flags anywhere; a subcommand's flag after that
// command, or in a doc that names the command.
func (c *checker) undocumented() {
	for _, f := range slices.Sorted(maps.Keys(c.f.Metrics)) {
		if strings.HasPrefix(f, "phaseless_") && !c.documented[f] {
			c.add("(code)", 0, "metric family %s is documented nowhere in README.md or docs/*.md (by its whole name)", f)
		}
	}
	for _, h := range slices.Sorted(maps.Keys(c.f.Headers)) {
		if strings.HasPrefix(h, "x-phaseless-") && !c.documented[h] {
			c.add("(code)", 0, "header %s is documented nowhere in README.md or docs/*.md", h)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.f.Binaries)) {
		b := c.f.Binaries[name]
		walk(b, func(cmd *Command) {
			if cmd != b && !c.named(cmd.Path) {
				c.add("(code)", 0, "%s is documented nowhere in README.md or docs/*.md", cmd.Path)
			}
			for _, n := range slices.Sorted(maps.Keys(cmd.Flags)) {
				if c.documented[cmd.Path+" --"+n] {
					continue
				}
				if cmd == b && c.documented["--"+n] {
					continue
				}
				if cmd != b && c.namedBeside(cmd.Path, n) {
					continue
				}
				c.add("(code)", 0, "%s --%s is documented nowhere in README.md or docs/*.md", cmd.Path, n)
			}
		})
	}
}

// named: some doc names the command's words after its binary.
func (c *checker) named(cmdPath string) bool {
	if c.documented[cmdPath] {
		return true
	}
	_, sub, _ := strings.Cut(cmdPath, " ")
	re := regexp.MustCompile(`(^|[^a-z0-9-])` + regexp.QuoteMeta(sub) + `([^a-z0-9-]|$)`)
	for _, text := range c.docText {
		if re.MatchString(text) {
			return true
		}
	}
	return false
}

// namedBeside: some doc names the command (without its binary) and the flag.
func (c *checker) namedBeside(cmdPath, flag string) bool {
	_, sub, _ := strings.Cut(cmdPath, " ")
	for _, text := range c.docText {
		if strings.Contains(text, sub) && regexp.MustCompile(`(^|[^a-z0-9-])--`+regexp.QuoteMeta(flag)+`([^a-z0-9-]|$)`).MatchString(text) {
			return true
		}
	}
	return false
}
