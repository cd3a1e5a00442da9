// Package localcluster starts real Kubernetes control planes on this machine: a hub and any
// number of spokes, each its own etcd and kube-apiserver (controller-runtime's envtest, with an
// optional kube-controller-manager), with the Magos CRDs and admission policies installed. The
// local fleet of `make demo` (tools/devfleet) runs on it, and every integration test does
// through pkg/testenv.
//
// The binaries come from tools/provision-assets.sh (built from the Go module proxy and cached).
// When KUBEBUILDER_ASSETS is not set, the package runs that script itself; when the assets
// cannot be had, New fails.
package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/scheme"
)

// HubName is the name of the hub cluster in a Fleet.
const HubName = "hub"

// HubLeaseNamespace is where hubs run with leader election on a local hub keep their leader
// Lease (magos-hub --leader-election-namespace): the namespace the hub cluster's
// magos-hub-leader policy binding reads the Lease from.
const HubLeaseNamespace = corev1.NamespaceDefault

// LeaderPolicyBinding binds the hub chart's magos-hub-leader admission policy
// (charts/magos-hub/files/leader-policy.yaml) to the hub's leader Lease in namespace, as the
// chart's own binding does in the release namespace.
func LeaderPolicyBinding(namespace string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "magos-hub-leader"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        "magos-hub-leader",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			ParamRef: &admissionregistrationv1.ParamRef{
				Name: keys.HubLeaderLease, Namespace: namespace,
				ParameterNotFoundAction: ptr.To(admissionregistrationv1.AllowAction),
			},
		},
	}
}

// Options configures a Fleet.
type Options struct {
	// Spokes are the names of the spoke clusters to start besides the hub.
	Spokes []string
	// NoHub starts only the spokes.
	NoHub bool
	// Bare starts API servers without the Magos CRDs and admission policies (for tests that
	// install them another way, such as the Helm chart tests).
	Bare bool
	// ControllerManager also runs kube-controller-manager against every cluster, for namespace
	// deletion and owner-reference garbage collection (envtest runs no controllers).
	ControllerManager bool
	// Controllers are more kube-controller-manager controllers to run with ControllerManager
	// (their --controllers names, such as job-controller).
	Controllers []string
	// APIServerFlags are more kube-apiserver flags for every cluster, by name without the
	// leading dashes ("oidc-issuer-url": "https://127.0.0.1:5556/"), set over envtest's own.
	APIServerFlags map[string]string
}

// Cluster is one running API server.
type Cluster struct {
	// Name is the cluster's name in the fleet.
	Name string
	// Config reaches the API server as a cluster admin.
	Config *rest.Config
	// Client is a client for Config with the Magos scheme.
	Client client.Client
	// Kubeconfig is a kubeconfig file for Config.
	Kubeconfig string

	env *envtest.Environment
	kcm *exec.Cmd
}

// Fleet is a hub and its spokes.
type Fleet struct {
	// Hub is the hub cluster (nil with Options.NoHub).
	Hub *Cluster
	// Spokes are the spoke clusters, by name.
	Spokes map[string]*Cluster

	dir string
}

// New starts a Fleet; the caller must Stop it. The clusters start concurrently.
func New(opts Options) (*Fleet, error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "magos-localcluster-")
	if err != nil {
		return nil, err
	}
	f := &Fleet{Spokes: map[string]*Cluster{}, dir: dir}
	names := append([]string(nil), opts.Spokes...)
	if !opts.NoHub {
		names = append([]string{HubName}, names...)
	}
	clusters := make([]*Cluster, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			clusters[i], errs[i] = startCluster(name, assets, filepath.Join(dir, name), opts)
		})
	}
	wg.Wait()
	for i, c := range clusters {
		if c == nil {
			continue
		}
		if names[i] == HubName && !opts.NoHub {
			f.Hub = c
		} else {
			f.Spokes[c.Name] = c
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, f.Stop())
	}
	return f, nil
}

// Cluster returns the named cluster (HubName for the hub), or nil.
func (f *Fleet) Cluster(name string) *Cluster {
	if name == HubName && f.Hub != nil {
		return f.Hub
	}
	return f.Spokes[name]
}

// Stop stops every cluster and removes their files.
func (f *Fleet) Stop() error {
	var errs []error
	all := []*Cluster{f.Hub}
	for _, c := range f.Spokes {
		all = append(all, c)
	}
	for _, c := range all {
		if c != nil {
			errs = append(errs, c.Stop())
		}
	}
	errs = append(errs, os.RemoveAll(f.dir))
	return errors.Join(errs...)
}

// Stop stops the cluster's processes.
func (c *Cluster) Stop() error {
	if c.kcm != nil && c.kcm.Process != nil {
		_ = c.kcm.Process.Kill()
		_ = c.kcm.Wait()
		c.kcm = nil
	}
	if c.env == nil {
		return nil
	}
	env := c.env
	c.env = nil
	return env.Stop()
}

// PIDs returns the process IDs of the cluster's etcd, kube-apiserver and controller manager,
// for measurements.
func (c *Cluster) PIDs() []int {
	var pids []int
	if c.kcm != nil && c.kcm.Process != nil {
		pids = append(pids, c.kcm.Process.Pid)
	}
	pids = append(pids, childPIDsWithArg(c.env.ControlPlane.APIServer.CertDir)...)
	return append(pids, childPIDsWithArg(c.env.ControlPlane.Etcd.DataDir)...)
}

// startAttempts is how many times startCluster starts an API server before giving up.
const startAttempts = 3

func startCluster(name, assets, dir string, opts Options) (*Cluster, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	newEnv := func() *envtest.Environment {
		env := &envtest.Environment{
			BinaryAssetsDirectory: assets,
			CRDInstallOptions: envtest.CRDInstallOptions{
				Paths: []string{
					filepath.Join(root, "charts", "magos-hub", "files", "crds"),
					filepath.Join(root, "charts", "magos-agent", "files", "kyverno-validatingpolicy-crd.yaml"),
				},
				ErrorIfPathMissing: true,
			},
			ErrorIfCRDPathMissing: true,
			// Several API servers start at once on a loaded machine: give each more than
			// envtest's default 20s.
			ControlPlaneStartTimeout: time.Minute,
		}
		if opts.Bare {
			env.CRDInstallOptions = envtest.CRDInstallOptions{}
			env.ErrorIfCRDPathMissing = false
		}
		if len(opts.APIServerFlags) > 0 {
			args := env.ControlPlane.GetAPIServer().Configure()
			for k, v := range opts.APIServerFlags {
				args.Set(k, v)
			}
		}
		return env
	}
	// envtest gives a new API server 5s to show its default namespace; on a loaded machine that
	// can pass, which fails the start of a server that is merely slow. Such a start is tried
	// again with a fresh etcd and API server, up to startAttempts times.
	var env *envtest.Environment
	var cfg *rest.Config
	var startErrs []error
	for range startAttempts {
		env = newEnv()
		if cfg, err = env.Start(); err == nil {
			break
		}
		startErrs = append(startErrs, err)
		_ = env.Stop()
	}
	if err != nil {
		return nil, fmt.Errorf("cluster %s: starting envtest (%d attempts): %w", name, startAttempts, errors.Join(startErrs...))
	}
	cfg.QPS, cfg.Burst = 200, 400
	c := &Cluster{Name: name, Config: cfg, env: env}
	if c.Client, err = client.New(cfg, client.Options{Scheme: scheme.New()}); err != nil {
		return nil, errors.Join(fmt.Errorf("cluster %s: client: %w", name, err), c.Stop())
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	if c.Kubeconfig, err = writeKubeconfig(env, name, dir); err != nil {
		return nil, errors.Join(fmt.Errorf("cluster %s: kubeconfig: %w", name, err), c.Stop())
	}
	if !opts.Bare {
		policies := []string{filepath.Join(root, "charts", "magos-agent", "files", "admission-policy.yaml")}
		if name == HubName {
			policies = append(policies, filepath.Join(root, "charts", "magos-hub", "files", "approval-policy.yaml"),
				filepath.Join(root, "charts", "magos-hub", "files", "leader-policy.yaml"),
				filepath.Join(root, "charts", "magos-hub", "files", "agent-heartbeats-flowschema.yaml"))
		}
		for _, p := range policies {
			if err := ApplyFile(context.Background(), c.Client, p); err != nil {
				return nil, errors.Join(fmt.Errorf("cluster %s: admission policy %s: %w", name, filepath.Base(p), err), c.Stop())
			}
		}
		if name == HubName {
			if err := c.Client.Create(context.Background(), LeaderPolicyBinding(HubLeaseNamespace)); err != nil {
				return nil, errors.Join(fmt.Errorf("cluster %s: binding the leader policy: %w", name, err), c.Stop())
			}
		}
	}
	if opts.ControllerManager {
		if err := c.startControllerManager(assets, dir, opts.Controllers); err != nil {
			return nil, errors.Join(fmt.Errorf("cluster %s: kube-controller-manager: %w", name, err), c.Stop())
		}
	}
	return c, nil
}

func writeKubeconfig(env *envtest.Environment, name, dir string) (string, error) {
	user, err := env.AddUser(envtest.User{Name: "magos-test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	raw, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	raw = bytes.ReplaceAll(raw, []byte(": envtest"), []byte(": "+name))
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, raw, 0o600)
}

func (c *Cluster) startControllerManager(assets, dir string, more []string) error {
	controllers := append([]string{"garbage-collector-controller", "namespace-controller"}, more...)
	cmd := exec.Command(filepath.Join(assets, "kube-controller-manager"),
		"--kubeconfig="+c.Kubeconfig,
		"--authentication-kubeconfig="+c.Kubeconfig,
		"--authorization-kubeconfig="+c.Kubeconfig,
		"--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--concurrent-gc-syncs=5",
		"--concurrent-namespace-syncs=5",
	)
	logFile, err := os.Create(filepath.Join(dir, "kube-controller-manager.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return err
	}
	c.kcm = cmd
	return nil
}

// ApplyFile creates every object of a multi-document YAML file (objects that exist are left
// as they are).
func ApplyFile(ctx context.Context, c client.Client, path string) error {
	objs, err := DecodeFile(path)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: creating %s %s: %w", path, obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// DecodeFile reads every object of a multi-document YAML file.
func DecodeFile(path string) ([]*unstructured.Unstructured, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}
