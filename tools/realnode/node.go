// Package realnode runs real Kubernetes nodes for the production-path tests: each node is a
// Docker container of the magos-node image (tools/realnode/node), a whole single-node cluster
// with its own address on a Docker network of its own, the way kind runs nodes. Its kubelet
// runs Pods through containerd and runc; every image it runs is built on this machine and
// loaded from tarballs, since no registry can be reached.
//
// The package drives the Docker Engine through the docker command line, which every machine
// of the project has.
package realnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Label marks every container and network this package creates, so that a later run can find
// and remove what an interrupted one left (and nothing else).
const Label = "magosproject.io/realnode"

// NetworkOptions configures a node network.
type NetworkOptions struct {
	// Name of the Docker network.
	Name string
	// Subnet of the network, e.g. 10.213.0.0/24; nodes take addresses from it.
	Subnet string
}

// CreateNetwork creates a Docker bridge network for nodes (removing one of the same name that
// this package made earlier) and returns the address of its gateway: the machine itself, as
// the nodes see it.
func CreateNetwork(ctx context.Context, opts NetworkOptions) (gateway string, err error) {
	if _, err := docker(ctx, "network", "inspect", opts.Name); err == nil {
		if err := RemoveNetwork(ctx, opts.Name); err != nil {
			return "", err
		}
	}
	gw, err := gatewayOf(opts.Subnet)
	if err != nil {
		return "", err
	}
	if _, err := docker(ctx, "network", "create", "--driver", "bridge", "--subnet", opts.Subnet,
		"--gateway", gw, "--label", Label+"=true", opts.Name); err != nil {
		return "", fmt.Errorf("creating network %s: %w", opts.Name, err)
	}
	return gw, nil
}

// RemoveNetwork removes a network this package created, with the nodes still on it.
func RemoveNetwork(ctx context.Context, name string) error {
	out, err := docker(ctx, "network", "inspect", "-f", `{{index .Labels "`+Label+`"}}`, name)
	if err != nil {
		return nil // gone
	}
	if strings.TrimSpace(out) != "true" {
		return fmt.Errorf("network %s was not made by the real-node test bed: not removing it", name)
	}
	names, _ := docker(ctx, "ps", "-a", "--format", "{{.Names}}", "--filter", "label="+Label, "--filter", "network="+name)
	for _, node := range strings.Fields(names) {
		_ = (&Node{Name: node}).Remove(ctx)
	}
	_, err = docker(ctx, "network", "rm", name)
	return err
}

// Options configures a node.
type Options struct {
	// Name of the node: the container's name and hostname and the Node's name.
	Name string
	// Image is the node image (magos-node:dev).
	Image string
	// Network is the Docker network the node joins and Address its address there.
	Network, Address string
	// ImagesDir holds the image tarballs (docker save or OCI) the node loads at boot, the
	// sandbox image among them; it is mounted read-only.
	ImagesDir string
	// Memory limits the whole node (e.g. "4g"); empty for none.
	Memory string
	// ReadyTimeout bounds the wait for a Ready node (default 3 minutes).
	ReadyTimeout time.Duration
}

// Node is a running node container.
type Node struct {
	// Name of the node and its container.
	Name string
	// Address of the node on its network; its API server listens on Address:6443.
	Address string
	// Kubeconfig is the admin kubeconfig of the node's cluster.
	Kubeconfig []byte
	// ReadyAfter is how long the node took from container start to a Ready Node.
	ReadyAfter time.Duration
}

// Start runs a node container and waits until its Node is Ready. On failure it returns the
// node's own account of what went wrong and removes the container.
func Start(ctx context.Context, opts Options) (*Node, error) {
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 3 * time.Minute
	}
	_, _ = docker(ctx, "rm", "-f", "-v", opts.Name) // a leftover of an interrupted run
	args := []string{"run", "-d", "--name", opts.Name, "--hostname", opts.Name,
		"--label", Label + "=true", "--network", opts.Network, "--ip", opts.Address,
		// What kind's nodes get from --privileged, spelled out: the machines lack
		// CAP_SYS_RESOURCE in their bounding set, and Docker's --privileged asks for every
		// capability, so a privileged container cannot start here.
		"--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
		"--security-opt", "systempaths=unconfined", "--device-cgroup-rule", "a *:* rwm",
		"--device", "/dev/kmsg", "--volume", "/sys/fs/cgroup:/sys/fs/cgroup",
		"--tmpfs", "/run", "--tmpfs", "/tmp",
		// containerd's overlayfs snapshots cannot live on the container's own overlay root.
		"--volume", "/var",
		"--volume", opts.ImagesDir + ":/images:ro",
	}
	for _, c := range nodeCapabilities {
		args = append(args, "--cap-add", c)
	}
	if opts.Memory != "" {
		args = append(args, "--memory", opts.Memory)
	}
	args = append(args, opts.Image)
	started := time.Now()
	if _, err := docker(ctx, args...); err != nil {
		return nil, fmt.Errorf("starting node %s: %w", opts.Name, err)
	}
	n := &Node{Name: opts.Name, Address: opts.Address}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, opts.ReadyTimeout, true, func(ctx context.Context) (bool, error) {
		if _, err := n.Exec(ctx, "test", "-f", "/run/magos-node/ready"); err == nil {
			return true, nil
		}
		running, _ := docker(ctx, "inspect", "-f", "{{.State.Running}}", opts.Name)
		if strings.TrimSpace(running) == "false" {
			return false, errors.New("the node container exited")
		}
		return false, nil
	})
	if err != nil {
		logs, _ := docker(context.WithoutCancel(ctx), "logs", "--tail", "60", opts.Name)
		_ = n.Remove(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("node %s not ready: %w\n%s", opts.Name, err, logs)
	}
	n.ReadyAfter = time.Since(started)
	cfg, err := n.Exec(ctx, "cat", "/etc/kubernetes/admin.conf")
	if err != nil {
		return nil, err
	}
	n.Kubeconfig = []byte(cfg)
	return n, nil
}

// RESTConfig is the admin client configuration of the node's cluster.
func (n *Node) RESTConfig() (*rest.Config, error) {
	return clientcmd.RESTConfigFromKubeConfig(n.Kubeconfig)
}

// WriteKubeconfig writes the admin kubeconfig to dir/<name>.kubeconfig and returns its path.
func (n *Node) WriteKubeconfig(dir string) (string, error) {
	p := filepath.Join(dir, n.Name+".kubeconfig")
	return p, os.WriteFile(p, n.Kubeconfig, 0o600)
}

// Exec runs a command in the node and returns its standard output.
func (n *Node) Exec(ctx context.Context, args ...string) (string, error) {
	return docker(ctx, append([]string{"exec", n.Name}, args...)...)
}

// Log returns the last lines of one part's log (etcd, kube-apiserver, containerd, kubelet,
// ...), leaving out lines that contain any of skip.
func (n *Node) Log(ctx context.Context, part string, lines int, skip ...string) string {
	out, err := n.Exec(ctx, "cat", "/var/log/magos-node/"+part+".log")
	if err != nil {
		return err.Error()
	}
	var kept []string
	for l := range strings.Lines(out) {
		if !slices.ContainsFunc(skip, func(s string) bool { return strings.Contains(l, s) }) {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept[max(0, len(kept)-lines):], "")
}

// LoadImage imports an image tarball into the node's containerd, for images built after the
// node started. The tarball is streamed in (docker cp cannot write under the node's /tmp, a
// tmpfs) and kept under /var/tmp only while it is imported.
func (n *Node) LoadImage(ctx context.Context, tarball string) error {
	f, err := os.Open(tarball)
	if err != nil {
		return err
	}
	defer f.Close()
	dst := "/var/tmp/" + filepath.Base(tarball)
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", "exec", "-i", n.Name, "sh", "-c",
		`cat >"$1" && ctr -n k8s.io images import --local "$1"; rc=$?; rm -f "$1"; exit $rc`, "sh", dst)
	cmd.Stdin, cmd.Stderr = f, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("loading %s into node %s: %w: %s", tarball, n.Name, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// Disconnect cuts the node off its network, and Connect puts it back at its address.
func (n *Node) Disconnect(ctx context.Context, network string) error {
	_, err := docker(ctx, "network", "disconnect", network, n.Name)
	return err
}

// Connect puts the node back on network at its address.
func (n *Node) Connect(ctx context.Context, network string) error {
	_, err := docker(ctx, "network", "connect", "--ip", n.Address, network, n.Name)
	return err
}

// Remove stops the node and removes its container and volumes, and the cgroups its kubelet
// made on the machine.
func (n *Node) Remove(ctx context.Context) error {
	_, err := docker(ctx, "rm", "-f", "-v", n.Name)
	return errors.Join(err, removeCgroups(n.Name))
}

// removeCgroups removes the node's kubelet cgroup root (/magos-<node>, see entrypoint.sh) from
// every cgroup v1 hierarchy of the machine, deepest first. The cgroups are empty once the
// node's container is gone.
func removeCgroups(node string) error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/magos-" + node)
	var errs []error
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range slices.Backward(dirs) {
			if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// RSS returns the resident memory of each process named in names inside the node, in bytes.
func (n *Node) RSS(ctx context.Context, names ...string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, name := range names {
		s, err := n.Exec(ctx, "sh", "-c", "ps -C "+name+" -o rss= | awk '{s+=$1} END {print s+0}'")
		if err != nil {
			return nil, err
		}
		var kib int64
		if _, err := fmt.Sscan(strings.TrimSpace(s), &kib); err != nil {
			return nil, fmt.Errorf("rss of %s: %q: %w", name, s, err)
		}
		out[name] = kib * 1024
	}
	return out, nil
}

func docker(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// gatewayOf returns the first address of an IPv4 /N subnet.
func gatewayOf(subnet string) (string, error) {
	base, _, ok := strings.Cut(subnet, "/")
	parts := strings.Split(base, ".")
	if !ok || len(parts) != 4 {
		return "", fmt.Errorf("subnet %q: want an IPv4 CIDR such as 10.213.0.0/24", subnet)
	}
	return strings.Join(parts[:3], ".") + ".1", nil
}

// nodeCapabilities are the capabilities of a node: every one Docker 20.10 knows but
// SYS_RESOURCE, which the machines' bounding set lacks.
var nodeCapabilities = []string{
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
	"IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
	"SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE",
	"AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
	"WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ",
}

// kubeletTunables are the kernel settings kubelet sets on start. They are not namespaced: a
// node in a container changes them for the whole machine.
var kubeletTunables = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// SaveKernelTunables reads the kernel settings kubelet changes and returns a function that
// puts them back, for a test bed to call once its nodes are gone.
func SaveKernelTunables() (restore func() error, err error) {
	saved := map[string][]byte{}
	for _, k := range kubeletTunables {
		v, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return nil, fmt.Errorf("reading kernel setting %s: %w", k, err)
		}
		saved[k] = v
	}
	return func() error {
		var errs []error
		for k, v := range saved {
			if cur, _ := os.ReadFile("/proc/sys/" + k); bytes.Equal(cur, v) {
				continue
			}
			if err := os.WriteFile("/proc/sys/"+k, v, 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restoring kernel setting %s: %w", k, err))
			}
		}
		return errors.Join(errs...)
	}, nil
}
