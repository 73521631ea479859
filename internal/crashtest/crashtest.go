// Package crashtest kills a process with SIGKILL in the middle of its writes,
// over and over, so a storage test can prove that nothing the process had
// acknowledged is lost and the file is consistent after every kill.
//
// The child is the test binary itself, re-executed to run only the calling
// test with an environment variable set: Run, called from that test, sees
// the variable and becomes the child (it never returns there); in the
// parent it starts the child, lets it work for a random moment, kills it,
// and hands the verifier every line the child acknowledged before it died.
package crashtest

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// CyclesEnv overrides every crash test's number of kill cycles
// (PHASELESS_CRASH_CYCLES=100 runs the full count everywhere).
const CyclesEnv = "PHASELESS_CRASH_CYCLES"

const (
	childEnv = "PHASELESS_CRASH_CHILD" // test name of the child to run
	argEnv   = "PHASELESS_CRASH_ARG"   // the child's argument (a path)
	ready    = "crashtest: ready"
	ackTag   = "ack "
)

// Cycles is how many kill cycles a test runs: CyclesEnv when set, else def
// (def/10, at least 3, under -short).
func Cycles(t testing.TB, def int) int {
	if v := os.Getenv(CyclesEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive count", CyclesEnv, v)
		}
		return n
	}
	if testing.Short() {
		return max(3, def/10)
	}
	return def
}

// Acker is how a child acknowledges what it has made durable: one line per
// call, written whole, after the operation it names returned.
type Acker struct {
	mu sync.Mutex // guards stdout so lines never interleave
}

// Ack prints one acknowledged line (no newlines inside).
func (a *Acker) Ack(format string, args ...any) {
	line := ackTag + fmt.Sprintf(format, args...) + "\n"
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := os.Stdout.WriteString(line); err != nil {
		os.Exit(4)
	}
}

// Fail ends the child with an error the parent reports.
func Fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "crash child: "+format+"\n", args...)
	os.Exit(3)
}

// Config is one crash test.
type Config struct {
	Cycles int    // kill cycles (see Cycles)
	Arg    string // handed to the child, typically the store's path
	// The child is killed after a random delay in [MinRun, MaxRun) once it
	// is ready (defaults 2 ms and 62 ms).
	MinRun, MaxRun time.Duration
	// Setup, if set, runs once in the parent before the first cycle (the
	// test function's own code before Run runs in every child too).
	Setup func(t *testing.T)
	// Child runs in the re-executed process until it is killed; it must
	// acknowledge with ack only what is durable. Returning ends the child
	// normally (the round then checks a clean exit).
	Child func(arg string, ack *Acker)
	// Verify runs after each kill with the lines acknowledged in that
	// round (without the tag) and every earlier round's.
	Verify func(t *testing.T, round int, acked, all []string)
	// Progress, for a test that needs acknowledged work from every cycle:
	// a round killed before its child acknowledged anything (on a loaded
	// machine the child may still be opening its files) still tests
	// recovery but does not count as a cycle, and the next kill comes
	// twice as late (at most 8×, at most Cycles+8 rounds in all).
	Progress bool
}

// IsChild reports whether this process is t's re-executed child: a test
// that needs a resource only the parent may create (a server, a port)
// skips creating it there and reads it from Config.Arg instead.
func IsChild(t *testing.T) bool { return os.Getenv(childEnv) == t.Name() }

// Run is the whole crash test; call it from the test function itself.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if IsChild(t) {
		fmt.Println(ready)
		cfg.Child(os.Getenv(argEnv), &Acker{})
		os.Exit(0)
	}
	if cfg.MinRun == 0 {
		cfg.MinRun = 2 * time.Millisecond
	}
	if cfg.MaxRun <= cfg.MinRun {
		cfg.MaxRun = cfg.MinRun + 60*time.Millisecond
	}
	if cfg.Setup != nil {
		cfg.Setup(t)
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	var all []string
	scale := time.Duration(1)
	round, counted := 0, 0
	for ; counted < cfg.Cycles && round < cfg.Cycles+8; round++ {
		delay := scale * (cfg.MinRun + time.Duration(rng.Int64N(int64(cfg.MaxRun-cfg.MinRun))))
		acked := runOnce(t, cfg, round, delay)
		all = append(all, acked...)
		cfg.Verify(t, round, acked, all)
		if t.Failed() {
			t.Fatalf("round %d failed (kill after %v, seed %d)", round, delay, seed)
		}
		switch {
		case len(acked) > 0 || !cfg.Progress:
			counted++
		case scale < 8:
			scale *= 2
		}
	}
	t.Logf("%d kill cycles (%d counted), %d acknowledged lines", round, counted, len(all))
}

// runOnce starts one child, kills it after delay, and returns its
// acknowledged lines; a partial last line was never acknowledged.
func runOnce(t *testing.T, cfg Config, round int, delay time.Duration) []string {
	t.Helper()
	p := start(t, cfg.Arg, round)
	timer := time.AfterFunc(delay, func() { _ = p.cmd.Process.Signal(syscall.SIGKILL) })
	err := p.wait()
	if timer.Stop() { // the child ended on its own
		if err != nil {
			t.Fatalf("round %d: child: %v\n%s", round, err, p.output())
		}
	} else {
		p.checkKilled(err)
	}
	return p.take()
}

// Proc is a child started by Start, for a crash test that chooses the
// moment of the kill itself (right after a client got its last answer,
// say) instead of Run's random one.
type Proc struct {
	t      *testing.T
	round  int
	cmd    *exec.Cmd
	stderr strings.Builder
	done   chan struct{} // closed when the child's stdout has ended
	more   chan struct{} // (cap 1) a line arrived or stdout ended

	mu    sync.Mutex
	lines []string        // acknowledged and not yet taken
	other strings.Builder // the child's other output, shown if it fails
	eof   bool
}

// Start is Run for a test that kills the child itself. Called in the
// child (see IsChild) it runs child(arg, ack) and exits, never returning;
// in the parent it starts the child on arg and returns once it is ready.
// Each call starts a new child; round only labels messages.
func Start(t *testing.T, arg string, round int, child func(arg string, ack *Acker)) *Proc {
	t.Helper()
	if IsChild(t) {
		fmt.Println(ready)
		child(os.Getenv(argEnv), &Acker{})
		os.Exit(0)
	}
	return start(t, arg, round)
}

func start(t *testing.T, arg string, round int) *Proc {
	t.Helper()
	p := &Proc{t: t, round: round, done: make(chan struct{}), more: make(chan struct{}, 1)}
	p.cmd = exec.Command(os.Args[0], "-test.run=^"+regexpQuote(t.Name())+"$")
	// The child runs the test function's code before Run, t.TempDir
	// included, and a killed child never runs its cleanups: its TMPDIR is
	// a directory the parent removes, or every kill would leave one behind.
	p.cmd.Env = append(os.Environ(), childEnv+"="+t.Name(), argEnv+"="+arg, "TMPDIR="+t.TempDir())
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
			t.Fatalf("round %d: child did not start: %v\n%s", round, err, p.stderr.String())
		}
		if strings.TrimSuffix(line, "\n") == ready {
			break
		}
	}
	go func() {
		defer close(p.done)
		for {
			line, err := r.ReadString('\n')
			p.mu.Lock()
			if err != nil { // a partial last line was never acknowledged
				p.eof = true
			} else if s, ok := strings.CutPrefix(line, ackTag); ok {
				p.lines = append(p.lines, strings.TrimSuffix(s, "\n"))
			} else {
				p.other.WriteString(line)
			}
			p.mu.Unlock()
			select {
			case p.more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return p
}

// Ack waits for the child's next acknowledged line; it fails the test if
// the child ends first.
func (p *Proc) Ack() string {
	p.t.Helper()
	for {
		p.mu.Lock()
		if len(p.lines) > 0 {
			line := p.lines[0]
			p.lines = p.lines[1:]
			p.mu.Unlock()
			return line
		}
		eof := p.eof
		p.mu.Unlock()
		if eof {
			err := p.wait()
			p.t.Fatalf("round %d: child ended before acknowledging: %v\n%s", p.round, err, p.output())
		}
		<-p.more
	}
}

// Kill sends SIGKILL, waits for the child to die of it, and returns the
// lines it acknowledged that Ack has not returned.
func (p *Proc) Kill() []string {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	p.checkKilled(p.wait())
	return p.take()
}

func (p *Proc) wait() error {
	<-p.done // Wait closes the pipe: read it to its end first
	return p.cmd.Wait()
}

func (p *Proc) checkKilled(err error) {
	p.t.Helper()
	if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		p.t.Fatalf("round %d: child did not die of the kill: %v\n%s", p.round, err, p.output())
	}
}

func (p *Proc) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	got := p.lines
	p.lines = nil
	return got
}

func (p *Proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.other.String() + p.stderr.String()
}

func regexpQuote(name string) string {
	// Test names are identifiers plus '/' for subtests; -test.run splits
	// on '/' itself, so only the regexp metacharacters need quoting.
	var b strings.Builder
	for _, r := range name {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// CheckBolt opens the closed bbolt file at path read-only and runs bbolt's
// consistency check over it, failing t on the first problem.
func CheckBolt(t testing.TB, path string) {
	t.Helper()
	// The timeout only guards against a store left open by the test.
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("reopen %s for check: %v", path, err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	}); err != nil {
		t.Errorf("bbolt check %s: %v", path, err)
	}
}
