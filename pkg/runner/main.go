package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/magosfleet/magos/pkg/gitrepo"
)

// Exit codes of Main.
const (
	ExitSucceeded   = 0
	ExitFailed      = 1
	ExitInvalidSpec = 2
)

// Main is the runner entrypoint (`magos-agent runner`, in a Job or as a child process of the
// agent): it reads the Spec from MAGOS_RUN_SPEC, runs it with the process's environment and
// the git credentials of GIT_USERNAME / GIT_PASSWORD / GIT_SSH_PRIVATE_KEY /
// GIT_SSH_KNOWN_HOSTS, writes the encoded Result to MAGOS_RESULT_FILE (default
// /dev/termination-log) and prints a one-line summary on stdout. It returns the exit code:
// ExitSucceeded when the run succeeded, ExitInvalidSpec when the Spec is unusable (missing,
// not JSON, or invalid: running it again cannot help), ExitFailed otherwise (including a
// policy violation, and a result that could not be written).
func Main(ctx context.Context) int {
	logger := log.FromContext(ctx)
	resultFile := os.Getenv(EnvResultFile)
	if resultFile == "" {
		resultFile = DefaultResultFile
	}
	res, code := mainRun(ctx)
	b, err := res.Encode()
	if err != nil {
		// Too big even when shortened: say so rather than leave no result at all.
		res = Result{Operation: res.Operation, RunID: res.RunID, Revision: res.Revision, Outcome: OutcomeFailed,
			Message: fmt.Sprintf("the run ended %s but its result could not be encoded: %v", res.Outcome, err)}
		b, err = res.Encode()
		code = max(code, ExitFailed)
	}
	if err == nil {
		err = os.WriteFile(resultFile, b, 0o644)
	}
	if err != nil {
		logger.Error(err, "Writing the run result", "resultFile", resultFile)
		fmt.Fprintf(os.Stderr, "writing the run result to %s: %v\n", resultFile, err)
		code = max(code, ExitFailed)
	}
	fmt.Fprintln(os.Stdout, summaryLine(res))
	return code
}

func mainRun(ctx context.Context) (Result, int) {
	spec, err := DecodeSpec(os.Getenv(EnvSpec))
	if err != nil {
		return Result{Operation: spec.Operation, RunID: spec.RunID, Outcome: OutcomeFailed, Message: err.Error()}, ExitInvalidSpec
	}
	res := Run(ctx, spec, Options{
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		Auth:   gitrepo.AuthFromEnv(),
		Env:    os.Environ(),
	})
	if res.Outcome == OutcomeSucceeded {
		return res, ExitSucceeded
	}
	return res, ExitFailed
}

// DecodeSpec reads a Spec from raw, the value of MAGOS_RUN_SPEC, and validates it. On a
// validation error it returns the decoded Spec too, so the result can name its operation and
// run ID. It runs nothing.
func DecodeSpec(raw string) (Spec, error) {
	if raw == "" {
		return Spec{}, fmt.Errorf("%s is empty: want the run spec as JSON", EnvSpec)
	}
	var spec Spec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		return Spec{}, fmt.Errorf("%s is not a run spec: %w", EnvSpec, err)
	}
	if err := spec.Validate(); err != nil {
		return spec, fmt.Errorf("invalid run spec: %w", err)
	}
	return spec, nil
}

// summaryLine is the one line Main prints about a result.
func summaryLine(res Result) string {
	line := fmt.Sprintf("magos run %s: %s %s", res.RunID, res.Operation, res.Outcome)
	if res.Revision != "" {
		line += " at " + res.Revision
	}
	if res.Message != "" {
		line += ": " + strings.Join(strings.Fields(res.Message), " ")
	}
	if len(line) > maxSummary {
		line = line[:maxSummary] + "..."
	}
	return line
}

// maxSummary bounds the summary line; the result file has the whole story.
const maxSummary = 400
