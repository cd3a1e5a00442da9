package execution_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/magosfleet/magos/agent/app"
	"github.com/magosfleet/magos/agent/execution"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/testenv"
)

// jobEnd is how a Job ends in a TestJobStatus case: what the Job controller and the kubelet
// would have written. envtest has neither, so every status here is simulated: the test writes
// the Job's conditions and its Pod's status as a real cluster would.
type jobEnd struct {
	// complete ends the Job Complete; otherwise Failed with reason and message.
	complete        bool
	reason, message string
	// noPod: the Pod is gone.
	noPod bool
	// pod, when set, changes the Pod before its status is written; podStatus is its status.
	pod       func(*corev1.Pod)
	podStatus corev1.PodStatus
	// deleted deletes the Pod (it stays, terminating, held by a finalizer as the Job
	// controller's tracking finalizer holds it).
	deleted bool
}

// terminated is a Pod status whose runner container terminated.
func terminated(phase corev1.PodPhase, exit int32, reason, message string) corev1.PodStatus {
	now := metav1.Now()
	return corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
		Name: execution.ContainerName, Image: "runner", ImageID: "runner",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exit, Reason: reason, Message: message, StartedAt: now, FinishedAt: now,
		}},
	}}}
}

// TestJobStatus checks what Status reports for the ways a run's Job ends on a real cluster,
// with the Job controller's and the kubelet's statuses simulated on an API server (there is
// no kubelet here: a real-node test covers the real thing).
func TestJobStatus(t *testing.T) {
	t.Parallel()
	const ns = "status"
	c, launcher, ws := startLauncher(t, localcluster.Options{NoHub: true, Spokes: []string{ns}}, ns)
	ctx := context.Background()

	interrupted := func(op runner.Operation, runID string) string {
		msg, err := (&runner.Result{Operation: op, RunID: runID, Outcome: runner.OutcomeFailed,
			Message: "tofu " + string(op) + " failed: Interrupt received. Stopping operation..."}).Encode()
		if err != nil {
			t.Fatal(err)
		}
		return string(msg)
	}
	failedResult := func(op runner.Operation, runID string) string {
		msg, err := (&runner.Result{Operation: op, RunID: runID, Outcome: runner.OutcomeFailed, Message: "tofu apply failed: boom"}).Encode()
		if err != nil {
			t.Fatal(err)
		}
		return string(msg)
	}

	cases := []struct {
		name string
		op   runner.Operation
		// end is how the Job ends, given its run ID.
		end func(runID string) jobEnd
		// want are in the run's message, and none of not.
		want, not []string
		// exact, when set, is the whole message.
		exact string
	}{{
		name: "simulated deadline: the Job controller stopped the plan at its activeDeadlineSeconds",
		op:   runner.OperationPlan,
		end: func(string) jobEnd {
			return jobEnd{reason: batchv1.JobReasonDeadlineExceeded, message: "Job was active longer than specified deadline", noPod: true}
		},
		want: []string{"The run exceeded its timeout of 10m0s (spec.plan.timeoutSeconds, default 86400) and was stopped",
			"DeadlineExceeded: Job was active longer than specified deadline", "its Pod is gone"},
		not: []string{"deleted", "evicted"},
	}, {
		name: "simulated deadline: the apply was interrupted and wrote its failed result",
		op:   runner.OperationApply,
		end: func(runID string) jobEnd {
			return jobEnd{reason: batchv1.JobReasonDeadlineExceeded, message: "Job was active longer than specified deadline", deleted: true,
				podStatus: terminated(corev1.PodFailed, 1, "Error", interrupted(runner.OperationApply, runID))}
		},
		want: []string{"The run exceeded its timeout of 10m0s (spec.apply.timeoutSeconds, default 86400) and was stopped",
			"the runner's result: tofu apply failed: Interrupt received"},
		not: []string{"deleted", "evicted"},
	}, {
		name: "simulated OOM kill: the runner container terminated OOMKilled, exit 137",
		op:   runner.OperationApply,
		end: func(string) jobEnd {
			return jobEnd{reason: batchv1.JobReasonBackoffLimitExceeded, message: "Job has reached the specified backoff limit",
				podStatus: terminated(corev1.PodFailed, 137, "OOMKilled", "")}
		},
		want: []string{"The runner was OOM-killed (exit code 137) at its memory limit of 1Gi: raise the runner memory limit (the agent's --runner-memory-limit",
			"BackoffLimitExceeded"},
		not: []string{"deleted", "timeout"},
	}, {
		name: "simulated OOM kill without a memory limit",
		op:   runner.OperationPlan,
		end: func(string) jobEnd {
			return jobEnd{reason: batchv1.JobReasonBackoffLimitExceeded, message: "Job has reached the specified backoff limit",
				pod:       func(p *corev1.Pod) { p.Spec.Containers[0].Resources = corev1.ResourceRequirements{} },
				podStatus: terminated(corev1.PodFailed, 137, "OOMKilled", "")}
		},
		want: []string{"The runner was OOM-killed (exit code 137) without a memory limit"},
	}, {
		name: "simulated Pod deletion: the Pod is gone and the Job failed (BackoffLimitExceeded)",
		op:   runner.OperationApply,
		end: func(string) jobEnd {
			return jobEnd{reason: batchv1.JobReasonBackoffLimitExceeded, message: "Job has reached the specified backoff limit", noPod: true}
		},
		want: []string{"The runner Pod is gone: it was deleted or evicted before the run ended", "its Pod is gone"},
		not:  []string{"timeout", "OOM"},
	}, {
		name: "simulated Pod deletion: the Pod is terminating, the runner killed without a result",
		op:   runner.OperationApply,
		end: func(string) jobEnd {
			return jobEnd{reason: batchv1.JobReasonBackoffLimitExceeded, message: "Job has reached the specified backoff limit", deleted: true,
				podStatus: terminated(corev1.PodFailed, 137, "Error", "")}
		},
		want: []string{"The runner Pod was deleted before the run ended", "the runner exited with code 137 (Error) without writing a result"},
		not:  []string{"timeout", "OOM"},
	}, {
		name: "simulated Pod deletion: the interrupted runner wrote its failed result",
		op:   runner.OperationApply,
		end: func(runID string) jobEnd {
			return jobEnd{reason: batchv1.JobReasonBackoffLimitExceeded, message: "Job has reached the specified backoff limit", deleted: true,
				podStatus: terminated(corev1.PodFailed, 1, "Error", interrupted(runner.OperationApply, runID))}
		},
		want: []string{"The runner Pod was deleted before the run ended; the runner's result: tofu apply failed: Interrupt received"},
	}, {
		name: "simulated kubelet eviction: DisruptionTarget, the Job's pod failure policy failed it",
		op:   runner.OperationPlan,
		end: func(string) jobEnd {
			st := terminated(corev1.PodFailed, 137, "Error", "")
			st.Reason, st.Message = "Evicted", "The node was low on resource: memory."
			st.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: "TerminationByKubelet", Message: "The node was low on resource: memory."}}
			return jobEnd{reason: batchv1.JobReasonPodFailurePolicy,
				message: "Pod status/x has condition DisruptionTarget matching FailJob rule at index 0", podStatus: st}
		},
		want: []string{"The runner Pod was evicted or deleted before the run ended (TerminationByKubelet: The node was low on resource: memory.)"},
		not:  []string{"timeout", "OOM"},
	}, {
		name: "simulated kill: the runner killed by a signal, no deletion seen",
		op:   runner.OperationApply,
		end: func(string) jobEnd {
			return jobEnd{reason: batchv1.JobReasonBackoffLimitExceeded, message: "Job has reached the specified backoff limit",
				podStatus: terminated(corev1.PodFailed, 137, "Error", "")}
		},
		want: []string{"The runner was killed (exit code 137, Error) before it wrote a result: its Pod was deleted or evicted"},
	}, {
		name: "a runner that crashed without a result is not called deleted",
		op:   runner.OperationPlan,
		end: func(string) jobEnd {
			return jobEnd{reason: batchv1.JobReasonBackoffLimitExceeded, message: "Job has reached the specified backoff limit",
				podStatus: terminated(corev1.PodFailed, 2, "Error", "")}
		},
		want: []string{"failed (BackoffLimitExceeded): Job has reached the specified backoff limit; no result (the runner exited with code 2 (Error) without writing a result)"},
		not:  []string{"deleted", "evicted", "OOM", "timeout"},
	}, {
		name: "a failed result of a runner nobody stopped is the run's message",
		op:   runner.OperationApply,
		end: func(runID string) jobEnd {
			return jobEnd{reason: batchv1.JobReasonBackoffLimitExceeded, message: "Job has reached the specified backoff limit",
				podStatus: terminated(corev1.PodFailed, 1, "Error", failedResult(runner.OperationApply, runID))}
		},
		exact: "tofu apply failed: boom",
	}, {
		name: "a Job that completed without a result is a failed run",
		op:   runner.OperationPlan,
		end: func(string) jobEnd {
			return jobEnd{complete: true, podStatus: terminated(corev1.PodSucceeded, 0, "Completed", "")}
		},
		want: []string{"completed but left no result", "the run is counted Failed"},
	}}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runID := fmt.Sprintf("20260101T0000%02d-0000abcd", i)
			run := &execution.Run{
				Workspace: ws,
				Spec:      runner.Spec{Operation: tc.op, RunID: runID, Namespace: ns, Name: ws.Name, Revision: strings.Repeat("a", 40)},
				Timeout:   10 * time.Minute,
			}
			job, err := launcher.Job(run)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Create(ctx, job); err != nil {
				t.Fatal(err)
			}
			end := tc.end(runID)
			if !end.noPod {
				makePod(t, c, job, end)
			}
			endJobAs(t, c, job, end)
			ref := execution.Ref{Namespace: ns, Name: ws.Name, RunID: runID, Operation: tc.op}
			var st execution.Status
			testenv.Eventually(t, 30*time.Second, func() error {
				if st, err = launcher.Status(ctx, ref); err != nil {
					return err
				}
				if st.State != execution.StateFinished {
					return fmt.Errorf("state %s", st.State)
				}
				if st.Result.Outcome != runner.OutcomeFailed {
					return fmt.Errorf("outcome %s, want Failed", st.Result.Outcome)
				}
				msg := st.Result.Message
				if tc.exact != "" && msg != tc.exact {
					return fmt.Errorf("message %q, want %q", msg, tc.exact)
				}
				for _, w := range tc.want {
					if !strings.Contains(msg, w) {
						return fmt.Errorf("message %q does not say %q", msg, w)
					}
				}
				for _, n := range tc.not {
					if strings.Contains(msg, n) {
						return fmt.Errorf("message %q says %q", msg, n)
					}
				}
				return nil
			})
			t.Logf("message: %s", st.Result.Message)
		})
	}
}

// startLauncher starts an API server (opts names one spoke), a cache like the agent's and a
// JobLauncher on it, with the namespace ns, its default ServiceAccount for runs and a
// Workspace in it.
func startLauncher(t *testing.T, opts localcluster.Options, ns string) (client.Client, *execution.JobLauncher, *magosv1.Workspace) {
	t.Helper()
	c, cl, ws := startCluster(t, opts, ns)
	launcher, err := execution.NewJobLauncher(cl, execution.JobOptions{Image: "runner", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return c, launcher, ws
}

// startCluster is startLauncher without the launcher: the cluster to make launchers on.
func startCluster(t *testing.T, opts localcluster.Options, ns string) (client.Client, cluster.Cluster, *magosv1.Workspace) {
	t.Helper()
	log.SetLogger(logr.Discard())
	fleet := testenv.Start(t, opts)
	spoke := fleet.Spokes[opts.Spokes[0]]
	c := spoke.Client
	cacheOpts, err := app.CacheOptions()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := cluster.New(spoke.Config, func(o *cluster.Options) {
		o.Scheme = scheme.New()
		o.Cache = cacheOpts
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	testenv.Background(t, ctx, "cluster", cl.Start)
	ws := &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "network"},
		Spec: magosv1.WorkspaceSpec{
			ProjectRef: magosv1.ProjectReference{Name: "demo"},
			Source:     magosv1.Source{RepoURL: "https://git.example/network.git", TargetRevision: "main", Path: "."},
			Terraform:  magosv1.TerraformSpec{Binary: magosv1.BinaryOpenTofu, Version: "1.10.6"},
		},
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: magosv1.DefaultServiceAccountName}},
		ws,
	} {
		if err := localcluster.Poll(30*time.Second, func() error { return c.Create(ctx, o) }); err != nil {
			t.Fatal(err)
		}
	}
	return c, cl, ws
}

// TestStartReplacesAStaleSecret starts a run whose Secret of sensitive values was left by an
// earlier attempt (the agent stopped before creating the Job) with other values: Start
// replaces it, then creates the Job, which reads the new values.
func TestStartReplacesAStaleSecret(t *testing.T) {
	t.Parallel()
	const ns = "stale"
	c, launcher, ws := startLauncher(t, localcluster.Options{NoHub: true, Spokes: []string{ns}}, ns)
	ctx := context.Background()
	run := &execution.Run{
		Workspace: ws,
		Spec:      runner.Spec{Operation: runner.OperationPlan, RunID: "20260101T000000-0000abcd", Namespace: ns, Name: ws.Name, Revision: strings.Repeat("a", 40)},
		Env:       []corev1.EnvVar{{Name: "TF_VAR_password", Value: "new-literal"}, {Name: "TF_VAR_region", Value: "eu-west-1"}},
		Sensitive: []string{"TF_VAR_password"},
	}
	want, err := launcher.Secret(run)
	if err != nil || want == nil {
		t.Fatalf("Secret: %v, %v", want, err)
	}
	stale := want.DeepCopy()
	stale.Data = map[string][]byte{"TF_VAR_password": []byte("old-literal")}
	if err := c.Create(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if err := launcher.Start(ctx, run); err != nil {
		t.Fatal(err)
	}
	got := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(want), got); err != nil {
		t.Fatal(err)
	}
	if string(got.Data["TF_VAR_password"]) != "new-literal" || len(got.Data) != 1 {
		t.Errorf("Secret data %q, want only TF_VAR_password=new-literal", got.Data)
	}
	if owner := metav1.GetControllerOf(got); owner == nil || owner.UID != ws.UID {
		t.Errorf("Secret controlled by %+v, want the Workspace", owner)
	}
	job := &batchv1.Job{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: execution.JobName(ws.Name, runner.OperationPlan, run.Spec.RunID)}, job); err != nil {
		t.Fatalf("the Job: %v", err)
	}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "TF_VAR_password" && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != want.Name) {
			t.Errorf("TF_VAR_password = %+v, want a reference to Secret %s", e, want.Name)
		}
		if e.Name == "TF_VAR_region" && e.Value != "eu-west-1" {
			t.Errorf("TF_VAR_region = %+v, want the plain literal", e)
		}
	}
}

// TestJobControllerNeverReplacesTheRunnerPod runs an apply Job under the real Job controller
// of the Kubernetes version the tests use (kube-controller-manager's job-controller; the
// pod-garbage-collector-controller stands in for the kubelet, which is absent: it moves the
// deleted, never-scheduled Pod to phase Failed as a kubelet moves a stopped one). The runner
// Pod is deleted mid-run: the Job controller must fail the Job without ever creating a second
// Pod, and Status must say the Pod was deleted.
func TestJobControllerNeverReplacesTheRunnerPod(t *testing.T) {
	t.Parallel()
	const ns = "jobctl"
	c, launcher, ws := startLauncher(t, localcluster.Options{NoHub: true, Spokes: []string{ns}, ControllerManager: true,
		Controllers: []string{"job-controller", "pod-garbage-collector-controller"}}, ns)
	ctx := context.Background()
	run := &execution.Run{
		Workspace: ws,
		Spec:      runner.Spec{Operation: runner.OperationApply, RunID: "20260101T000000-0000abcd", Namespace: ns, Name: ws.Name, Revision: strings.Repeat("a", 40)},
		Timeout:   time.Hour,
	}
	job, err := launcher.Job(run)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	pods := func() ([]corev1.Pod, error) {
		list := &corev1.PodList{}
		err := c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{execution.JobNameLabel: job.Name})
		return list.Items, err
	}
	var first corev1.Pod
	testenv.Eventually(t, 60*time.Second, func() error {
		items, err := pods()
		if err != nil {
			return err
		}
		if len(items) != 1 {
			return fmt.Errorf("%d Pods, want the Job controller's one", len(items))
		}
		first = items[0]
		return nil
	})
	if err := c.Delete(ctx, &first); err != nil {
		t.Fatal(err)
	}
	// Until the Job has failed, and for a while after, the only Pod ever is the first.
	onlyFirst := func() error {
		items, err := pods()
		if err != nil {
			return err
		}
		for _, p := range items {
			if p.UID != first.UID {
				return fmt.Errorf("the Job controller created a second Pod %s for the apply", p.Name)
			}
		}
		return nil
	}
	cur := &batchv1.Job{}
	testenv.Eventually(t, 90*time.Second, func() error {
		if err := onlyFirst(); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(job), cur); err != nil {
			return err
		}
		for _, cond := range cur.Status.Conditions {
			if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("Job not failed yet: %+v", cur.Status)
	})
	testenv.Consistently(t, 3*time.Second, onlyFirst)
	if cur.Status.Failed != 1 || cur.Status.Active != 0 || cur.Status.Succeeded != 0 {
		t.Errorf("Job status failed %d active %d succeeded %d, want one failed Pod and nothing else", cur.Status.Failed, cur.Status.Active, cur.Status.Succeeded)
	}
	ref := execution.Ref{Namespace: ns, Name: ws.Name, RunID: run.Spec.RunID, Operation: runner.OperationApply}
	testenv.Eventually(t, 30*time.Second, func() error {
		st, err := launcher.Status(ctx, ref)
		if err != nil {
			return err
		}
		if st.State != execution.StateFinished || st.Result.Outcome != runner.OutcomeFailed || !strings.Contains(st.Result.Message, "deleted") {
			return fmt.Errorf("status %s %s: %s; want Finished, Failed, saying the Pod was deleted", st.State, st.Result.Outcome, st.Result.Message)
		}
		t.Logf("Job conditions %+v; run message: %s", cur.Status.Conditions, st.Result.Message)
		return nil
	})
}

// makePod plays the Job controller and the kubelet: the Job's Pod, with the status of end, and
// deleted (held by a finalizer) when end says so.
func makePod(t *testing.T, c client.Client, job *batchv1.Job, end jobEnd) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-x", Labels: map[string]string{execution.JobNameLabel: job.Name}},
		Spec:       *job.Spec.Template.Spec.DeepCopy(),
	}
	for k, v := range job.Spec.Template.Labels {
		pod.Labels[k] = v
	}
	if end.deleted {
		pod.Finalizers = []string{"magosproject.io/test-hold"}
	}
	if end.pod != nil {
		end.pod(pod)
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatalf("creating the Pod: %v", err)
	}
	pod.Status = end.podStatus
	pod.Status.StartTime = ptr.To(metav1.Now())
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatalf("setting the Pod status: %v", err)
	}
	if end.deleted {
		if err := c.Delete(ctx, pod); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.Patch(context.Background(), pod, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
		})
	}
}

// endJobAs plays the Job controller: the Job's final conditions.
func endJobAs(t *testing.T, c client.Client, job *batchv1.Job, end jobEnd) {
	t.Helper()
	ctx := context.Background()
	now := metav1.Now()
	start := metav1.NewTime(now.Add(-5 * time.Second))
	testenv.Eventually(t, 30*time.Second, func() error {
		cur := &batchv1.Job{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(job), cur); err != nil {
			return err
		}
		cur.Status.StartTime = &start
		if end.complete {
			cur.Status.Succeeded = 1
			cur.Status.CompletionTime = &now
			cur.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: batchv1.JobReasonCompletionsReached},
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: batchv1.JobReasonCompletionsReached},
			}
		} else {
			cur.Status.Failed = 1
			cur.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: end.reason, Message: end.message},
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: end.reason, Message: end.message},
			}
		}
		return c.Status().Update(ctx, cur)
	})
}

// TestWorkspaceDeletionCollectsItsRunObjects: what a run leaves in the Workspace's namespace,
// its Job, the Job's Pod, the Secret of its sensitive values and the Workspace's data volume,
// goes with the Workspace once the Workspace is deleted, by Kubernetes garbage collection (the
// real garbage collector, Job controller and PVC protection controller of kube-controller-manager;
// no kubelet, so the Pod is never scheduled). The Workspace here carries no finalizer: in a
// real cluster the agent removes its own when it lets go (agent/workspace's delete tests).
func TestWorkspaceDeletionCollectsItsRunObjects(t *testing.T) {
	t.Parallel()
	const ns = "collect"
	c, launcher, ws := startLauncher(t, localcluster.Options{NoHub: true, Spokes: []string{ns}, ControllerManager: true,
		Controllers: []string{"job-controller", "persistentvolumeclaim-protection-controller"}}, ns)
	ctx := context.Background()
	run := &execution.Run{
		Workspace: ws,
		Spec:      runner.Spec{Operation: runner.OperationApply, RunID: "20260101T000000-0000abcd", Namespace: ns, Name: ws.Name, Revision: strings.Repeat("a", 40)},
		Env:       []corev1.EnvVar{{Name: "TF_VAR_password", Value: "literal"}},
		Sensitive: []string{"TF_VAR_password"},
		Timeout:   time.Hour,
	}
	if err := launcher.Start(ctx, run); err != nil {
		t.Fatal(err)
	}
	job, err := launcher.Job(run)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := launcher.Secret(run)
	if err != nil || secret == nil {
		t.Fatalf("Secret: %v, %v", secret, err)
	}
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: execution.DataClaimName(ws.Name)}}
	pods := func() ([]corev1.Pod, error) {
		list := &corev1.PodList{}
		err := c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{execution.JobNameLabel: job.Name})
		return list.Items, err
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		for _, o := range []client.Object{job.DeepCopy(), secret.DeepCopy(), claim.DeepCopy()} {
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
				return fmt.Errorf("%T %s: %w", o, o.GetName(), err)
			}
		}
		items, err := pods()
		if err != nil {
			return err
		}
		if len(items) != 1 {
			return fmt.Errorf("%d Pods, want the Job controller's one", len(items))
		}
		return nil
	})

	if err := c.Delete(ctx, ws); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, func() error {
		var left []string
		for _, o := range []client.Object{job.DeepCopy(), secret.DeepCopy(), claim.DeepCopy()} {
			err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
			switch {
			case err == nil:
				left = append(left, fmt.Sprintf("%T %s (finalizers %v)", o, o.GetName(), o.GetFinalizers()))
			case !apierrors.IsNotFound(err):
				return err
			}
		}
		items, err := pods()
		if err != nil {
			return err
		}
		for _, p := range items {
			left = append(left, fmt.Sprintf("Pod %s (finalizers %v)", p.Name, p.Finalizers))
		}
		if len(left) > 0 {
			return fmt.Errorf("still there after the Workspace was deleted: %s", strings.Join(left, ", "))
		}
		return nil
	})
}
