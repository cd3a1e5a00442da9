package devfleet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"

	"k8s.io/client-go/tools/clientcmd"
)

// transportProxy is a TCP proxy on 127.0.0.1 between one agent and the hub's API server. It
// forwards bytes as they are (TLS passes through it end to end), so it knows nothing of
// Kubernetes: a partition it makes is a transport-level partition, like a network fault between
// the two hosts. While blackholed it still accepts connections but forwards nothing, and the
// connections already open stall (bytes read are held, not written) until it is healed; then
// everything held is delivered and forwarding goes on.
type transportProxy struct {
	ln     net.Listener
	target string

	mu         sync.Mutex
	open       *sync.Cond // broadcast when blackholed or closed changes
	blackholed bool
	closed     bool
	conns      map[net.Conn]struct{}
}

// newTransportProxy starts a proxy to the API server at host (a URL or host:port).
func newTransportProxy(host string) (*transportProxy, error) {
	target := host
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		target = u.Host
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening: %w", err)
	}
	p := &transportProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.open = sync.NewCond(&p.mu)
	go p.serve()
	return p, nil
}

// addr is the proxy's address (host:port).
func (p *transportProxy) addr() string { return p.ln.Addr().String() }

// setBlackholed partitions (true) or heals (false).
func (p *transportProxy) setBlackholed(b bool) {
	p.mu.Lock()
	p.blackholed = b
	p.mu.Unlock()
	p.open.Broadcast()
}

// wait blocks while the proxy is blackholed; it returns false once the proxy is closed.
func (p *transportProxy) wait() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.blackholed && !p.closed {
		p.open.Wait()
	}
	return !p.closed
}

func (p *transportProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *transportProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *transportProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c) {
			return
		}
		go p.forward(c)
	}
}

// forward connects an accepted connection to the target (once not blackholed) and pumps bytes
// both ways until either side closes.
func (p *transportProxy) forward(client net.Conn) {
	defer p.untrack(client)
	if !p.wait() {
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	go func() { p.pump(server, client); done <- struct{}{} }()
	go func() { p.pump(client, server); done <- struct{}{} }()
	<-done // one side closed: close both (the deferred untracks), which ends the other pump
}

// pump copies src to dst, holding each chunk read while the proxy is blackholed.
func (p *transportProxy) pump(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// close stops the proxy and closes every connection through it.
func (p *transportProxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	p.open.Broadcast()
	_ = p.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
}

// throughProxy rewrites the server of every cluster of a kubeconfig to the proxy's address
// (same scheme; the hub's serving certificate is for 127.0.0.1, as is the proxy).
func throughProxy(kubeconfig []byte, p *transportProxy) ([]byte, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading the agent's kubeconfig: %w", err)
	}
	if len(cfg.Clusters) == 0 {
		return nil, errors.New("the agent's kubeconfig names no cluster")
	}
	for _, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			return nil, fmt.Errorf("the agent's kubeconfig: server %q: %w", c.Server, err)
		}
		u.Host = p.addr()
		c.Server = u.String()
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("writing the agent's kubeconfig: %w", err)
	}
	return out, nil
}

// Partition cuts a spoke's agent off from the hub at the transport level: its proxy to the
// hub's API server accepts connections but forwards nothing, and stalls the open ones, until
// Heal. The agent keeps running and its spoke is untouched. It needs Options.HubProxy.
func (f *Fleet) Partition(name string) error {
	p := f.proxies[name]
	if p == nil {
		return fmt.Errorf("no hub proxy for %q: start the fleet with Options.HubProxy", name)
	}
	p.setBlackholed(true)
	return nil
}

// Heal ends a Partition: the stalled connections deliver what they held, and new ones are
// forwarded again.
func (f *Fleet) Heal(name string) error {
	p := f.proxies[name]
	if p == nil {
		return fmt.Errorf("no hub proxy for %q: start the fleet with Options.HubProxy", name)
	}
	p.setBlackholed(false)
	return nil
}
