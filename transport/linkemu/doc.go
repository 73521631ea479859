// Package linkemu emulates the links a vehicle has — cellular delay and
// jitter, random and bursty loss, reordering, a slow bottleneck with a
// bounded queue, tunnel blackouts and NAT rebinding — as relays on loopback,
// so tests, benchmarks and phaselessctl can run the real QUIC and TCP stacks
// over them without root (no tc/netem, no network namespaces).
//
// # Basics
//
// A UDPRelay (for QUIC) or TCPRelay (for the TCP baselines: SSE over HTTP/2,
// MQTT) listens on 127.0.0.1 and forwards to a target; the client dials the
// relay's address instead of the target's. Each direction has its own
// Direction (delay, jitter, loss, Gilbert–Elliott bursts, reordering, rate
// and queue); blackouts belong to the link and cut both directions. A Profile
// bundles them under a name: loopback, lte-good, lte-poor, tunnel
// (Profiles, ParseProfile).
//
// Every random decision (loss, burst state, jitter, reordering) comes from a
// generator seeded by Config.Seed and is drawn in a fixed number per packet,
// so the n-th packet of a direction meets the same fate on every run with
// the same seed. What depends on the machine is only when packets arrive:
// the rate limiter's queue and the blackout schedule act on wall-clock time.
//
// # Caveats
//
// The TCP relay shapes a byte stream, not packets: the kernel's TCP on each
// side never sees a loss, so a lost segment is modelled as the delay
// Linux's TCP would take to repair it (RACK-TLP: RTT + RTT/4 when the
// connection keeps sending, 2 RTT + 200 ms for a lone segment, then the
// retransmission timer doubling), and all later bytes of that connection
// wait behind it, as they would in TCP. Congestion-window cuts are left out
// (they would slow TCP further). A full queue back-pressures the sender
// instead of dropping. During a blackout the bytes wait and are delivered
// one Delay after it ends (a real TCP would wait for its next,
// backed-off retransmission timer, which flatters TCP).
//
// The relays measure nothing themselves beyond counters (Stats): timing
// figures come from the endpoints.
package linkemu
