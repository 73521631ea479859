package linkemu

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// The relays run on the wall clock, so these tests assert what cannot
// depend on the machine's speed: counts against the relay's own counters
// and against a shaper with the same seed, order, and lower bounds on time.

// udpSink is a UDP target that records what it receives and from where.
type udpSink struct {
	conn *net.UDPConn
	mu   sync.Mutex // guards got, from
	got  []uint32
	from map[netip.AddrPort]int
	wg   sync.WaitGroup
}

func newUDPSink(t *testing.T, echo bool) *udpSink {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &udpSink{conn: c, from: map[netip.AddrPort]int{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.got = append(s.got, binary.BigEndian.Uint32(buf))
			s.from[from]++
			s.mu.Unlock()
			if echo {
				c.WriteToUDPAddrPort(buf[:n], from)
			}
		}
	}()
	t.Cleanup(func() { c.Close(); s.wg.Wait() })
	return s
}

func (s *udpSink) received() ([]uint32, map[netip.AddrPort]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	from := map[netip.AddrPort]int{}
	for k, v := range s.from {
		from[k] = v
	}
	return append([]uint32(nil), s.got...), from
}

// waitFor polls cond (not a timing assertion: it only bounds how long a
// broken relay can hang the test).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func startUDP(t *testing.T, target string, p Profile, seed uint64) (*UDPRelay, *net.UDPConn) {
	t.Helper()
	r, err := ListenUDP(Config{Target: target, Profile: p, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	c, err := net.DialUDP("udp", nil, r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return r, c
}

func sendSeq(t *testing.T, c *net.UDPConn, from, to int) {
	t.Helper()
	buf := make([]byte, 200)
	for i := from; i < to; i++ {
		binary.BigEndian.PutUint32(buf, uint32(i))
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
}

func TestUDPRelayLossMatchesSeed(t *testing.T) {
	sink := newUDPSink(t, false)
	p := Profile{Name: "lossy", Up: Direction{Loss: 0.2, Burst: GilbertElliott{P: 0.05, R: 0.3, LossBad: 0.5}}}
	r, c := startUDP(t, sink.conn.LocalAddr().String(), p, 11)
	const n = 500
	// In batches, so no socket buffer overflows on a busy machine (a drop
	// there would be the kernel's, not the emulator's).
	for i := 0; i < n; i += 25 {
		sendSeq(t, c, i, i+25)
		waitFor(t, "the batch's fates", func() bool {
			s := r.Stats().Up
			return s.Packets == int64(i+25) && s.Delivered+s.Lost+s.BurstLost == int64(i+25)
		})
	}
	// The same seed decides the same fates: the relay dropped exactly the
	// datagrams a shaper of its own would.
	ref := newShaper(p.Up, 0, 11, 1)
	var want []uint32
	for i := range n {
		if ref.packet(t0, 200).fate == delivered {
			want = append(want, uint32(i))
		}
	}
	waitFor(t, "the sink to read them", func() bool { got, _ := sink.received(); return len(got) >= len(want) })
	got, _ := sink.received()
	if len(got) != len(want) {
		t.Fatalf("sink got %d datagrams, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("datagram %d: got #%d, want #%d (the seed's losses)", i, got[i], want[i])
		}
	}
	if s := r.Stats().Up; s.Lost == 0 || s.BurstLost == 0 {
		t.Errorf("no random or no burst loss counted: %+v", s)
	}
}

func TestUDPRelayDelayIsALowerBound(t *testing.T) {
	sink := newUDPSink(t, true)
	d := Direction{Delay: 40 * time.Millisecond}
	_, c := startUDP(t, sink.conn.LocalAddr().String(), Profile{Up: d, Down: d}, 1)
	buf := make([]byte, 200)
	for range 3 {
		start := time.Now()
		sendSeq(t, c, 0, 1)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(start); rtt < 80*time.Millisecond {
			t.Errorf("echo came back in %v through an 80 ms RTT link", rtt)
		}
	}
}

func TestUDPRelayTailDrop(t *testing.T) {
	sink := newUDPSink(t, false)
	// 100 kb/s: a 1250-byte datagram takes 100 ms; the queue holds 4.
	p := Profile{Up: Direction{Rate: 100_000, Queue: 5000}}
	r, c := startUDP(t, sink.conn.LocalAddr().String(), p, 1)
	start := time.Now()
	buf := make([]byte, 1250)
	for range 50 {
		c.Write(buf)
	}
	waitFor(t, "all 50 counted", func() bool { return r.Stats().Up.Packets == 50 })
	elapsed := time.Since(start)
	s := r.Stats().Up
	// However slow this machine, no more can have been accepted than the
	// queue plus what the bottleneck drained while the burst arrived.
	if limit := 4 + int64(elapsed/(100*time.Millisecond)) + 1; 50-s.QueueDropped > limit {
		t.Errorf("accepted %d of 50 in %v; the queue and rate allow at most %d", 50-s.QueueDropped, elapsed, limit)
	}
	if s.QueueDropped == 0 {
		t.Error("nothing tail-dropped")
	}
}

func TestUDPRelayBlackoutAndPathChange(t *testing.T) {
	sink := newUDPSink(t, false)
	r, c := startUDP(t, sink.conn.LocalAddr().String(), Profile{}, 1)
	sendSeq(t, c, 0, 10)
	waitFor(t, "10 through", func() bool { got, _ := sink.received(); return len(got) == 10 })

	r.BlackOut()
	sendSeq(t, c, 10, 20)
	waitFor(t, "10 counted", func() bool { return r.Stats().Up.Packets == 20 })
	if s := r.Stats().Up; s.BlackoutDropped != 10 {
		t.Errorf("blackout dropped %d of 10", s.BlackoutDropped)
	}
	r.Restore()
	if err := r.ChangePath(); err != nil {
		t.Fatal(err)
	}
	sendSeq(t, c, 20, 30)
	waitFor(t, "10 more through", func() bool { got, _ := sink.received(); return len(got) == 20 })
	got, from := sink.received()
	for i, v := range got {
		if want := uint32(i); i >= 10 {
			want += 10
			if v != want {
				t.Fatalf("datagram %d is #%d, want #%d: the blackout's got through", i, v, want)
			}
		}
	}
	if len(from) != 2 {
		t.Fatalf("the target saw %d client addresses, want 2 (one per path): %v", len(from), from)
	}
	for a, n := range from {
		if n != 10 {
			t.Errorf("%v sent %d, want 10 before and 10 after the path change", a, n)
		}
	}
	if r.Stats().PathChanges != 1 {
		t.Errorf("PathChanges %d", r.Stats().PathChanges)
	}
}

// tcpEcho is a TCP target that echoes every connection.
func tcpEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

func startTCP(t *testing.T, p Profile) (*TCPRelay, net.Conn) {
	t.Helper()
	r, err := ListenTCP(Config{Target: tcpEcho(t), Profile: p, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	c, err := net.Dial("tcp", r.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return r, c
}

func TestTCPRelayLossIsDelayNotCorruption(t *testing.T) {
	d := Direction{Delay: 5 * time.Millisecond, Jitter: 2 * time.Millisecond, Loss: 0.1, Rate: 20_000_000, Queue: 32 << 10}
	r, c := startTCP(t, Profile{Up: d, Down: d})
	msg := make([]byte, 200<<10)
	rand.Read(msg)
	start := time.Now()
	go func() { c.Write(msg); c.(*net.TCPConn).CloseWrite() }()
	back, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, msg) {
		t.Fatalf("echo differs: %d bytes back of %d", len(back), len(msg))
	}
	st := r.Stats()
	if st.Up.Retransmits == 0 || st.Down.Retransmits == 0 {
		t.Errorf("10%% loss and no modelled retransmission: %+v", st)
	}
	// 400 KiB across a 20 Mb/s bottleneck both ways takes at least 160 ms.
	if el := time.Since(start); el < 160*time.Millisecond {
		t.Errorf("took %v, faster than the bottleneck allows", el)
	}
}

func TestTCPRelayBlackoutHoldsBytes(t *testing.T) {
	r, c := startTCP(t, Profile{})
	r.BlackOut()
	c.Write([]byte("ping"))
	c.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	if n, err := c.Read(make([]byte, 4)); n != 0 || !isTimeout(err) {
		t.Fatalf("read %d bytes (%v) through a blackout", n, err)
	}
	r.Restore()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("after Restore: %q, %v", buf, err)
	}
	if r.Stats().Up.BlackoutHeld != 1 {
		t.Errorf("BlackoutHeld %d, want 1", r.Stats().Up.BlackoutHeld)
	}
	r.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(buf); err == nil {
		t.Error("the connection outlived the relay")
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
