package devfleet

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// TestTransportProxy: the proxy forwards bytes both ways; blackholed, it stalls an open
// connection and holds a new one without forwarding anything; healed, both deliver what was held.
func TestTransportProxy(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := c.Write(append(sc.Bytes(), '\n')); err != nil {
						return
					}
				}
			}()
		}
	}()
	p, err := newTransportProxy("https://" + echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()

	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	send := func(c net.Conn, line string) {
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	recv := func(c net.Conn, r *bufio.Reader, within time.Duration) (string, error) {
		_ = c.SetReadDeadline(time.Now().Add(within))
		return r.ReadString('\n')
	}

	open, openR := dial()
	send(open, "before")
	if got, err := recv(open, openR, 5*time.Second); err != nil || got != "before\n" {
		t.Fatalf("forwarding: %q, %v", got, err)
	}

	p.setBlackholed(true)
	send(open, "during")
	if got, err := recv(open, openR, 300*time.Millisecond); err == nil {
		t.Fatalf("a partitioned connection delivered %q", got)
	}
	fresh, freshR := dial() // accepted, but nothing is forwarded
	send(fresh, "new")
	if got, err := recv(fresh, freshR, 300*time.Millisecond); err == nil {
		t.Fatalf("a connection opened during the partition delivered %q", got)
	}

	p.setBlackholed(false)
	if got, err := recv(open, openR, 5*time.Second); err != nil || got != "during\n" {
		t.Fatalf("after healing, the open connection: %q, %v", got, err)
	}
	if got, err := recv(fresh, freshR, 5*time.Second); err != nil || got != "new\n" {
		t.Fatalf("after healing, the new connection: %q, %v", got, err)
	}
}
