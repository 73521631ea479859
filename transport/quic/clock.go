package quic

import "github.com/phaseless/phaseless/internal/backoff"

// Backoff is the uplink's reconnect schedule (package backoff's Policy).
type Backoff = backoff.Policy

// Clock is the time source of reconnect backoff; tests pass a fake.
type Clock = backoff.Clock
