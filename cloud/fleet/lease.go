package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Several cloud replicas share one fleet through a single writer: the
// fleet's state (registry, telemetry, desired config, rollouts) is one
// bbolt file that one process opens, and the Manager's MQTT session to an
// external broker has one client id, which a second connection would take
// over. Coordinator replicas scale the request path and run no fleet
// manager (--mqtt=, sharing admission in Redis); exactly one fleet manager
// drives rollouts.
//
// A Lease makes that rule hold when two processes are started anyway (a
// rolling update that overlaps, a second replica configured like the
// first): a Manager with a Lease takes it before it subscribes, and a second
// Manager on the same lease refuses to start, naming the holder. The holder
// renews it while it runs; before every rollout step and every command it
// sends, it checks the lease is still its own (fencing), so a holder cut
// off from Redis long enough for its lease to expire stops steering
// devices instead of racing its successor. A holder that dies leaves a
// lease that expires after its TTL; a restarted Manager on the same data
// then takes it and resumes the rollouts from bbolt.

// Lease is the fleet manager's single-writer lease.
type Lease interface {
	// Acquire takes the lease or says who holds it (ErrLeaseHeld).
	Acquire(ctx context.Context) error
	// Held reports whether the lease is still this holder's, checking it
	// at the source.
	Held(ctx context.Context) error
	// Release gives it up if it is still this holder's.
	Release(ctx context.Context) error
}

// ErrLeaseHeld is returned when another process holds the fleet lease.
var ErrLeaseHeld = errors.New("another fleet manager holds the fleet lease")

// ErrLeaseLost is returned by Held when the lease is certainly no longer
// this holder's (it expired, or another took it), as opposed to a Redis
// that cannot be asked right now.
var ErrLeaseLost = errors.New("fleet lease lost")

// RedisLease is a Lease in Redis: the key holds a random token and the
// holder's name, set with NX and a TTL, renewed by a background loop.
type RedisLease struct {
	client *redis.Client
	key    string
	name   string
	ttl    time.Duration
	token  string

	now     func() time.Time
	mu      sync.Mutex // guards lost, stop, since
	lost    error      // why the lease stopped being ours; nil while held
	since   time.Time  // when the last successful take or renewal was sent
	stop    chan struct{}
	renewed sync.WaitGroup
}

// DefaultLeaseTTL is how long a lease outlives its holder's last renewal.
const DefaultLeaseTTL = 15 * time.Second

// NewRedisLease connects to url (redis://host:port/db). name says who holds
// it (host and public URL) in refusals; ttl 0 means DefaultLeaseTTL.
func NewRedisLease(url, key, name string, ttl time.Duration) (*RedisLease, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("fleet lease: redis url: %w", err)
	}
	if key == "" {
		key = "phaseless:fleet:lease"
	}
	if ttl == 0 {
		ttl = DefaultLeaseTTL
	}
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	return &RedisLease{client: redis.NewClient(opt), key: key, name: name, ttl: ttl, token: hex.EncodeToString(rnd[:]), now: time.Now}, nil
}

func (l *RedisLease) value() string { return l.token + " " + l.name }

// renewScript extends the lease only while it holds this holder's value;
// releaseScript deletes it on the same condition.
var (
	renewScript   = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end`)
	releaseScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`)
)

// Acquire implements Lease and starts renewing.
func (l *RedisLease) Acquire(ctx context.Context) error {
	sent := l.now()
	ok, err := l.client.SetNX(ctx, l.key, l.value(), l.ttl).Result()
	if err != nil {
		return fmt.Errorf("fleet lease: %w", err)
	}
	if !ok {
		holder, _ := l.client.Get(ctx, l.key).Result()
		ttl, _ := l.client.PTTL(ctx, l.key).Result()
		if _, name, found := cutToken(holder); found {
			holder = name
		}
		return fmt.Errorf("%w: %q (expires in %v unless renewed)", ErrLeaseHeld, holder, ttl.Round(time.Millisecond))
	}
	l.mu.Lock()
	l.lost, l.stop, l.since = nil, make(chan struct{}), sent
	stop := l.stop
	l.mu.Unlock()
	l.renewed.Go(func() { l.renew(stop) })
	return nil
}

func cutToken(v string) (token, name string, ok bool) {
	for i := range len(v) {
		if v[i] == ' ' {
			return v[:i], v[i+1:], true
		}
	}
	return v, "", false
}

func (l *RedisLease) renew(stop chan struct{}) {
	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		sent := l.now()
		n, err := l.renewOnce()
		// An unreachable Redis is not yet a lost lease (it may hold until
		// its TTL); Held checks at the source before anything is sent. A
		// renewal refused because another holder has the key is final.
		l.mu.Lock()
		switch {
		case err == nil && n == 0 && l.lost == nil:
			l.lost = errors.New("the lease expired and was taken over")
		case err == nil && n == 1:
			l.since = sent
		}
		l.mu.Unlock()
	}
}

// renewOnce extends the lease to a full TTL if it is still ours: 1 when
// it was, 0 when another holder has it.
func (l *RedisLease) renewOnce() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), l.ttl/3)
	defer cancel()
	return renewScript.Run(ctx, l.client, []string{l.key}, l.value(), l.ttl.Milliseconds()).Int()
}

// Held implements Lease: the key must still hold this holder's value.
func (l *RedisLease) Held(ctx context.Context) error {
	l.mu.Lock()
	lost := l.lost
	l.mu.Unlock()
	if lost != nil {
		return fmt.Errorf("%w: %w", ErrLeaseLost, lost)
	}
	ctx, cancel := context.WithTimeout(ctx, l.ttl/3)
	defer cancel()
	v, err := l.client.Get(ctx, l.key).Result()
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("%w: it expired", ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("fleet lease unknown: %w", err)
	}
	if v != l.value() {
		_, name, _ := cutToken(v)
		return fmt.Errorf("%w to %q", ErrLeaseLost, name)
	}
	return nil
}

// HeldRecently says without asking Redis whether the lease is certainly
// still this holder's: nil when it was taken or renewed less than two
// thirds of its TTL ago (the time the request was sent, so Redis's expiry
// is later still), ErrLeaseLost when a renewal found it taken, and
// errAskRedis otherwise. The message handlers use it, so that a wave of
// devices reconnecting costs no Redis round trip each; commands, rollout
// steps and API writes still check at the source (Held).
func (l *RedisLease) HeldRecently() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.lost != nil:
		return fmt.Errorf("%w: %w", ErrLeaseLost, l.lost)
	case l.stop != nil && l.now().Sub(l.since) < l.ttl*2/3:
		return nil
	}
	return errAskRedis
}

// errAskRedis: HeldRecently cannot tell; Held asks.
var errAskRedis = errors.New("fleet lease: not renewed recently")

// Release implements Lease: it stops renewing and deletes the key if it
// is still this holder's. The lease may be acquired again (a standby that
// stepped down waits for it anew).
func (l *RedisLease) Release(ctx context.Context) error {
	l.stopRenewing()
	_, err := releaseScript.Run(ctx, l.client, []string{l.key}, l.value()).Result()
	return err
}

func (l *RedisLease) stopRenewing() {
	l.mu.Lock()
	if l.stop != nil {
		close(l.stop)
		l.stop = nil
	}
	l.mu.Unlock()
	l.renewed.Wait()
}

// BindStore records id as the fleet store's identity beside the lease if
// none is recorded yet, and returns the recorded one: a standby compares
// it with the store it opened (standby.go).
func (l *RedisLease) BindStore(ctx context.Context, id string) (string, error) {
	key := l.key + ":store"
	if err := l.client.SetNX(ctx, key, id, 0).Err(); err != nil {
		return "", fmt.Errorf("fleet store identity: %w", err)
	}
	v, err := l.client.Get(ctx, key).Result()
	if err != nil {
		return "", fmt.Errorf("fleet store identity: %w", err)
	}
	return v, nil
}

// Close releases the lease and closes the Redis client.
func (l *RedisLease) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), l.ttl/3)
	defer cancel()
	return errors.Join(l.Release(ctx), l.client.Close())
}
