package quic

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// generation is one run of a request that carries an idempotency key. Its
// tokens are buffered so that every stream carrying the same (device, key)
// — the original, a 0-RTT replay, a retry or a resume after a lost link —
// follows the same run instead of starting another (see resume.go for how
// long it outlives its streams and what bounds the buffer).
type generation struct {
	mu sync.Mutex // guards every field below
	// tokens[i] is the stream's token base+i. Tokens every attached
	// follower has written are dropped from the front when the buffer is
	// full, so base only grows.
	tokens  []llm.Token
	base    int
	bytes   int
	buf     *bufferGauge // the server's total, kept in step with bytes
	meta    *llm.Meta    // the begin event, once the handler sent it
	done    bool
	final   llm.Final
	err     error
	changed chan struct{} // closed and replaced whenever the log grows, shrinks or ends
	subs    int           // streams following this generation
	cursors map[*cursor]struct{}
	// abandoned: cancelled for good (its last follower left and the
	// resume window, if any, passed, or the device cancelled it); it stays
	// in the table until its handler returns, but a retry must not join it
	// (see dedupeTable.join).
	abandoned bool
	// detached runs the resume window while no stream follows a
	// generation whose streams lost their link (resume.go).
	detached  *time.Timer
	delivered bool // a follower wrote the last frame and the device acknowledged it
	// ephemeral: the key is one the client made for resuming
	// (ResumeKeyPrefix), not the app's, so once the answer is delivered
	// (or its window passed) nobody may replay it and its tokens go.
	ephemeral   bool
	cancel      context.CancelCauseFunc
	ended       time.Time
	key         string
	fingerprint [32]byte // set before the generation is shared
}

// cursor is one follower's position: the next token it writes.
type cursor struct{ next int }

// errNoFollowers cancels a generation whose every stream went away.
var errNoFollowers = llmCancelled("every stream following the request went away")

func llmCancelled(msg string) error {
	return &llm.Error{Code: llm.CodeCancelled, Message: msg, Retryable: true}
}

// tokenBytes is what a token counts against the buffer: its text and tool
// delta plus a fixed overhead for the struct.
func tokenBytes(t *llm.Token) int {
	n := len(t.Text) + 16
	if t.Tool != nil {
		n += len(t.Tool.ID) + len(t.Tool.Name) + len(t.Tool.Arguments)
	}
	return n
}

// append logs a stream event. When the buffer would pass maxBytes it drops
// the tokens every follower has written; when that is not enough (no
// follower is attached, or one lags a whole buffer behind) it waits for
// room, so a generation nobody reads pauses instead of growing: the window
// then ends it. A begin event is kept apart from the tokens: every
// follower gets it first.
func (g *generation) append(ctx context.Context, t llm.Token, maxBytes int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.Meta != nil {
		if g.meta == nil {
			g.meta = t.Meta
			g.notifyLocked()
		}
		return nil
	}
	n := tokenBytes(&t)
	for g.bytes+n > maxBytes && len(g.tokens) > 0 {
		if g.trimLocked() {
			continue
		}
		wait := g.changed
		g.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			g.mu.Lock()
			return context.Cause(ctx)
		}
		g.mu.Lock()
	}
	g.tokens = append(g.tokens, t)
	g.bytes += n
	g.buf.add(n)
	g.notifyLocked()
	return nil
}

// trimLocked drops the front tokens every attached follower has written;
// false when there is none to drop.
func (g *generation) trimLocked() bool {
	if len(g.cursors) == 0 {
		return false // detached: a resume may still want every token
	}
	low := g.base + len(g.tokens)
	for c := range g.cursors {
		low = min(low, c.next)
	}
	k := low - g.base
	if k <= 0 {
		return false
	}
	freed := 0
	for i := range k {
		freed += tokenBytes(&g.tokens[i])
	}
	g.tokens = g.tokens[k:]
	g.base, g.bytes = low, g.bytes-freed
	g.buf.add(-freed)
	return true
}

func (g *generation) notifyLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// freeLocked drops every buffered token: the answer was delivered, the
// window passed, or the run was cancelled.
func (g *generation) freeLocked() {
	g.base += len(g.tokens)
	g.tokens = nil
	g.buf.add(-g.bytes)
	g.bytes = 0
}

func (g *generation) finish(f llm.Final, err error, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.done, g.final, g.err, g.ended = true, f, err, now
	if forgotten(err) && (g.subs == 0 || g.abandoned) {
		// Nothing will replay a cancelled or failed run; one the device
		// cancelled or nobody resumed has no reader left that wants it,
		// though a stream on a dead link may not have left yet.
		g.freeLocked()
	}
	g.notifyLocked()
}

// attach registers a follower that writes from token from on.
func (g *generation) attach(from int) *cursor {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := &cursor{next: from}
	if g.cursors == nil {
		g.cursors = map[*cursor]struct{}{}
	}
	g.cursors[c] = struct{}{}
	return c
}

// leaveReason is why a follower stopped following.
type leaveReason int

const (
	// leftDone: the stream ended normally (the last frame was written, or
	// the server is closing).
	leftDone leaveReason = iota
	// leftCancelled: the device cancelled the request (a cancel frame, a
	// reset, an early end): the run stops whoever else follows.
	leftCancelled
	// leftClosed: the device closed the stream's connection on purpose (the
	// agent shutting down or closing its uplink). Nothing will resume the
	// stream, so a run it was the last follower of stops at once; a retry
	// following on another connection still gets it.
	leftClosed
	// leftLinkLost: the stream's connection died without the device
	// saying anything; the run goes on for window so it can resume.
	leftLinkLost
)

// errDeviceCancelled ends a generation the device cancelled.
var errDeviceCancelled = llmCancelled("the device cancelled the request")

// leave drops a follower (c may be nil: one that never attached). The last
// one to leave a running generation cancels it, because nobody would read
// its tokens — unless it left because its link died and window > 0: then
// the run goes on, buffered, until a resume joins or window passes. A
// device's cancel stops it at once, whoever else follows.
func (g *generation) leave(c *cursor, why leaveReason, window time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.subs--
	if c != nil {
		delete(g.cursors, c)
		g.notifyLocked() // a waiting append may trim without it now
	}
	switch {
	case why == leftCancelled && !g.done, why == leftClosed && !g.done && g.subs == 0:
		g.abandoned = true
		g.cancel(errDeviceCancelled)
	case g.subs > 0:
	case g.done && forgotten(g.err):
		g.freeLocked() // nothing will replay a cancelled or failed run
	case g.done:
		// An app's key keeps its answer for the dedupe TTL; a resume key's
		// answer waits for a resume only as long as a running one would.
		if g.ephemeral && !g.delivered {
			if window > 0 {
				g.detached = time.AfterFunc(window, g.expire)
			} else {
				g.freeLocked()
			}
		}
	case why == leftLinkLost && window > 0:
		g.detached = time.AfterFunc(window, g.expire)
	default:
		g.abandoned = true
		g.cancel(errNoFollowers)
	}
}

// errWindowPassed ends a generation no stream resumed within the window.
var errWindowPassed = llmCancelled("no stream resumed the request within the resume window")

// expire ends the resume window of a generation nobody rejoined: a run
// still going is cancelled, a finished one's tokens are freed.
func (g *generation) expire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.subs > 0 || g.detached == nil {
		return // a resume joined as the timer fired
	}
	g.detached = nil
	if !g.done {
		g.abandoned = true
		g.cancel(errWindowPassed)
		return
	}
	if g.ephemeral {
		g.freeLocked()
	}
}

// acknowledged records that the device has the whole answer: nothing will
// resume it, so a resume key's tokens are freed; the entry stays for
// dedupe.
func (g *generation) acknowledged() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.delivered = true
	if g.ephemeral {
		g.freeLocked()
	}
}

// view is what a follower sees from index i on.
type view struct {
	tokens  []llm.Token
	meta    *llm.Meta
	done    bool
	final   llm.Final
	err     error
	gone    bool // tokens from i on were dropped or freed
	changed <-chan struct{}
}

// since returns the tokens from c.next on and moves c past them.
func (g *generation) since(c *cursor) view {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := c.next
	if i < g.base || i > g.base+len(g.tokens) {
		if g.done && forgotten(g.err) {
			return view{done: true, err: g.err, changed: g.changed} // freed because it failed
		}
		return view{gone: true}
	}
	// Tokens below len are never rewritten (trimming reslices, append
	// writes past len), so the slice is safe to read after unlocking.
	toks := g.tokens[i-g.base : len(g.tokens) : len(g.tokens)]
	c.next += len(toks)
	if len(toks) > 0 {
		g.notifyLocked() // the cursor moved: an append waiting for room may trim
	}
	return view{toks, g.meta, g.done, g.final, g.err, false, g.changed}
}

// dedupeTable maps (device, idempotency key) to its generation for TTL
// after the generation ends.
type dedupeTable struct {
	ttl        time.Duration
	maxEntries int
	now        func() time.Time

	buffered bufferGauge // bytes of tokens buffered by every generation

	mu      sync.Mutex // guards entries, ended
	entries map[string]*generation
	ended   []*generation // ended generations, oldest first, for expiry
}

func newDedupeTable(ttl time.Duration, maxEntries int, now func() time.Time) *dedupeTable {
	return &dedupeTable{ttl: ttl, maxEntries: maxEntries, now: now, entries: map[string]*generation{}}
}

// bufferGauge is the bytes of tokens the server holds for keyed requests.
type bufferGauge struct{ n atomic.Int64 }

func (b *bufferGauge) add(n int) {
	if b != nil {
		b.n.Add(int64(n))
	}
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
	if g := t.rejoinLocked(key); g != nil {
		return g, false
	}
	g = &generation{changed: make(chan struct{}), subs: 1, cancel: cancel, key: key, fingerprint: fp, buf: &t.buffered,
		ephemeral: isResumeKey(key)}
	t.entries[key] = g
	return g, true
}

// rejoin returns the live generation for key with the caller as a follower
// (who must call leave), or nil when there is none to follow: it never
// ran, ended forgotten, was cancelled or its resume window passed.
func (t *dedupeTable) rejoin(key string) *generation {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked()
	return t.rejoinLocked(key)
}

func (t *dedupeTable) rejoinLocked(key string) *generation {
	g := t.entries[key]
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.abandoned || g.done && forgotten(g.err) {
		return nil
	}
	g.subs++
	if g.detached != nil {
		g.detached.Stop() // resumed inside the window
		g.detached = nil
	}
	return g
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
		g.mu.Lock()
		g.freeLocked()
		g.mu.Unlock()
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
