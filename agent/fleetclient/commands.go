package fleetclient

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/eclipse/paho.golang/autopaho"
	bolt "go.etcd.io/bbolt"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// keepResults bounds how many command results the device remembers for
// deduplication. The cloud reissues a command only while it waits for the
// result, so the last thousand ids are plenty.
const keepResults = 1024

var (
	bucketResults = []byte("commands")       // id -> CommandResult JSON
	bucketOrder   = []byte("commands.order") // 8-byte counter -> id, oldest first
)

// resultStore persists the result of every executed command, so a command
// id delivered again (QoS 1 redelivery, a cloud retry, or after a device
// restart) is answered from the saved result and never runs twice.
type resultStore struct{ db *bolt.DB }

func newResultStore(db *bolt.DB) (*resultStore, error) {
	err := db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketResults); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bucketOrder)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fleet: command results: %w", err)
	}
	return &resultStore{db: db}, nil
}

func (s *resultStore) get(id string) (fleetwire.CommandResult, bool, error) {
	var res fleetwire.CommandResult
	var found bool
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketResults).Get([]byte(id))
		if v == nil {
			return nil
		}
		found = true
		return json.Unmarshal(v, &res)
	})
	if err != nil {
		// A damaged saved result must not wedge the command: treat as
		// unknown, which may run it again (reported in the log).
		return fleetwire.CommandResult{}, false, err
	}
	return res, found, nil
}

func (s *resultStore) put(res fleetwire.CommandResult) error {
	v, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		rb, ob := tx.Bucket(bucketResults), tx.Bucket(bucketOrder)
		if err := rb.Put([]byte(res.ID), v); err != nil {
			return err
		}
		n, err := ob.NextSequence()
		if err != nil {
			return err
		}
		var key [8]byte
		binary.BigEndian.PutUint64(key[:], n)
		if err := ob.Put(key[:], []byte(res.ID)); err != nil {
			return err
		}
		// Order keys are consecutive sequence numbers, so everything at or
		// below n-keepResults goes. (Bucket.Stats cannot count here: it
		// reads the committed pages, not this transaction's changes, and
		// once trusted it deleted every saved result at the 1026th.)
		c := ob.Cursor()
		for k, id := c.First(); k != nil && n > keepResults && binary.BigEndian.Uint64(k) <= n-keepResults; k, id = c.First() {
			if err := rb.Delete(id); err != nil {
				return err
			}
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

// commandLoop runs commands one at a time in arrival order (an update and
// a rollback must not race) and publishes each result through the durable
// queue.
func (c *Client) commandLoop(ctx context.Context, cm *autopaho.ConnectionManager, results *resultStore) {
	for {
		var cmd fleetwire.Command
		select {
		case <-ctx.Done():
			return
		case cmd = <-c.cmds:
		}
		res, done, err := results.get(cmd.ID)
		if err != nil {
			c.log.Warn("saved command result unreadable", "id", cmd.ID, "err", err)
		}
		if done {
			c.stats.commandsDeduped.Add(1)
			c.log.Info("repeated command answered from saved result", "id", cmd.ID, "name", cmd.Name)
		} else {
			// A command cut short by shutdown is saved with its error like
			// any other result: the cloud sees it and reissues under a new
			// id if it still wants it done.
			res = c.runCommand(ctx, cmd)
			c.stats.commandsRun.Add(1)
			if err := results.put(res); err != nil {
				c.log.Error("save command result", "id", cmd.ID, "err", err)
			}
		}
		if err := c.enqueue(ctx, cm, c.tResult, false, res); err != nil {
			c.log.Error("queue command result", "id", cmd.ID, "err", err)
		}
	}
}

func (c *Client) runCommand(ctx context.Context, cmd fleetwire.Command) (res fleetwire.CommandResult) {
	res.ID = cmd.ID
	c.mu.Lock()
	fn := c.handlers[cmd.Name]
	c.mu.Unlock()
	if fn == nil {
		res.Error = fmt.Sprintf("unknown command %q", cmd.Name)
		return res
	}
	defer func() {
		if r := recover(); r != nil {
			res.OK, res.Output, res.Error = false, "", fmt.Sprintf("command %q panicked: %v", cmd.Name, r)
		}
	}()
	out, err := fn(ctx, cmd)
	res.Output = out
	if err != nil {
		res.Error = err.Error()
	} else {
		res.OK = true
	}
	// The broker refuses a result over fleetwire.MaxCmdResultBytes.
	return fleetwire.TruncateResult(res)
}
