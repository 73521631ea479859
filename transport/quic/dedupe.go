package quic

import (
	"context"
	"sync"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// generation is one run of a request that carries an idempotency key. Its
// tokens are logged so that every stream carrying the same (device, key) —
// the original, a 0-RTT replay, a retry after a lost link — follows the same
// run from the start instead of starting another.
type generation struct {
	mu      sync.Mutex // guards every field below
	tokens  []llm.Token
	bytes   int
	meta    *llm.Meta // the begin event, once the handler sent it
	done    bool
	final   llm.Final
	err     error
	changed chan struct{} // closed and replaced whenever the log grows or ends
	subs    int           // streams following this generation
	// abandoned: its last follower left before it ended, so it was
	// cancelled; it stays in the table until its handler returns, but a
	// retry must not join it (see dedupeTable.join).
	abandoned   bool
	cancel      context.CancelCauseFunc
	ended       time.Time
	key         string
	fingerprint [32]byte // set before the generation is shared
}

// errNoFollowers cancels a generation whose every stream went away.
var errNoFollowers = llmCancelled("every stream following the request went away")

func llmCancelled(msg string) error {
	return &llm.Error{Code: llm.CodeCancelled, Message: msg, Retryable: true}
}

// append logs a stream event; it fails when the log passes maxBytes, so a
// replay buffer cannot grow without bound. A begin event is kept apart from
// the tokens: every follower gets it first.
func (g *generation) append(t llm.Token, maxBytes int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.Meta != nil {
		if g.meta == nil {
			g.meta = t.Meta
			close(g.changed)
			g.changed = make(chan struct{})
		}
		return nil
	}
	g.bytes += len(t.Text) + 16
	if g.bytes > maxBytes {
		return llm.Errorf(llm.CodeInternal, "response over the %d byte replay limit of an idempotent request", maxBytes)
	}
	g.tokens = append(g.tokens, t)
	close(g.changed)
	g.changed = make(chan struct{})
	return nil
}

func (g *generation) finish(f llm.Final, err error, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.done, g.final, g.err, g.ended = true, f, err, now
	close(g.changed)
}

// leave drops a follower; the last one to leave a running generation
// cancels it, because nobody would read its tokens.
func (g *generation) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.subs--
	if g.subs == 0 && !g.done {
		g.abandoned = true
		g.cancel(errNoFollowers)
	}
}

// view is what a follower sees from index i on.
type view struct {
	tokens  []llm.Token
	meta    *llm.Meta
	done    bool
	final   llm.Final
	err     error
	changed <-chan struct{}
}

func (g *generation) since(i int) view {
	g.mu.Lock()
	defer g.mu.Unlock()
	// Tokens below len are never rewritten, so the slice is safe to read
	// after unlocking even while append reallocates.
	return view{g.tokens[i:len(g.tokens):len(g.tokens)], g.meta, g.done, g.final, g.err, g.changed}
}

// dedupeTable maps (device, idempotency key) to its generation for TTL
// after the generation ends.
type dedupeTable struct {
	ttl        time.Duration
	maxEntries int
	now        func() time.Time

	mu      sync.Mutex // guards entries, ended
	entries map[string]*generation
	ended   []*generation // ended generations, oldest first, for expiry
}

func newDedupeTable(ttl time.Duration, maxEntries int, now func() time.Time) *dedupeTable {
	return &dedupeTable{ttl: ttl, maxEntries: maxEntries, now: now, entries: map[string]*generation{}}
}

// join returns the generation for key, creating it when there is none; the
// caller becomes a follower either way and must call leave. created says the
// caller must start it.
//
// A generation that was abandoned, or that ended in an error finished
// forgets, is replaced rather than joined, although it may still be in
// the table: between its last follower leaving and its handler returning
// (finished removes it) a retry would otherwise follow a cancelled run
// and get its cancellation instead of an answer. That window is what made
// TestAbandonedGenerationIsForgotten fail (and, before it reported the
// early end, hang) under -race.
func (t *dedupeTable) join(key string, fp [32]byte, cancel context.CancelCauseFunc) (g *generation, created bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked()
	if g := t.entries[key]; g != nil {
		g.mu.Lock()
		live := !g.abandoned && !(g.done && forgotten(g.err))
		if live {
			g.subs++
		}
		g.mu.Unlock()
		if live {
			return g, false
		}
	}
	g = &generation{changed: make(chan struct{}), subs: 1, cancel: cancel, key: key, fingerprint: fp}
	t.entries[key] = g
	return g, true
}

// forgotten reports whether a generation that ended with err is dropped at
// once: cancelled or failed retryably, it delivered nothing a second run
// could duplicate.
func forgotten(err error) bool {
	return err != nil && (toLLMError(err).Retryable || llm.CodeOf(err) == llm.CodeCancelled)
}

// ended records that g finished. A generation that was cancelled or failed
// retryably is forgotten at once, so a retry runs it again: nothing was
// delivered that a second run could duplicate. Others are kept for ttl.
func (t *dedupeTable) finished(g *generation) {
	g.mu.Lock()
	err := g.err
	g.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if forgotten(err) {
		if t.entries[g.key] == g {
			delete(t.entries, g.key)
		}
		return
	}
	t.ended = append(t.ended, g)
	t.expireLocked()
}

func (t *dedupeTable) expireLocked() {
	now := t.now()
	n := 0
	for n < len(t.ended) {
		g := t.ended[n]
		if now.Sub(g.ended) < t.ttl && len(t.entries) <= t.maxEntries {
			break
		}
		if t.entries[g.key] == g {
			delete(t.entries, g.key)
		}
		n++
	}
	if n > 0 {
		t.ended = append(t.ended[:0], t.ended[n:]...)
	}
}

func (t *dedupeTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}
