package localcluster

import "net"

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
