// Package limittest attacks a real HTTP listener the way issue 27 did (idle
// keep-alive connections, trickling bodies) and checks that the server
// closes each one, for the tests of every binary's listeners. Only tests
// import it.
package limittest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Attack opens idle keep-alive connections to addr (each sends one GET of
// path with headers, reads the answer, then stays silent) and trickling
// connections (a POST to path whose body comes one byte every 50 ms), and
// waits until the server has closed every one. The wait ends at the
// server's EOF; its only deadline is a hang guard.
func Attack(t testing.TB, addr, path string, headers map[string]string, idle, trickling int) {
	t.Helper()
	hdr := ""
	for k, v := range headers {
		hdr += k + ": " + v + "\r\n"
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range idle {
		c := dial()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", path, addr, hdr)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Close {
			t.Fatalf("GET %s: the server closed the connection itself; pick a path it keeps alive", path)
		}
		conns = append(conns, c)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	for range trickling {
		c := dial()
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", path, addr, hdr)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		})
		conns = append(conns, c)
	}
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(2 * time.Minute)) // hang guard
		_, err := io.Copy(io.Discard, c)
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("connection %d of %d: %v (the server did not close it)", i, len(conns), err)
		}
	}
}
