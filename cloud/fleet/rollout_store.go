package fleet

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Rollout storage (bbolt): one JSON value per rollout in the rollouts bucket.

func (s *store) putRollout(r *Rollout) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.db.Batch(func(tx *bolt.Tx) error { return tx.Bucket(bucketRollouts).Put([]byte(r.ID), v) })
}

func (s *store) rollout(id string) (*Rollout, error) {
	var r *Rollout
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketRollouts).Get([]byte(id))
		if v == nil {
			return nil
		}
		r = new(Rollout)
		if err := json.Unmarshal(v, r); err != nil {
			return fmt.Errorf("rollout %s: %w: %v", id, errCorrupt, err)
		}
		return nil
	})
	return r, err
}

func (s *store) rollouts() ([]*Rollout, error) {
	var out []*Rollout
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRollouts).ForEach(func(k, v []byte) error {
			r := new(Rollout)
			if err := json.Unmarshal(v, r); err != nil {
				return fmt.Errorf("rollout %s: %w: %v", k, errCorrupt, err)
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

// claimRollout: bbolt has one writer (the lease's holder), whose steps
// rolloutMu serialises, so the claim always succeeds. fn runs outside a
// transaction: it sends commands, which are write transactions of their
// own.
func (s *store) claimRollout(id string, fn func(*Rollout) error) (bool, error) {
	r, err := s.rollout(id)
	if err != nil || r == nil {
		return false, err
	}
	if err := fn(r); err != nil {
		return true, err
	}
	return true, s.putRollout(r)
}

func (s *store) updateRollout(id string, fn func(*Rollout) error) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRollouts)
		v := b.Get([]byte(id))
		if v == nil {
			return fmt.Errorf("%w %q", ErrUnknownRollout, id)
		}
		r := new(Rollout)
		if err := json.Unmarshal(v, r); err != nil {
			return fmt.Errorf("rollout %s: %w: %v", id, errCorrupt, err)
		}
		if err := fn(r); err != nil {
			return err
		}
		nv, err := json.Marshal(r)
		if err != nil {
			return err
		}
		return b.Put([]byte(id), nv)
	})
}

// Artifact descriptions: one JSON value per bundle in the artifacts bucket.

func (s *store) putArtifact(info *ArtifactInfo) error {
	v, err := json.Marshal(info)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketArtifacts).Put([]byte(info.ID), v) })
}

func (s *store) artifact(id string) (*ArtifactInfo, error) {
	var info *ArtifactInfo
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketArtifacts).Get([]byte(id))
		if v == nil {
			return nil
		}
		info = new(ArtifactInfo)
		return json.Unmarshal(v, info)
	})
	return info, err
}

// artifacts lists the stored descriptions; one that does not decode is
// left out (bundleOf only picks among good ones).
func (s *store) artifacts() ([]*ArtifactInfo, error) {
	var out []*ArtifactInfo
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketArtifacts).ForEach(func(_, v []byte) error {
			a := new(ArtifactInfo)
			if json.Unmarshal(v, a) == nil {
				out = append(out, a)
			}
			return nil
		})
	})
	return out, err
}

func (s *store) shadowGraded(key []byte) (bool, error) {
	var done bool
	err := s.db.View(func(tx *bolt.Tx) error {
		done = tx.Bucket(bucketShadowGraded).Get(key) != nil
		return nil
	})
	return done, err
}

func (s *store) layers() (map[string]*ConfigLayer, error) {
	var layers map[string]*ConfigLayer
	err := s.db.View(func(tx *bolt.Tx) (err error) { layers, err = layersTx(tx); return err })
	return layers, err
}

func (s *store) close() error { return s.db.Close() }
