package devfleet

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
)

// StopProcess suspends the process of "hub" or of a spoke's agent (SIGSTOP to its process
// group): it keeps its connections and its state but does nothing, as a process starved of CPU
// or paused by a debugger would, while time passes for everyone else. ContinueProcess resumes
// it. (The runs an agent started live in process groups of their own and keep running.)
func (f *Fleet) StopProcess(name string) error {
	return f.signal(name, syscall.SIGSTOP)
}

// ContinueProcess resumes a process suspended by StopProcess (SIGCONT to its process group).
func (f *Fleet) ContinueProcess(name string) error {
	return f.signal(name, syscall.SIGCONT)
}

func (f *Fleet) signal(name string, sig syscall.Signal) error {
	p, err := f.process(name)
	if err != nil {
		return err
	}
	if p.exited() {
		return fmt.Errorf("%s is not running", name)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("sending %s to %s: %w", sig, name, err)
	}
	return nil
}

// Registered reports whether a spoke is in the hub's config file.
func (f *Fleet) Registered(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.registered[name]
}

// Deregister removes a spoke from the hub's config file, which the hub hot-reloads: the hub
// deletes its Cluster object and its namespace (mirrors, Lease and the agent's credentials).
// It returns once both are gone. The agent keeps running, without credentials. It needs
// Options.ControllerManager (namespace deletion) and a fleet with spokes.
func (f *Fleet) Deregister(ctx context.Context, name string) error {
	if f.single || f.Spokes[name] == nil {
		return fmt.Errorf("deregistering %q: not a spoke of this fleet", name)
	}
	f.mu.Lock()
	f.registered[name] = false
	err := f.writeHubConfig()
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return localcluster.Poll(2*time.Minute, func() error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err := f.Hub.Client.Get(ctx, client.ObjectKey{Name: name}, &magosv1.Cluster{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("Cluster %s is still registered on the hub (%v)", name, err)
		}
		ns := mirror.Namespace(name)
		err = f.Hub.Client.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace %s is still on the hub (%v); namespace deletion needs Options.ControllerManager", ns, err)
		}
		return nil
	})
}

// AgentHubKubeconfig is the bootstrap kubeconfig the fleet gave the agent of a spoke: the
// agent's own credentials on the hub (its ServiceAccount in the cluster's hub namespace).
func (f *Fleet) AgentHubKubeconfig(cluster string) string { return f.path(cluster + "-hub.kubeconfig") }

// Bind binds a cluster of the fleet to exactly the given hub namespaces (none: to no namespace)
// in the hub's config file, which the hub reloads; it returns once the Cluster object on the
// hub shows the new binding.
func (f *Fleet) Bind(ctx context.Context, name string, namespaces ...string) error {
	f.mu.Lock()
	if _, ok := f.registered[name]; !ok {
		f.mu.Unlock()
		return fmt.Errorf("binding %q: not a cluster of this fleet", name)
	}
	f.bindings[name] = slices.Clone(namespaces)
	err := f.writeHubConfig()
	f.mu.Unlock()
	if err != nil {
		return err
	}
	want := slices.Sorted(slices.Values(namespaces))
	return localcluster.Poll(time.Minute, func() error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cl := &magosv1.Cluster{}
		if err := f.Hub.Client.Get(ctx, client.ObjectKey{Name: name}, cl); err != nil {
			return err
		}
		if !slices.Equal(cl.Spec.Namespaces, want) {
			return fmt.Errorf("Cluster %s is bound to %v on the hub, want %v", name, cl.Spec.Namespaces, want)
		}
		return nil
	})
}

// Register adds a spoke removed by Deregister back to the hub's config file, and, as an
// operator would, gives its agent a new bootstrap kubeconfig (the old one's ServiceAccount was
// deleted with the namespace) and restarts it (SIGTERM, then SIGKILL after 10s). It returns once
// the agent runs again; the cluster becomes Ready when the agent has heartbeated and synced.
func (f *Fleet) Register(ctx context.Context, name string) error {
	if f.single || f.Spokes[name] == nil {
		return fmt.Errorf("registering %q: not a spoke of this fleet", name)
	}
	f.mu.Lock()
	f.registered[name] = true
	err := f.writeHubConfig()
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if _, err := f.agentKubeconfig(ctx, name); err != nil {
		return fmt.Errorf("registering %s again: %w", name, err)
	}
	p, err := f.process(name)
	if err != nil {
		return err
	}
	if !p.exited() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	return f.launch(p)
}
