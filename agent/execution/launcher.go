// Package execution starts the runs of Workspaces and reports how they end. A run is one
// operation (plan, apply or destroy) of one run ID; the runner entrypoint (pkg/runner) does
// the work. Two Launchers run the same entrypoint:
//
//   - JobLauncher, in production: one Kubernetes Job per operation, the result read from the
//     container's termination message;
//   - LocalLauncher, for development and tests: a child process of the agent, the result read
//     from a file in the agent's data folder.
package execution

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	// Timeout bounds the run (DefaultTimeout if zero).
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
