package execution_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/execution"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/testenv"
)

// checkTerminated is a Pod status whose check container terminated with exit.
func checkTerminated(phase corev1.PodPhase, exit int32, reason string) corev1.PodStatus {
	now := metav1.Now()
	return corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
		Name: execution.CheckContainerName, Image: "checks", ImageID: "checks",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exit, Reason: reason, StartedAt: now, FinishedAt: now,
		}},
	}}}
}

// TestJobVerify: the Job of a verify run, as stored on the API server, runs the check (its
// image, command, arguments, the run's environment, its timeout as activeDeadlineSeconds, no
// retry) and nothing of the runner's; Status derives the check's result from how its Job and
// its container ended, as a stand-in for the Job controller and the kubelet (envtest has
// neither) writes them; Prune deletes the verify Jobs of other runs. A verify run without its
// check is refused.
func TestJobVerify(t *testing.T) {
	t.Parallel()
	const ns = "verify"
	c, launcher, ws := startLauncher(t, localcluster.Options{NoHub: true, Spokes: []string{ns}}, ns)
	ctx := context.Background()
	check := &magosv1.VerificationJob{
		Image:   "registry.example/checks:1.2",
		Command: []string{"sh", "-c"},
		Args:    []string{`test "$OUTPUT_REPLICAS" = 3`},
		Timeout: &metav1.Duration{Duration: 90 * time.Second},
	}
	verifyRun := func(runID string) *execution.Run {
		return &execution.Run{
			Workspace: ws,
			Spec:      runner.Spec{Operation: runner.OperationVerify, RunID: runID, Namespace: ns, Name: ws.Name, Revision: strings.Repeat("d", 40)},
			Env: []corev1.EnvVar{
				{Name: "OUTPUT_REPLICAS", Value: "3"},
				{Name: "MAGOS_WORKSPACE", Value: ws.Name},
				{Name: "API_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "checks"}, Key: "token"}}},
			},
			Timeout:        check.TimeoutOrDefault(),
			PodAnnotations: map[string]string{"example.com/team": "network"},
			Check:          check,
		}
	}

	t.Run("the Job runs the check", func(t *testing.T) {
		run := verifyRun("20260101T000000-0000f00d")
		if err := launcher.Start(ctx, run); err != nil {
			t.Fatal(err)
		}
		job := &batchv1.Job{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: execution.JobName(ws.Name, runner.OperationVerify, run.Spec.RunID)}, job); err != nil {
			t.Fatalf("the Job: %v", err)
		}
		if job.Labels[keys.JobType] != string(runner.OperationVerify) || job.Labels[keys.RunID] != run.Spec.RunID || job.Labels[keys.Workspace] != ws.Name {
			t.Errorf("Job labels %v, want the Workspace, operation verify and the run ID", job.Labels)
		}
		if owner := metav1.GetControllerOf(job); owner == nil || owner.UID != ws.UID {
			t.Errorf("Job controlled by %+v, want the Workspace", owner)
		}
		if s := job.Spec.ActiveDeadlineSeconds; s == nil || *s != 90 {
			t.Errorf("activeDeadlineSeconds %v, want 90 (the check's timeout)", s)
		}
		if b := job.Spec.BackoffLimit; b == nil || *b != 0 {
			t.Errorf("backoffLimit %v, want 0", b)
		}
		pod := job.Spec.Template.Spec
		if pod.RestartPolicy != corev1.RestartPolicyNever || pod.ServiceAccountName != magosv1.DefaultServiceAccountName {
			t.Errorf("restartPolicy %s, serviceAccountName %s; want Never and %s", pod.RestartPolicy, pod.ServiceAccountName, magosv1.DefaultServiceAccountName)
		}
		if got := job.Spec.Template.Annotations; !maps.Equal(got, run.PodAnnotations) {
			t.Errorf("Pod annotations %v, want %v", got, run.PodAnnotations)
		}
		if len(pod.Containers) != 1 {
			t.Fatalf("%d containers, want the check's one", len(pod.Containers))
		}
		ctr := pod.Containers[0]
		if ctr.Name != execution.CheckContainerName || ctr.Image != check.Image ||
			!slices.Equal(ctr.Command, check.Command) || !slices.Equal(ctr.Args, check.Args) {
			t.Errorf("container %s runs %s %q %q, want %s running %s %q %q",
				ctr.Name, ctr.Image, ctr.Command, ctr.Args, execution.CheckContainerName, check.Image, check.Command, check.Args)
		}
		var names []string
		for _, e := range ctr.Env {
			names = append(names, e.Name)
		}
		if want := []string{"OUTPUT_REPLICAS", "MAGOS_WORKSPACE", "API_TOKEN"}; !slices.Equal(names, want) {
			t.Errorf("env %v, want the run's %v and nothing of the runner's", names, want)
		}
		if ctr.Env[0].Value != "3" || ctr.Env[2].ValueFrom == nil || ctr.Env[2].ValueFrom.SecretKeyRef == nil || ctr.Env[2].ValueFrom.SecretKeyRef.Name != "checks" {
			t.Errorf("env %+v, want the run's values and references", ctr.Env)
		}
		for _, v := range pod.Volumes {
			if v.PersistentVolumeClaim != nil {
				t.Errorf("the check mounts the data volume %s", v.PersistentVolumeClaim.ClaimName)
			}
		}
		if sc := ctr.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("security context %+v, want the runner's (non-root, no privilege escalation)", sc)
		}

		// Without its check, a verify run is a programming error.
		bad := verifyRun("20260101T000000-0000bad0")
		bad.Check = nil
		if err := launcher.Start(ctx, bad); err == nil || !strings.Contains(err.Error(), "no check") {
			t.Errorf("Start of a verify run without a check: %v, want an error saying so", err)
		}
		if _, err := launcher.Job(bad); err == nil {
			t.Error("Job of a verify run without a check: no error")
		}
	})

	cases := []struct {
		name    string
		end     jobEnd
		outcome runner.Outcome
		// message is the whole message, or contains all of want.
		message string
		want    []string
	}{{
		name:    "stand-in: the check passed, its Job completed",
		end:     jobEnd{complete: true, podStatus: checkTerminated(corev1.PodSucceeded, 0, "Completed")},
		outcome: runner.OutcomeSucceeded,
	}, {
		name: "stand-in: the check exited with code 3",
		end: jobEnd{reason: batchv1.JobReasonBackoffLimitExceeded, message: "Job has reached the specified backoff limit",
			podStatus: checkTerminated(corev1.PodFailed, 3, "Error")},
		outcome: runner.OutcomeFailed,
		message: "the check exited with code 3",
	}, {
		name:    "stand-in: the Job controller stopped the check at its activeDeadlineSeconds",
		end:     jobEnd{reason: batchv1.JobReasonDeadlineExceeded, message: "Job was active longer than specified deadline", noPod: true},
		outcome: runner.OutcomeFailed,
		message: "the check did not finish within 1m30s",
	}, {
		name:    "stand-in: the Job failed and its Pod is gone",
		end:     jobEnd{reason: batchv1.JobReasonBackoffLimitExceeded, message: "Job has reached the specified backoff limit", noPod: true},
		outcome: runner.OutcomeFailed,
		want:    []string{"the check failed and its exit code is unknown", "BackoffLimitExceeded", "its Pod is gone"},
	}}
	var runIDs []string
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runID := fmt.Sprintf("20260101T0001%02d-0000f00d", i)
			runIDs = append(runIDs, runID)
			run := verifyRun(runID)
			if err := launcher.Start(ctx, run); err != nil {
				t.Fatal(err)
			}
			ref := execution.RefOf(run)
			testenv.Eventually(t, 30*time.Second, func() error {
				st, err := launcher.Status(ctx, ref)
				if err != nil {
					return err
				}
				if st.State != execution.StateRunning {
					return fmt.Errorf("state %s before the Job ended, want Running", st.State)
				}
				return nil
			})
			job, err := launcher.Job(run)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.end.noPod {
				makePod(t, c, job, tc.end)
			}
			endJobAs(t, c, job, tc.end)
			var st execution.Status
			testenv.Eventually(t, 30*time.Second, func() error {
				if st, err = launcher.Status(ctx, ref); err != nil {
					return err
				}
				if st.State != execution.StateFinished {
					return fmt.Errorf("state %s", st.State)
				}
				res := st.Result
				if res.Operation != runner.OperationVerify || res.RunID != runID || res.Outcome != tc.outcome {
					return fmt.Errorf("result %s of %s: %s (%s), want %s of the verify of %s", res.Operation, res.RunID, res.Outcome, res.Message, tc.outcome, runID)
				}
				if tc.message != "" && res.Message != tc.message {
					return fmt.Errorf("message %q, want %q", res.Message, tc.message)
				}
				for _, w := range tc.want {
					if !strings.Contains(res.Message, w) {
						return fmt.Errorf("message %q does not say %q", res.Message, w)
					}
				}
				return nil
			})
			t.Logf("%s: %s", st.Result.Outcome, st.Result.Message)
		})
	}

	t.Run("Prune deletes the verify Jobs of other runs", func(t *testing.T) {
		keep := runIDs[0]
		if err := launcher.Prune(ctx, ws, keep); err != nil {
			t.Fatal(err)
		}
		for _, runID := range runIDs {
			err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: execution.JobName(ws.Name, runner.OperationVerify, runID)}, &batchv1.Job{})
			switch {
			case runID == keep && err != nil:
				t.Errorf("the kept run's verify Job: %v", err)
			case runID != keep && !apierrors.IsNotFound(err):
				t.Errorf("the verify Job of run %s after Prune: %v, want it deleted", runID, err)
			}
		}
	})
}
