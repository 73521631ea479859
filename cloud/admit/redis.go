package admit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore shares budgets and fallback counters between coordinator
// replicas. Each operation is one Lua script, so the read-modify-write is
// atomic on the server without WATCH retries.
type RedisStore struct {
	client  *redis.Client
	circuit *circuit
	prefix  string
	once    sync.Once
	err     error
}

// takeScript is the token bucket. State: hash {t: tokens, ts: ms}. A missing
// key is a full bucket; the key expires once it would have refilled, so idle
// keys cost nothing.
var takeScript = redis.NewScript(`
local burst = tonumber(ARGV[2])
local rate = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local n = tonumber(ARGV[1])
local s = redis.call('HMGET', KEYS[1], 't', 'ts')
local tokens = tonumber(s[1])
local ts = tonumber(s[2])
if tokens == nil or ts == nil then tokens = burst; ts = now end
if now > ts then
  tokens = math.min(burst, tokens + (now - ts) * rate)
  ts = now
end
local ok = 0
if n <= tokens then
  tokens = math.min(burst, tokens - n)
  ok = 1
end
redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ts', tostring(ts))
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {ok, math.floor(tokens)}
`)

// countScript is the windowed counter. State: hash {c: count, s: window start ms}.
var countScript = redis.NewScript(`
local limit = tonumber(ARGV[1])
local win = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local s = redis.call('HMGET', KEYS[1], 'c', 's')
local c = tonumber(s[1]) or 0
local start = tonumber(s[2]) or now
if c == 0 or now >= start + win then
  c = 0
  start = now
end
if c >= limit then return {0, c} end
c = c + 1
redis.call('HSET', KEYS[1], 'c', c, 's', tostring(start))
local ttl = start + win - now
if ttl < 1 then ttl = 1 end
redis.call('PEXPIRE', KEYS[1], ttl)
return {1, c}
`)

// NewRedisStore connects to url (redis://host:port/db) and checks it with a
// PING. Keys are prefixed with prefix (default "phaseless:"). ro bounds
// each command and sets the circuit (RedisOptions).
func NewRedisStore(ctx context.Context, url, prefix string, ro RedisOptions) (*RedisStore, error) {
	if err := ro.Validate(); err != nil {
		return nil, err
	}
	ro.fill()
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	if prefix == "" {
		prefix = "phaseless:"
	}
	// A failed budget check fails open, so a retry only adds latency:
	// go-redis' defaults (3 command retries with backoff, each dial tried
	// 5 times 100 ms apart) are what made each request wait 1.8 s on a
	// dead Redis. Every socket wait is bounded by the command's deadline
	// (the circuit sets OpTimeout).
	opt.MaxRetries = -1
	opt.DialerRetries = 1 // one attempt; 0 means go-redis' default of 5
	opt.ContextTimeoutEnabled = true
	opt.DialTimeout = ro.OpTimeout
	opt.ReadTimeout = ro.OpTimeout
	opt.WriteTimeout = ro.OpTimeout
	opt.PoolTimeout = ro.OpTimeout
	c := redis.NewClient(opt)
	cb := newCircuit(ro)
	c.AddHook(cb)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis %s: %w", opt.Addr, err)
	}
	return &RedisStore{client: c, circuit: cb, prefix: prefix}, nil
}

// Ready reports whether Redis answers: nil when it does, else an error
// wrapping ErrStoreUnavailable. While the circuit is open it answers at
// once; otherwise it sends a PING (under OpTimeout, counted by the
// circuit), so a Redis that died while no request ran is noticed too.
func (r *RedisStore) Ready(ctx context.Context) error {
	if err := r.circuit.state(); err != nil {
		return err
	}
	if err := r.client.Ping(ctx).Err(); err != nil {
		if errors.Is(err, ErrStoreUnavailable) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrStoreUnavailable, err)
	}
	return nil
}

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// Take implements Store.
func (r *RedisStore) Take(ctx context.Context, key string, n int64, b Bucket, now time.Time) (bool, int64, error) {
	ttl := b.refillTime().Milliseconds() + 1000
	res, err := takeScript.Run(ctx, r.client, []string{r.prefix + "budget:" + key},
		n, b.Burst, strconv.FormatFloat(b.PerSecond/1000, 'g', -1, 64), ms(now), ttl).Int64Slice()
	if err != nil {
		return false, 0, fmt.Errorf("redis budget %s: %w", key, err)
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("redis budget %s: script returned %d values", key, len(res))
	}
	return res[0] == 1, res[1], nil
}

// Count implements Store.
func (r *RedisStore) Count(ctx context.Context, key string, limit int64, window time.Duration, now time.Time) (bool, int64, error) {
	res, err := countScript.Run(ctx, r.client, []string{r.prefix + "count:" + key},
		limit, window.Milliseconds(), ms(now)).Int64Slice()
	if err != nil {
		return false, 0, fmt.Errorf("redis counter %s: %w", key, err)
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("redis counter %s: script returned %d values", key, len(res))
	}
	return res[0] == 1, res[1], nil
}

// Close implements Store; it is idempotent.
// Client is the store's connection, for other state the replicas share
// over the same Redis (cloud/affinity's pinned-prefix directory). The store
// owns it: Close closes it.
func (r *RedisStore) Client() *redis.Client { return r.client }

func (r *RedisStore) Close() error {
	r.once.Do(func() { r.err = r.client.Close() })
	return r.err
}
