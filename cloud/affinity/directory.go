// Package affinity records which worker holds a pinned prompt prefix, so
// a follow-up turn can be routed there by any coordinator replica: in
// memory for one replica, in Redis when replicas share one (--redis).
//
// An entry maps the chained hash of a pinned prefix's last block (the
// hash covers every token before it, models/lm/kvcache) to the worker's
// name, and expires when the pin does; a hit re-records it, as the engine
// refreshes the pin. Lookup takes a prompt's block hashes and returns the
// longest recorded prefix. For built-in workers the engines' own block
// tables are exact and this only adds what other replicas placed; for
// remote vLLM/SGLang workers it is the coordinator's approximate knowledge,
// as their caches may evict what the record still lists.
package affinity

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Directory is where pinned prefixes live.
type Directory interface {
	// Record notes that worker holds the prefix ending in block hash h
	// for ttl from now. A duration, not an instant: the caller's clock
	// (injected in tests, another host's for a replica) need not agree
	// with the directory's.
	Record(ctx context.Context, h uint64, worker string, ttl time.Duration) error
	// Lookup returns the worker holding the longest recorded prefix of
	// hashes (a prompt's chained block hashes) and its length in blocks;
	// blocks is 0 when none is recorded.
	Lookup(ctx context.Context, hashes []uint64) (worker string, blocks int, err error)
	Close() error
}

var (
	_ Directory = (*Memory)(nil)
	_ Directory = (*Redis)(nil)
)

// Memory is a Directory for one coordinator. It is safe for concurrent use.
type Memory struct {
	now     func() time.Time
	mu      sync.Mutex // guards entries, sweeps
	entries map[uint64]entry
	sweeps  int
}

type entry struct {
	worker string
	until  time.Time
}

// NewMemory makes an empty directory on the now clock (nil = time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, entries: map[uint64]entry{}}
}

// Record implements Directory.
func (m *Memory) Record(_ context.Context, h uint64, worker string, ttl time.Duration) error {
	if ttl <= 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	until := m.now().Add(ttl)
	if e, ok := m.entries[h]; !ok || until.After(e.until) || e.worker != worker {
		m.entries[h] = entry{worker, until}
	}
	// Drop expired entries now and then, so the map tracks live pins.
	if m.sweeps++; m.sweeps >= 1024 {
		m.sweeps = 0
		now := m.now()
		for k, e := range m.entries {
			if !e.until.After(now) {
				delete(m.entries, k)
			}
		}
	}
	return nil
}

// Lookup implements Directory.
func (m *Memory) Lookup(_ context.Context, hashes []uint64) (string, int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for i := len(hashes) - 1; i >= 0; i-- {
		if e, ok := m.entries[hashes[i]]; ok && e.until.After(now) {
			return e.worker, i + 1, nil
		}
	}
	return "", 0, nil
}

// Close implements Directory.
func (m *Memory) Close() error { return nil }

// Redis is a Directory shared by coordinator replicas: one key per pinned
// prefix, expiring with the pin (Redis's own expiry, so a crashed replica's
// records go too).
type Redis struct {
	client *redis.Client
	prefix string
}

// maxLookup bounds the hashes one Lookup sends: the last 512 blocks (8k
// tokens at 16 a block) of a longer prompt are enough to find its pins'
// ends, and one MGET stays small.
const maxLookup = 512

// NewRedis keeps the directory in Redis over client (the admission store's
// connection, admit.RedisStore.Client, which owns it). Keys are prefix +
// "pin:" + the hash (prefix default "phaseless:").
func NewRedis(client *redis.Client, prefix string) *Redis {
	if prefix == "" {
		prefix = "phaseless:"
	}
	return &Redis{client: client, prefix: prefix + "pin:"}
}

func (r *Redis) key(h uint64) string { return r.prefix + strconv.FormatUint(h, 16) }

// Record implements Directory.
func (r *Redis) Record(ctx context.Context, h uint64, worker string, ttl time.Duration) error {
	if ttl <= 0 {
		return nil
	}
	// A relative expiry (not PXAT) keeps working when replicas' clocks
	// disagree: Redis counts it on its own clock.
	if err := r.client.Set(ctx, r.key(h), worker, ttl).Err(); err != nil {
		return fmt.Errorf("redis pin record: %w", err)
	}
	return nil
}

// Lookup implements Directory.
func (r *Redis) Lookup(ctx context.Context, hashes []uint64) (string, int, error) {
	from := max(0, len(hashes)-maxLookup)
	if from == len(hashes) {
		return "", 0, nil
	}
	keys := make([]string, 0, len(hashes)-from)
	for _, h := range hashes[from:] {
		keys = append(keys, r.key(h))
	}
	vals, err := r.client.MGet(ctx, keys...).Result()
	if err != nil {
		return "", 0, fmt.Errorf("redis pin lookup: %w", err)
	}
	for i := len(vals) - 1; i >= 0; i-- {
		if s, ok := vals[i].(string); ok && s != "" {
			return s, from + i + 1, nil
		}
	}
	return "", 0, nil
}

// Close implements Directory. The client belongs to its owner, who closes it.
func (r *Redis) Close() error { return nil }
