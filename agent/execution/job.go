package execution

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/magosfleet/magos/agent/variables"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/message"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/runoutput"
)

// Names and paths inside a run's Pod.
const (
	// ContainerName is the runner container of a Job.
	ContainerName = "runner"
	// CheckContainerName is the container of a verify run's Job: the user's check.
	CheckContainerName = "check"
	// DataMountPath holds the Workspace's data volume (the saved plan).
	DataMountPath = "/workspace-data"
	// DataVolumeSize is the size of a Workspace's data volume.
	DataVolumeSize = "1Gi"
	// JobNameLabel is the label Kubernetes puts on a Job's Pods.
	JobNameLabel = "job-name"
	// TerminationMargin is how much longer than runner.InterruptGrace a run's Pod may take to
	// stop before it is killed: time for the runner to write its result.
	TerminationMargin = 15 * time.Second
	// ProviderMirrorMountPath is where a Job mounts JobOptions.ProviderVolume, read-only: a
	// provider mirror listed before the image's own (runner.ImageProviderMirror).
	ProviderMirrorMountPath = "/magos/providers"
	// providerVolumeName is the Pod's volume of JobOptions.ProviderVolume.
	providerVolumeName = "provider-mirror"
)

// DataClaimName is the PersistentVolumeClaim that holds a Workspace's saved plans.
func DataClaimName(workspace string) string { return workspace + "-data" }

// JobOptions configures a JobLauncher.
type JobOptions struct {
	// Image is the runner image (the agent's own image: it has the runner entrypoint and the
	// binaries).
	Image string
	// ImagePullPolicy of the runner container (default IfNotPresent).
	ImagePullPolicy corev1.PullPolicy
	// Resources of the runner container.
	Resources corev1.ResourceRequirements
	// RunAsUser is the non-root user of the Pod (default 65532).
	RunAsUser int64
	// StorageClassName of data volumes; empty uses the cluster's default.
	StorageClassName string
	// ProviderNetworkMirror is the https:// URL of a provider network mirror runs install
	// providers from (runner.EnvProviderNetworkMirror), after the mirror folders; empty: none.
	ProviderNetworkMirror string
	// ProviderVolume holds a provider mirror of the operator's (OpenTofu's filesystem mirror
	// layout at its root: a PersistentVolumeClaim, an image volume, any volume source). Each
	// Job mounts it read-only at ProviderMirrorMountPath and lists it first in
	// runner.EnvProviderMirror, before the image's mirror. Nil: the image's mirror only.
	ProviderVolume *corev1.VolumeSource
}

// ParseProviderVolume decodes JobOptions.ProviderVolume from JSON (the agent's
// --runner-provider-volume): one Kubernetes volume source, such as
// {"persistentVolumeClaim":{"claimName":"providers"}} or {"image":{"reference":"..."}}. An
// unknown field, or not exactly one source, is an error.
func ParseProviderVolume(raw string) (*corev1.VolumeSource, error) {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	vs := &corev1.VolumeSource{}
	if err := dec.Decode(vs); err != nil {
		return nil, fmt.Errorf("not a volume source (want JSON such as {\"persistentVolumeClaim\":{\"claimName\":\"providers\"}}): %w", err)
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value: want one volume source")
	}
	// Count the sources set: the fields of a VolumeSource are all omitempty pointers.
	b, err := json.Marshal(vs)
	if err != nil {
		return nil, err
	}
	var set map[string]json.RawMessage
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, err
	}
	if len(set) != 1 {
		return nil, fmt.Errorf("%d volume sources set (%s): want exactly one", len(set), strings.Join(slices.Sorted(maps.Keys(set)), ", "))
	}
	return vs, nil
}

// JobLauncher runs each operation as a Kubernetes Job in the Workspace's namespace.
type JobLauncher struct {
	client client.Client
	reader client.Reader
	pods   corev1client.PodsGetter // reads runner logs
	cache  cluster.Cluster
	opts   JobOptions

	// created remembers Jobs this agent created until its cache has them, so that a reconcile
	// racing the cache reads the API server instead of starting the run again.
	created sync.Map // types.NamespacedName -> time.Time
}

// NewJobLauncher returns a JobLauncher using c's client (Jobs and Pods should be cached with
// the job-type label only) and API reader.
func NewJobLauncher(c cluster.Cluster, opts JobOptions) (*JobLauncher, error) {
	if opts.Image == "" {
		return nil, fmt.Errorf("job launcher: the runner image is required")
	}
	if opts.ImagePullPolicy == "" {
		opts.ImagePullPolicy = corev1.PullIfNotPresent
	}
	if opts.RunAsUser == 0 {
		opts.RunAsUser = 65532
	}
	pods, err := corev1client.NewForConfig(c.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("job launcher: %w", err)
	}
	return &JobLauncher{client: c.GetClient(), reader: c.GetAPIReader(), pods: pods, cache: c, opts: opts}, nil
}

// Sources wake the Workspace controller when one of its Jobs or their Pods change.
func (l *JobLauncher) Sources() []source.Source {
	owner := handler.EnqueueRequestForOwner(l.cache.GetScheme(), l.cache.GetRESTMapper(), &magosv1.Workspace{}, handler.OnlyControllerOwner())
	byLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		ws := o.GetLabels()[keys.Workspace]
		if ws == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ws}}}
	})
	return []source.Source{
		source.Kind(l.cache.GetCache(), client.Object(&batchv1.Job{}), owner),
		source.Kind(l.cache.GetCache(), client.Object(&corev1.Pod{}), byLabel),
	}
}

// Start creates the Workspace's data volume (if missing; a verify run mounts none), the Secret
// of the run's sensitive values (when it has any) and then the run's Job (if missing): the Job
// is never created before the Secret it reads. A verify run without its check is an error.
func (l *JobLauncher) Start(ctx context.Context, run *Run) error {
	job, secret, err := l.build(run)
	if err != nil {
		return err
	}
	if run.Spec.Operation != runner.OperationVerify {
		if err := l.ensureClaim(ctx, run.Workspace); err != nil {
			return err
		}
	}
	// A Job whose ServiceAccount is missing never gets a Pod and would sit until its deadline
	// (upstream's bug): refuse to start it, saying what to create.
	sa := &corev1.ServiceAccount{}
	saName := job.Spec.Template.Spec.ServiceAccountName
	if err := l.reader.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: saName}, sa); err != nil {
		if apierrors.IsNotFound(err) {
			return &variables.ConfigError{Message: fmt.Sprintf("ServiceAccount %q not found in namespace %s: create it (runs use spec.serviceAccountName, default %s)",
				saName, job.Namespace, magosv1.DefaultServiceAccountName)}
		}
		return fmt.Errorf("reading ServiceAccount %s/%s: %w", job.Namespace, saName, err)
	}
	if secret != nil {
		if err := l.ensureSecret(ctx, run.Workspace, secret); err != nil {
			return err
		}
	}
	if err := l.client.Create(ctx, job); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return fmt.Errorf("creating Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	l.created.Store(client.ObjectKeyFromObject(job), time.Now())
	log.FromContext(ctx).Info("created run Job", "job", job.Name, "operation", run.Spec.Operation, "runID", run.Spec.RunID)
	return nil
}

func (l *JobLauncher) ensureClaim(ctx context.Context, ws *magosv1.Workspace) error {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: DataClaimName(ws.Name), Namespace: ws.Namespace,
			Labels: map[string]string{keys.Workspace: ws.Name},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse(DataVolumeSize),
			}},
		},
	}
	if l.opts.StorageClassName != "" {
		pvc.Spec.StorageClassName = ptr.To(l.opts.StorageClassName)
	}
	if err := controllerutil.SetControllerReference(ws, pvc, l.cache.GetScheme()); err != nil {
		return fmt.Errorf("owning data volume: %w", err)
	}
	if err := l.client.Create(ctx, pvc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating data volume %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return nil
}

// ensureSecret creates the run's Secret of sensitive values, or replaces one left by an earlier
// attempt of the same run (the agent stopped between the Secret and the Job) whose values
// differ. A Secret of that name the Workspace does not control is never used: the run fails,
// saying so. It needs the rights to create and delete Secrets, not to update them.
func (l *JobLauncher) ensureSecret(ctx context.Context, ws *magosv1.Workspace, secret *corev1.Secret) error {
	err := l.client.Create(ctx, secret)
	switch {
	case err == nil:
		return nil
	case !apierrors.IsAlreadyExists(err):
		return fmt.Errorf("creating Secret %s/%s for the sensitive values of the run: %w", secret.Namespace, secret.Name, err)
	}
	// Secrets are not cached by the agent: read the API server.
	cur := &corev1.Secret{}
	if err := l.reader.Get(ctx, client.ObjectKeyFromObject(secret), cur); err != nil {
		return fmt.Errorf("reading Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	if !metav1.IsControlledBy(cur, ws) {
		return &variables.ConfigError{Message: fmt.Sprintf("Secret %q in namespace %s, where the run keeps its sensitive values, exists and is not controlled by Workspace %s: delete it",
			cur.Name, cur.Namespace, ws.Name)}
	}
	if maps.EqualFunc(cur.Data, secret.Data, bytes.Equal) {
		return nil
	}
	if err := l.client.Delete(ctx, cur, client.Preconditions{UID: &cur.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("replacing Secret %s/%s: %w", cur.Namespace, cur.Name, err)
	}
	if err := l.client.Create(ctx, secret); err != nil {
		return fmt.Errorf("creating Secret %s/%s for the sensitive values of the run: %w", secret.Namespace, secret.Name, err)
	}
	return nil
}

// EnvSecretName is the Secret that holds the sensitive literal values of the Job of an
// operation: it has the Job's name.
func EnvSecretName(workspace string, op runner.Operation, runID string) string {
	return JobName(workspace, op, runID)
}

// Job builds the Job of a run (exported for tests and tools that show what would run).
//
// The sensitive literals of the run's environment (Run.Sensitive) are not in it: each is an
// env entry with a secretKeyRef to the key of its name in the run's Secret (see Secret), so
// the values never appear in the Job or its Pods. The runner sees the same environment.
//
// Kubernetes never runs the operation twice: the Job has backoffLimit 0, podReplacementPolicy
// Failed and a pod failure policy that fails it when its Pod is disrupted, so its one Pod is
// never replaced, and the Job fails (BackoffLimitExceeded or PodFailurePolicy) only once that
// Pod has stopped. A deleted or evicted runner Pod gets terminationGracePeriodSeconds of
// runner.InterruptGrace plus TerminationMargin: the runner interrupts the tool, which persists
// its state and releases its lock, and writes its result. The agent never starts an apply again
// either (see the Workspace controller): the next attempt is a new run that plans afresh.
//
// The runner's root file system is read-only (non-root, no privilege escalation, all
// capabilities dropped): it writes only to /tmp, an emptyDir that is also HOME and TMPDIR, and
// to DataMountPath, the Workspace's data volume. The runner checks the module out into a folder
// of its own under /tmp and points tofu's data folder there too (TF_DATA_DIR, which the runner
// sets and a VariableSet cannot override): the providers and modules init downloads, the
// backend settings, next to the module's dependency lock file. The runner removes that folder
// when the run ends, and the emptyDir goes with the Pod. Only the saved plan (<run ID>.tfplan)
// is kept on the data volume, from the plan to the apply. No provider cache is kept between
// runs (TF_PLUGIN_CACHE_DIR is not set): each Pod runs init once, so a cache in the emptyDir
// would save nothing, and one on the data volume would grow with every provider version (large
// providers take hundreds of megabytes each) until it filled the volume (DataVolumeSize) the
// saved plans need. Proof: TestRunWritesOnlyToTmpAndTheDataVolume in pkg/runner runs a plan
// and an apply with only those two folders writable.
//
// A verify run's Job (runner.OperationVerify) runs the user's check in place of the runner: one
// container, CheckContainerName, of Run.Check's image, command (the image's entrypoint when
// empty) and arguments, with Run.Env as its whole environment (sensitive literals through the
// run's Secret, as above) and the runner's resources. It has no run spec, no data volume and no
// provider mirror; it keeps the runner's security context (non-root, no privilege, read-only
// root file system with an emptyDir at /tmp) and the Kubernetes default grace period. Its
// activeDeadlineSeconds is the check's timeout (Run.Timeout). A verify run without its check is
// an error.
func (l *JobLauncher) Job(run *Run) (*batchv1.Job, error) {
	job, _, err := l.build(run)
	return job, err
}

// Secret builds the Secret that holds the sensitive literal values of a run's environment
// (nil when it has none): named EnvSecretName, labelled with the Workspace, operation and run
// ID like the Job, controlled by the Workspace (it goes with it, and Prune deletes those of
// other runs). Start creates it before the Job that reads it.
func (l *JobLauncher) Secret(run *Run) (*corev1.Secret, error) {
	_, secret, err := l.build(run)
	return secret, err
}

// build builds the Job of a run and the Secret of its sensitive values (nil when none). A
// verify run's Job runs the check (see checkContainer) and the rest is the runner's: name,
// labels, ownership, ServiceAccount, Pod annotations, the Secret of sensitive values, and one
// Pod that is never replaced.
func (l *JobLauncher) build(run *Run) (*batchv1.Job, *corev1.Secret, error) {
	if err := validate(run); err != nil {
		return nil, nil, err
	}
	ws := run.Workspace
	spec := run.Spec
	verify := spec.Operation == runner.OperationVerify
	timeout := timeoutOf(run)
	labels := map[string]string{
		keys.Workspace: ws.Name,
		keys.JobType:   string(spec.Operation),
		keys.RunID:     spec.RunID,
	}
	// The runner's own entries come last and no user entry has their names, so nothing a
	// VariableSet holds (one stored under an older CRD included) can replace them. A check has
	// none: its environment is the run's.
	var own []corev1.EnvVar
	if !verify {
		spec.PlanFile = path.Join(DataMountPath, spec.RunID+".tfplan")
		if spec.Backend.Kubernetes == nil && spec.Backend.LocalPath == "" {
			spec.Backend.Kubernetes = &runner.KubernetesBackend{Namespace: ws.Namespace, SecretSuffix: ws.Name}
		}
		raw, err := json.Marshal(spec)
		if err != nil {
			return nil, nil, fmt.Errorf("encoding run spec: %w", err)
		}
		own = []corev1.EnvVar{
			{Name: runner.EnvSpec, Value: string(raw)},
			{Name: "HOME", Value: "/tmp"},
			{Name: "TMPDIR", Value: "/tmp"},
			// Kubernetes providers that read it (gavinbunney/kubectl) use the Pod's
			// ServiceAccount (in-cluster configuration) unless the module configures them.
			{Name: runner.EnvKubeLoadConfigFile, Value: "false"},
		}
		if l.opts.ProviderVolume != nil {
			own = append(own, corev1.EnvVar{Name: runner.EnvProviderMirror, Value: ProviderMirrorMountPath + ":" + runner.ImageProviderMirror})
		}
		if l.opts.ProviderNetworkMirror != "" {
			own = append(own, corev1.EnvVar{Name: runner.EnvProviderNetworkMirror, Value: l.opts.ProviderNetworkMirror})
		}
	}
	name := JobName(ws.Name, spec.Operation, spec.RunID)
	var secret *corev1.Secret
	env := make([]corev1.EnvVar, 0, len(run.Env)+len(own))
	for _, e := range run.Env {
		if slices.ContainsFunc(own, func(o corev1.EnvVar) bool { return o.Name == e.Name }) {
			continue
		}
		if e.ValueFrom == nil && slices.Contains(run.Sensitive, e.Name) {
			if secret == nil {
				secret = &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: EnvSecretName(ws.Name, spec.Operation, spec.RunID), Namespace: ws.Namespace, Labels: maps.Clone(labels)},
					Type:       corev1.SecretTypeOpaque,
					Data:       map[string][]byte{},
				}
			}
			secret.Data[e.Name] = []byte(e.Value)
			e = corev1.EnvVar{Name: e.Name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: secret.Name}, Key: e.Name,
			}}}
		}
		env = append(env, e)
	}
	env = append(env, own...)
	sa := run.ServiceAccountName
	if sa == "" {
		sa = magosv1.DefaultServiceAccountName
	}
	// Non-root, no privilege escalation, no capabilities, a read-only root file system: the
	// runner's, and a check's too (it may write to /tmp).
	containerSecurity := &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Privileged:               ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	tmp := corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	pod := corev1.PodSpec{
		RestartPolicy:      corev1.RestartPolicyNever,
		ServiceAccountName: sa,
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To(l.opts.RunAsUser),
			RunAsGroup:     ptr.To(l.opts.RunAsUser),
			FSGroup:        ptr.To(l.opts.RunAsUser),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
	if verify {
		pod.Containers = []corev1.Container{{
			Name:            CheckContainerName,
			Image:           run.Check.Image,
			Command:         slices.Clone(run.Check.Command),
			Args:            slices.Clone(run.Check.Args),
			Env:             env,
			Resources:       l.opts.Resources,
			SecurityContext: containerSecurity,
			VolumeMounts:    []corev1.VolumeMount{{Name: tmp.Name, MountPath: "/tmp"}},
		}}
		pod.Volumes = []corev1.Volume{tmp}
	} else {
		// A stopped runner interrupts the tool and gives it runner.InterruptGrace to persist
		// its state and release its lock, then writes its result: the Pod waits that long and
		// a little more before it is killed.
		pod.TerminationGracePeriodSeconds = ptr.To(int64((runner.InterruptGrace + TerminationMargin).Seconds()))
		pod.Containers = []corev1.Container{{
			Name:                     ContainerName,
			Image:                    l.opts.Image,
			ImagePullPolicy:          l.opts.ImagePullPolicy,
			Command:                  []string{"magos-agent", "runner"},
			Env:                      env,
			Resources:                l.opts.Resources,
			SecurityContext:          containerSecurity,
			TerminationMessagePath:   runner.DefaultResultFile,
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			VolumeMounts: []corev1.VolumeMount{
				{Name: "workspace-data", MountPath: DataMountPath},
				{Name: tmp.Name, MountPath: "/tmp"},
			},
		}}
		pod.Volumes = []corev1.Volume{
			{Name: "workspace-data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: DataClaimName(ws.Name)}}},
			tmp,
		}
		if l.opts.ProviderVolume != nil {
			pod.Volumes = append(pod.Volumes, corev1.Volume{Name: providerVolumeName, VolumeSource: *l.opts.ProviderVolume.DeepCopy()})
			pod.Containers[0].VolumeMounts = append(pod.Containers[0].VolumeMounts,
				corev1.VolumeMount{Name: providerVolumeName, MountPath: ProviderMirrorMountPath, ReadOnly: true})
		}
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: ws.Namespace,
			Labels:    labels,
		},
		Spec: batchv1.JobSpec{
			// One Pod per Job, never a second: no retry (backoffLimit 0), and a Pod being
			// deleted counts only once it has stopped (podReplacementPolicy Failed), so a
			// killed apply is never run again by Kubernetes, nor reported over while its
			// runner still stops.
			BackoffLimit:         ptr.To[int32](0),
			PodReplacementPolicy: ptr.To(batchv1.Failed),
			// A disrupted Pod (eviction, preemption, a node going away) fails the Job at once,
			// with reason PodFailurePolicy; never Ignore, which would start a replacement.
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:          batchv1.PodFailurePolicyActionFailJob,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
			}}},
			ActiveDeadlineSeconds: ptr.To(int64(timeout.Seconds())),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels), Annotations: maps.Clone(run.PodAnnotations)},
				Spec:       pod,
			},
		},
	}
	if err := controllerutil.SetControllerReference(ws, job, l.cache.GetScheme()); err != nil {
		return nil, nil, fmt.Errorf("owning Job: %w", err)
	}
	if secret != nil {
		if err := controllerutil.SetControllerReference(ws, secret, l.cache.GetScheme()); err != nil {
			return nil, nil, fmt.Errorf("owning Secret: %w", err)
		}
	}
	return job, secret, nil
}

// Status reads the Job's conditions and, once it finished, the result from the termination
// message of its Pod's runner container.
//
// Only the runner's own result says a run succeeded. A Job that ended without a usable result
// is a Failed run, and its message says how the Job ended, from what the Job controller and
// the kubelet report (checked in this order):
//
//   - the runner container terminated with reason OOMKilled: the runner was OOM-killed, raise
//     the runner memory limit;
//   - the Job failed with reason DeadlineExceeded (its activeDeadlineSeconds passed): the run
//     exceeded its timeout (spec.plan.timeoutSeconds, or spec.apply.timeoutSeconds for apply
//     and destroy);
//   - the Job failed and its Pod is gone, was deleted (deletionTimestamp), was disrupted (a
//     DisruptionTarget condition; the Job's pod failure policy fails the Job on it, reason
//     PodFailurePolicy) or evicted (phase Failed, reason Evicted), or the runner was killed by
//     a signal (exit code 137 or 143) without writing a result: the Pod was deleted or evicted
//     before the run ended;
//   - otherwise the Job's reason and message, and how the runner container ended.
//
// A runner stopped by its Pod's deletion or deadline is interrupted first (SIGTERM) and
// usually writes a Failed result saying the tool was interrupted: that result's message then
// starts with the sentence saying why the runner was stopped.
//
// A verify run's check writes no result: its Result is derived from how its Job and its check
// container ended (see checkStatus).
func (l *JobLauncher) Status(ctx context.Context, ref Ref) (Status, error) {
	job := &batchv1.Job{}
	key := client.ObjectKey{Namespace: ref.Namespace, Name: JobName(ref.Name, ref.Operation, ref.RunID)}
	err := l.client.Get(ctx, key, job)
	if apierrors.IsNotFound(err) {
		if at, ok := l.created.Load(key); ok && time.Since(at.(time.Time)) < time.Minute {
			err = l.reader.Get(ctx, key, job) // just created: the cache may not have it yet
		}
	} else if err == nil {
		l.created.Delete(key)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return Status{State: StateNotFound}, nil
		}
		return Status{}, fmt.Errorf("reading Job %s: %w", key, err)
	}
	if job.Labels[keys.RunID] != ref.RunID {
		// A Job of the same name for another run (a hash collision): never report it.
		return Status{State: StateNotFound}, nil
	}
	st := Status{State: StateRunning}
	if job.Status.StartTime != nil {
		st.StartedAt = job.Status.StartTime.Time
	} else {
		st.StartedAt = job.CreationTimestamp.Time
	}
	var done *batchv1.JobCondition
	for i := range job.Status.Conditions {
		c := &job.Status.Conditions[i]
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			done = c
			break
		}
	}
	if done == nil {
		return st, nil
	}
	st.State = StateFinished
	st.FinishedAt = done.LastTransitionTime.Time
	if job.Status.CompletionTime != nil {
		st.FinishedAt = job.Status.CompletionTime.Time
	}
	if ref.Operation == runner.OperationVerify {
		return l.checkStatus(ctx, job, done, st)
	}
	pod, term, err := l.jobPod(ctx, job, ContainerName)
	if err != nil {
		return Status{}, err
	}
	stopped := stopCause(job, done, pod, term, ref.Operation)
	st.Result = runner.Result{Operation: ref.Operation, RunID: ref.RunID, Outcome: runner.OutcomeFailed}
	var unusable string // why the termination message cannot be the run's result
	switch {
	case pod == nil:
		unusable = "its Pod is gone"
	case term == nil:
		unusable = "its runner container did not terminate"
	case term.Message == "":
		unusable = fmt.Sprintf("the runner exited with code %d (%s) without writing a result", term.ExitCode, message.Or(term.Reason, "no reason"))
	default:
		res, err := runner.DecodeResult([]byte(term.Message))
		switch {
		case err != nil:
			unusable = "its termination message is not a run result: " + err.Error()
		case res.RunID != ref.RunID || res.Operation != ref.Operation:
			unusable = fmt.Sprintf("its termination message is the result of the %s of run %s", res.Operation, res.RunID)
		default:
			if res.Outcome == runner.OutcomeFailed && stopped != "" {
				res.Message = stopped + "; the runner's result: " + message.Or(res.Message, "none")
			}
			st.Result = res
			return st, nil
		}
	}
	// Only the runner's own result says a run succeeded: a Job that completed without one is a
	// Failed run (a wrong image or entrypoint, a missing volume), never a success.
	switch {
	case done.Type == batchv1.JobComplete:
		st.Result.Message = fmt.Sprintf("Job %s completed but left no result (%s); the run is counted Failed", job.Name, unusable)
	case stopped != "":
		st.Result.Message = fmt.Sprintf("%s (Job %s failed: %s: %s; no result: %s)", stopped, job.Name, done.Reason, done.Message, unusable)
	default:
		st.Result.Message = fmt.Sprintf("Job %s failed (%s): %s; no result (%s)", job.Name, done.Reason, done.Message, unusable)
	}
	log.FromContext(ctx).Info("run ended without a usable result", "job", job.Name, "reason", unusable, "jobReason", done.Reason)
	return st, nil
}

// checkStatus completes the Status of a verify run's finished Job from how its check ended,
// since the check writes no result: Succeeded when the Job completed; otherwise Failed, saying
// (checked in this order)
//
//   - "the check did not finish within <timeout>" when the Job failed with reason
//     DeadlineExceeded (its activeDeadlineSeconds, the check's timeout, passed);
//   - "the check exited with code N" when the Pod is there and its check container
//     terminated with a non-zero code (and OOMKilled when the kernel killed it at its memory
//     limit), unless the Pod was evicted or deleted and the code is a kill's (137 or 143);
//   - that the check's Pod was evicted or deleted before the check ended;
//   - otherwise how the Job failed, and that the check's exit code is unknown.
func (l *JobLauncher) checkStatus(ctx context.Context, job *batchv1.Job, done *batchv1.JobCondition, st Status) (Status, error) {
	st.Result = runner.Result{Operation: runner.OperationVerify, RunID: job.Labels[keys.RunID], Outcome: runner.OutcomeSucceeded}
	if done.Type == batchv1.JobComplete {
		return st, nil
	}
	st.Result.Outcome = runner.OutcomeFailed
	if done.Reason == batchv1.JobReasonDeadlineExceeded {
		if s := job.Spec.ActiveDeadlineSeconds; s != nil {
			st.Result.Message = checkTimedOut(time.Duration(*s) * time.Second)
		} else {
			st.Result.Message = "the check did not finish within its timeout"
		}
		return st, nil
	}
	pod, term, err := l.jobPod(ctx, job, CheckContainerName)
	if err != nil {
		return Status{}, err
	}
	stopped := done.Reason == batchv1.JobReasonPodFailurePolicy ||
		pod != nil && (disruption(pod) != nil || pod.Status.Reason == ReasonEvicted || pod.DeletionTimestamp != nil)
	killed := term != nil && (term.ExitCode == 128+9 || term.ExitCode == 128+15)
	jobFailed := fmt.Sprintf("Job %s failed (%s: %s)", job.Name, message.Or(done.Reason, "no reason"), message.Or(done.Message, "no message"))
	switch {
	case term != nil && term.ExitCode != 0 && !(stopped && killed):
		st.Result.Message = checkExited(int(term.ExitCode))
		if term.Reason == ReasonOOMKilled {
			st.Result.Message += " (OOMKilled at its memory limit: a check has the runner's resources, the agent's --runner-memory-limit)"
		}
	case stopped:
		st.Result.Message = "the check's Pod was evicted or deleted before the check ended: " + jobFailed
	case pod == nil:
		st.Result.Message = "the check failed and its exit code is unknown: " + jobFailed + " and its Pod is gone"
	case term == nil:
		st.Result.Message = "the check failed and its exit code is unknown: " + jobFailed + " and its check container did not terminate"
	default:
		st.Result.Message = "the check exited with code 0, yet " + jobFailed
	}
	return st, nil
}

// stopCause says why the runner of a finished Job was stopped before it could end the run by
// itself, when the Job, its Pod or the runner container say so; "" otherwise (see Status).
func stopCause(job *batchv1.Job, done *batchv1.JobCondition, pod *corev1.Pod, term *corev1.ContainerStateTerminated, op runner.Operation) string {
	if term != nil && term.Reason == ReasonOOMKilled {
		how := "without a memory limit, when its node ran out of memory: give the runner a memory request and limit that fit the run " +
			"(the agent's --runner-memory-request and --runner-memory-limit; chart value runner.resources)"
		if q := runnerMemoryLimit(pod); q != nil {
			how = "at its memory limit of " + q.String() + ": raise the runner memory limit " +
				"(the agent's --runner-memory-limit; chart value runner.resources.limits.memory)"
		}
		return fmt.Sprintf("The runner was OOM-killed (exit code %d) %s", term.ExitCode, how)
	}
	if done.Type != batchv1.JobFailed {
		return ""
	}
	if done.Reason == batchv1.JobReasonDeadlineExceeded {
		field := "spec.apply.timeoutSeconds"
		if op == runner.OperationPlan {
			field = "spec.plan.timeoutSeconds"
		}
		timeout := "its timeout"
		if s := job.Spec.ActiveDeadlineSeconds; s != nil {
			timeout += " of " + (time.Duration(*s) * time.Second).String()
		}
		return fmt.Sprintf("The run exceeded %s (%s, default %d) and was stopped", timeout, field, int64(DefaultTimeout.Seconds()))
	}
	switch {
	case pod == nil:
		return "The runner Pod is gone: it was deleted or evicted before the run ended"
	case disruption(pod) != nil:
		c := disruption(pod)
		return fmt.Sprintf("The runner Pod was evicted or deleted before the run ended (%s: %s)", c.Reason, c.Message)
	case pod.Status.Reason == ReasonEvicted:
		return fmt.Sprintf("The runner Pod was evicted before the run ended (%s)", pod.Status.Message)
	case pod.DeletionTimestamp != nil:
		return "The runner Pod was deleted before the run ended"
	case done.Reason == batchv1.JobReasonPodFailurePolicy:
		return fmt.Sprintf("The runner Pod was evicted or deleted before the run ended (%s)", done.Message)
	case term != nil && term.Message == "" && (term.ExitCode == 128+9 || term.ExitCode == 128+15):
		return fmt.Sprintf("The runner was killed (exit code %d, %s) before it wrote a result: its Pod was deleted or evicted, or its node stopped it", term.ExitCode, message.Or(term.Reason, "no reason"))
	}
	return ""
}

// Reasons the kubelet writes on a Pod or a container status.
const (
	// ReasonOOMKilled is the reason of a container the kernel killed at its memory limit.
	ReasonOOMKilled = "OOMKilled"
	// ReasonEvicted is the reason of a Pod the kubelet evicted (node pressure).
	ReasonEvicted = "Evicted"
)

// disruption returns the Pod's DisruptionTarget condition when it is True: the Pod is being
// deleted by a disruption (preemption, eviction, taint, the kubelet), or nil.
func disruption(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if c := &pod.Status.Conditions[i]; c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// runnerMemoryLimit returns the memory limit of the Pod's runner container, or nil.
func runnerMemoryLimit(pod *corev1.Pod) *resource.Quantity {
	if pod == nil {
		return nil
	}
	for _, c := range pod.Spec.Containers {
		if q, ok := c.Resources.Limits[corev1.ResourceMemory]; c.Name == ContainerName && ok {
			return &q
		}
	}
	return nil
}

// jobPod returns the Job's Pod and the terminated state of its container of that name (the
// runner's, or a verify run's check): the newest Pod whose container terminated, else the
// newest Pod (term nil), else nothing (the Pod is gone). A Pod missing from the cache is looked
// up on the API server before giving up.
func (l *JobLauncher) jobPod(ctx context.Context, job *batchv1.Job, container string) (pod *corev1.Pod, term *corev1.ContainerStateTerminated, err error) {
	for _, r := range []client.Reader{l.client, l.reader} {
		pods := &corev1.PodList{}
		if err := r.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{JobNameLabel: job.Name}); err != nil {
			return nil, nil, fmt.Errorf("listing Pods of Job %s/%s: %w", job.Namespace, job.Name, err)
		}
		// Newest first: with backoffLimit 0 there is one, but be deterministic anyway.
		sort.Slice(pods.Items, func(i, j int) bool {
			return pods.Items[j].CreationTimestamp.Before(&pods.Items[i].CreationTimestamp)
		})
		for i := range pods.Items {
			p := &pods.Items[i]
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name == container && cs.State.Terminated != nil {
					return p, cs.State.Terminated, nil
				}
			}
		}
		if pod == nil && len(pods.Items) > 0 {
			pod = &pods.Items[0]
		}
	}
	return pod, nil, nil
}

// Output streams the log of the runner container of the run's Job (the check container of a
// verify run's), through the API server (which reads it from the kubelet).
func (l *JobLauncher) Output(ctx context.Context, ref Ref) (io.ReadCloser, error) {
	job := &batchv1.Job{}
	key := client.ObjectKey{Namespace: ref.Namespace, Name: JobName(ref.Name, ref.Operation, ref.RunID)}
	if err := l.client.Get(ctx, key, job); err != nil {
		return nil, fmt.Errorf("reading Job %s: %w", key, err)
	}
	if job.Labels[keys.RunID] != ref.RunID {
		return nil, fmt.Errorf("job %s belongs to run %s, not %s", key, job.Labels[keys.RunID], ref.RunID)
	}
	container := ContainerName
	if ref.Operation == runner.OperationVerify {
		container = CheckContainerName
	}
	pod, _, err := l.jobPod(ctx, job, container)
	if err != nil {
		return nil, err
	}
	if pod == nil {
		return nil, fmt.Errorf("job %s has no Pod left to read the log of", key)
	}
	rc, err := l.pods.Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container}).Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the log of Pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return rc, nil
}

// Prune deletes the Workspace's Jobs of other runs (their Pods go with them) and the Secrets of
// their sensitive values.
func (l *JobLauncher) Prune(ctx context.Context, ws *magosv1.Workspace, keepRunID string) error {
	jobs := &batchv1.JobList{}
	if err := l.client.List(ctx, jobs, client.InNamespace(ws.Namespace), client.MatchingLabels{keys.Workspace: ws.Name}); err != nil {
		return fmt.Errorf("listing Jobs of %s/%s: %w", ws.Namespace, ws.Name, err)
	}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if j.Labels[keys.RunID] == keepRunID || !metav1.IsControlledBy(j, ws) || j.DeletionTimestamp != nil {
			continue
		}
		if err := l.client.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting old Job %s/%s: %w", j.Namespace, j.Name, err)
		}
	}
	// The Secrets of sensitive values of other runs (Secrets are not cached: read the API
	// server).
	secrets := &corev1.SecretList{}
	if err := l.reader.List(ctx, secrets, client.InNamespace(ws.Namespace), client.MatchingLabels{keys.Workspace: ws.Name}, client.HasLabels{keys.RunID}); err != nil {
		return fmt.Errorf("listing the run Secrets of %s/%s: %w", ws.Namespace, ws.Name, err)
	}
	for i := range secrets.Items {
		s := &secrets.Items[i]
		// Output Secrets (the run history's) are the Workspace controller's to prune, and never
		// controlled by the Workspace; the type says so too.
		if s.Labels[keys.RunID] == keepRunID || !metav1.IsControlledBy(s, ws) || s.DeletionTimestamp != nil || s.Type == runoutput.SecretType {
			continue
		}
		if err := l.client.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting old Secret %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	return nil
}

// Forget does nothing: the Workspace's Jobs, Secrets and data volume are owned by it and go
// with it.
func (l *JobLauncher) Forget(context.Context, string, string) error { return nil }
