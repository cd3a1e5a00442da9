package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// FreeAddress returns a loopback address (127.0.0.1:port) whose port was free a moment ago, for
// a process about to listen on it (a hub's metrics or dashboard address).
func FreeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// AddressInUse is what a Go process's error says when the port it was to listen on is taken:
// a caller that chose the port (FreeAddress) may choose another and start the process again.
const AddressInUse = "address already in use"

// ErrExited is WaitListening's error when the process exited first.
var ErrExited = errors.New("the process exited")

// WaitListening waits until the process pid listens on every address (ListensOn), polling
// every PollInterval. It returns ErrExited when exited is closed first, and an error naming the
// address after timeout or when ctx ends.
func WaitListening(ctx context.Context, pid int, exited <-chan struct{}, timeout time.Duration, addrs ...string) error {
	deadline := time.Now().Add(timeout)
	for _, addr := range addrs {
		for {
			select {
			case <-exited:
				return ErrExited
			default:
			}
			if listening, err := ListensOn(pid, addr); err != nil {
				return err
			} else if listening {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the process %d does not listen on %s after %s", pid, addr, timeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-exited:
			case <-time.After(PollInterval):
			}
		}
	}
	return nil
}

// ListensOn reports whether the process pid holds a listening TCP socket on addr's port. It
// reads Linux's /proc (the sockets the process has open, and the table of listening ones), not
// a connection: a connection to a port the process failed to bind would reach whoever took it.
// Elsewhere it connects instead.
func ListensOn(pid int, addr string) (bool, error) {
	_, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("address %q: %w", addr, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return false, fmt.Errorf("address %q: port: %w", addr, err)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if errors.Is(err, fs.ErrNotExist) && runtime.GOOS != "linux" {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, nil
		}
		return true, conn.Close()
	}
	if err != nil {
		return false, nil // the process has just exited: the caller sees it
	}
	sockets := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			sockets[strings.TrimSuffix(inode, "]")] = true
		}
	}
	for _, table := range []string{"tcp", "tcp6"} {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		// Lines: "sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid
		// timeout inode ...", addresses as hexadecimal IP:port, state 0A for LISTEN.
		for _, line := range strings.Split(string(raw), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" {
				continue
			}
			_, hexPort, ok := strings.Cut(f[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && p == port && sockets[f[9]] {
				return true, nil
			}
		}
	}
	return false, nil
}
