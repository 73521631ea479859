package redistest

import (
	"bufio"
	"net"
	"net/url"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStartAnswers: the URL reaches a live server, and two servers in one
// test get different ports.
func TestStartAnswers(t *testing.T) {
	seen := map[string]bool{}
	for range 2 {
		u, err := url.Parse(Start(t))
		if err != nil {
			t.Fatal(err)
		}
		if seen[u.Host] {
			t.Fatalf("two servers on %s", u.Host)
		}
		seen[u.Host] = true
		c, err := net.DialTimeout("tcp", u.Host, 10*time.Second) // hang guard only
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || line != "+PONG\r\n" {
			t.Fatalf("PING answered %q, %v", line, err)
		}
	}
}
