// Package execution starts the runs of Workspaces and reports how they end. A run is one
// operation (plan, apply or destroy) of one run ID; the runner entrypoint (pkg/runner) does
// the work. Two Launchers run the same entrypoint:
//
//   - JobLauncher, in production: one Kubernetes Job per operation, the result read from the
//     container's termination message;
//   - LocalLauncher, for development and tests: a child process of the agent, the result read
//     from a file in the agent's data folder.
//
// The verify operation (runner.OperationVerify) is the exception: it runs the user's check
// (Run.Check) in place of the runner, and its result is derived from how the check ended (its
// exit code, or its timeout), since the check writes none.
package execution

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/source"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/runner"
)

// DefaultTimeout bounds a run when the Workspace sets no timeoutSeconds.
const DefaultTimeout = 24 * time.Hour

// Run is one operation of one run of a Workspace.
type Run struct {
	// Workspace owns the run.
	Workspace *magosv1.Workspace
	// Spec is the runner's input. The launcher fills in PlanFile and Backend.
	Spec runner.Spec
	// Env is the run's environment: variables and git credentials. Secret and ConfigMap
	// values stay references.
	Env []corev1.EnvVar
	// Sensitive names the entries of Env that are sensitive literals (sensitive: true in a
	// VariableSet). The JobLauncher never writes their values into the Job: it keeps them in
	// a Secret of the run that the Job reads (see JobLauncher.Job). The runner gets the same
	// environment either way.
	Sensitive []string
	// Timeout bounds the run (if zero: DefaultTimeout, or the check's TimeoutOrDefault for a
	// verify run).
	Timeout time.Duration
	// PodAnnotations annotate the Job's Pod.
	PodAnnotations map[string]string
	// ServiceAccountName is the Job's identity.
	ServiceAccountName string
	// Check is, for a verify operation (runner.OperationVerify), the check to run in place of
	// the runner: its image, command and arguments, with Env as its environment and Timeout
	// (the check's timeout) as its bound.
	Check *magosv1.VerificationJob
}

// validate refuses a run no launcher can start: a verify run without its check, which is a
// programming error of the caller.
func validate(run *Run) error {
	if run.Spec.Operation == runner.OperationVerify && run.Check == nil {
		return fmt.Errorf("the verify of run %s of Workspace %s/%s has no check to run (Run.Check is nil)",
			run.Spec.RunID, run.Workspace.Namespace, run.Workspace.Name)
	}
	return nil
}

// timeoutOf is the bound of a run: run.Timeout, else the check's own default for a verify run
// (magosv1.DefaultVerificationTimeout), else DefaultTimeout.
func timeoutOf(run *Run) time.Duration {
	switch {
	case run.Timeout > 0:
		return run.Timeout
	case run.Spec.Operation == runner.OperationVerify:
		return run.Check.TimeoutOrDefault()
	}
	return DefaultTimeout
}

// checkExited is the message of a check that failed with an exit code.
func checkExited(code int) string { return fmt.Sprintf("the check exited with code %d", code) }

// checkTimedOut is the message of a check stopped at its timeout.
func checkTimedOut(timeout time.Duration) string {
	return fmt.Sprintf("the check did not finish within %s", timeout)
}

// Ref names one operation of one run of a Workspace.
type Ref struct {
	Namespace string
	Name      string
	RunID     string
	Operation runner.Operation
}

// RefOf returns the Ref of run.
func RefOf(run *Run) Ref {
	return Ref{Namespace: run.Workspace.Namespace, Name: run.Workspace.Name, RunID: run.Spec.RunID, Operation: run.Spec.Operation}
}

// State is where a run is.
type State int

// States.
const (
	// StateNotFound: the launcher knows nothing of the run (never started, or lost).
	StateNotFound State = iota
	// StateRunning: started and not finished.
	StateRunning
	// StateFinished: finished; Status.Result says how.
	StateFinished
)

// String names the state.
func (s State) String() string {
	switch s {
	case StateRunning:
		return "Running"
	case StateFinished:
		return "Finished"
	}
	return "NotFound"
}

// Status is what a launcher knows of a run.
type Status struct {
	State State
	// Result of a finished run.
	Result runner.Result
	// StartedAt and FinishedAt, when known.
	StartedAt, FinishedAt time.Time
}

// Duration is how long a finished run took, or zero when unknown.
func (s Status) Duration() time.Duration {
	if s.StartedAt.IsZero() || s.FinishedAt.IsZero() || s.FinishedAt.Before(s.StartedAt) {
		return 0
	}
	return s.FinishedAt.Sub(s.StartedAt)
}

// Launcher starts runs and reports on them.
type Launcher interface {
	// Start starts the run. It is idempotent: a run that is running or finished is not
	// started again.
	Start(ctx context.Context, run *Run) error
	// Status reports on a run.
	Status(ctx context.Context, ref Ref) (Status, error)
	// Output opens what a finished run printed (the runner's stdout and stderr). The caller
	// closes it.
	Output(ctx context.Context, ref Ref) (io.ReadCloser, error)
	// Prune forgets the Workspace's runs other than keepRunID (deletes old Jobs or files).
	Prune(ctx context.Context, ws *magosv1.Workspace, keepRunID string) error
	// Forget drops everything the launcher keeps for a Workspace that is going away.
	Forget(ctx context.Context, namespace, name string) error
	// Sources are the event sources that wake the Workspace controller when a run changes.
	Sources() []source.Source
}

// JobName is the name of the Job of an operation: the Workspace's name cut to fit, the
// operation, and 8 hex characters of a hash of the run ID; always at most 63 characters, so
// it fits the job-name label Kubernetes puts on the Job's Pods.
func JobName(workspace string, op runner.Operation, runID string) string {
	sum := sha256.Sum256([]byte(runID))
	suffix := "-" + string(op) + "-" + hex.EncodeToString(sum[:])[:8]
	base := workspace
	if max := 63 - len(suffix); len(base) > max {
		base = strings.TrimRight(base[:max], "-.")
	}
	return base + suffix
}
