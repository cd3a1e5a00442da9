package execution

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/magosfleet/magos/agent/variables"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/runner"
)

// LocalOptions configures a LocalLauncher.
type LocalOptions struct {
	// Command runs the runner entrypoint; default [<this executable>, "runner"].
	Command []string
	// DataDir holds results, logs, saved plans (and local state without Kubeconfig).
	DataDir string
	// Kubeconfig reaches the Workspaces' cluster; runs keep their state there with the
	// kubernetes backend, and Kubernetes providers reach it too (KUBE_CONFIG_PATH and
	// KUBECONFIG name it in the run's environment). Empty keeps state in a file under DataDir
	// (development only).
	Kubeconfig string
	// BinaryPath is the tofu/terraform binary runs use when the Spec names none.
	BinaryPath string
	// Reader resolves the Secret and ConfigMap references of a run's environment.
	Reader client.Reader
	// Env is added to the environment of every run (after the agent's own, which runs
	// inherit: MAGOS_PROVIDER_MIRROR and MAGOS_PROVIDER_NETWORK_MIRROR included).
	Env []string
	// StopGrace is how long a run may take to stop when the agent stops (default 10s).
	StopGrace time.Duration
	// Logger logs process starts and ends.
	Logger logr.Logger
}

// LocalLauncher runs each operation as a child process of the agent. Results are files, so
// they survive an agent restart: a result file means the run finished, a running process
// means it is running (a process a killed agent left behind included: its pid file names it),
// and neither means it was lost (and Status says NotFound).
//
// A verify run (runner.OperationVerify) is the development stand-in for the check's Job: it
// runs Run.Check's Command and Args as a child process, in the run folder, and ignores the
// check's Image (nothing here runs containers). Its environment is the run's (Run.Env, Secret
// and ConfigMap references resolved as for the runner) after the agent's PATH, and nothing
// else of the agent's; Run.Timeout bounds it (its process group is stopped then); its stdout
// and stderr are its output (Output). The check writes no result: the launcher writes it from
// how the check ended (see checkResult), to the same result file as a runner's, so it survives
// an agent restart too. The check runs under /bin/sh (checkWrapper), which records its exit
// code in the run folder, so that an agent restarted while the check ran (the check outlives
// it, as a runner does) still learns how it ended. A check without a command fails at once.
type LocalLauncher struct {
	opts   LocalOptions
	events chan event.GenericEvent

	mu       sync.Mutex
	procs    map[Ref]*localProc
	started  map[Ref]time.Time
	stopping bool
	stopCh   chan struct{}
	wg       sync.WaitGroup
	// orphans are the runs of an earlier agent process still running, watched until they end.
	orphans map[Ref]bool
}

type localProc struct {
	cmd      *exec.Cmd
	started  time.Time
	killed   bool // stopped by the agent: the run is lost, not failed
	timedOut bool
	done     chan struct{}
}

// NewLocalLauncher returns a LocalLauncher. Call Run (a manager Runnable) so that runs stop
// with the agent.
func NewLocalLauncher(opts LocalOptions) (*LocalLauncher, error) {
	if opts.DataDir == "" {
		return nil, errors.New("local launcher: a data folder is required")
	}
	if opts.Reader == nil {
		return nil, errors.New("local launcher: a reader for Secrets and ConfigMaps is required")
	}
	if len(opts.Command) == 0 {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("local launcher: finding the agent executable: %w", err)
		}
		opts.Command = []string{self, "runner"}
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = 10 * time.Second
	}
	dir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("local launcher: data folder: %w", err)
	}
	opts.DataDir = dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("local launcher: creating data folder: %w", err)
	}
	return &LocalLauncher{
		opts:    opts,
		events:  make(chan event.GenericEvent, 1024),
		procs:   map[Ref]*localProc{},
		started: map[Ref]time.Time{},
		stopCh:  make(chan struct{}),
		orphans: map[Ref]bool{},
	}, nil
}

// Run waits for ctx to end, then stops every running run (SIGTERM, then SIGKILL after
// StopGrace) and forgets their results: a run the agent stopped is lost, and the next agent
// starts it again.
func (l *LocalLauncher) Run(ctx context.Context) error {
	<-ctx.Done()
	l.mu.Lock()
	l.stopping = true
	close(l.stopCh)
	procs := make([]*localProc, 0, len(l.procs))
	for _, p := range l.procs {
		p.killed = true
		procs = append(procs, p)
	}
	l.mu.Unlock()
	for _, p := range procs {
		l.stop(p)
	}
	l.wg.Wait()
	return nil
}

// Sources wake the Workspace controller when a run ends.
func (l *LocalLauncher) Sources() []source.Source {
	return []source.Source{source.Channel(l.events, &handler.EnqueueRequestForObject{})}
}

func (l *LocalLauncher) dir(namespace, name string) string {
	return filepath.Join(l.opts.DataDir, namespace, name)
}

// ResultPath is where the result of a run is written.
func (l *LocalLauncher) ResultPath(ref Ref) string {
	return filepath.Join(l.dir(ref.Namespace, ref.Name), ref.RunID+"-"+string(ref.Operation)+".json")
}

// pidPath names the process of a run while it runs, so that an agent restarted after a crash
// knows the run still runs (and never starts it a second time).
func (l *LocalLauncher) pidPath(ref Ref) string {
	return l.ResultPath(ref) + ".pid"
}

// exitPath is where the wrapper of a verify run's check writes the check's exit code
// (checkWrapper).
func (l *LocalLauncher) exitPath(ref Ref) string {
	return filepath.Join(l.dir(ref.Namespace, ref.Name), ref.RunID+"-"+string(ref.Operation)+".exit")
}

// LogPath is where the output of a run is written.
func (l *LocalLauncher) LogPath(ref Ref) string {
	return filepath.Join(l.dir(ref.Namespace, ref.Name), ref.RunID+"-"+string(ref.Operation)+".log")
}

// Start starts the run as a child process, unless it is running (an earlier agent process's run
// included) or has a result. A verify run without its check is an error; a verify run whose
// check has no command fails at once (a Failed result, no process).
func (l *LocalLauncher) Start(ctx context.Context, run *Run) error {
	if err := validate(run); err != nil {
		return err
	}
	ref := RefOf(run)
	l.mu.Lock()
	_, own := l.procs[ref]
	l.mu.Unlock()
	if !own {
		if _, alive := l.orphan(ref); alive {
			return nil // started by an earlier agent process, and still running
		}
	}
	l.mu.Lock()
	if l.stopping {
		l.mu.Unlock()
		return errors.New("local launcher is stopping")
	}
	if _, ok := l.procs[ref]; ok {
		l.mu.Unlock()
		return nil
	}
	if _, err := os.Stat(l.ResultPath(ref)); err == nil {
		l.mu.Unlock()
		return nil
	}
	p := &localProc{started: time.Now(), done: make(chan struct{})}
	l.procs[ref] = p // reserve: a concurrent Start sees it running
	l.mu.Unlock()

	if run.Spec.Operation == runner.OperationVerify && len(run.Check.Command) == 0 {
		return l.failAtOnce(ref, p, "a verification job run locally needs a command: the local launcher runs the check's command, "+
			"not its image ("+run.Check.Image+")")
	}
	var cmd *exec.Cmd
	var logFile *os.File
	var err error
	if run.Spec.Operation == runner.OperationVerify {
		cmd, logFile, err = l.checkCommand(ctx, run, ref)
	} else {
		cmd, logFile, err = l.command(ctx, run, ref)
	}
	if err == nil {
		p.cmd = cmd
		err = cmd.Start()
		if err != nil {
			err = fmt.Errorf("starting the %s of run %s (%s): %w", ref.Operation, ref.RunID, cmd.Path, err)
		}
	}
	if err != nil {
		if logFile != nil {
			_ = logFile.Close()
		}
		l.mu.Lock()
		delete(l.procs, ref)
		l.mu.Unlock()
		close(p.done)
		return err
	}
	if err := os.WriteFile(l.pidPath(ref), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		l.opts.Logger.Error(err, "writing the pid file of a run", "path", l.pidPath(ref))
	}
	l.opts.Logger.V(1).Info("started local run", "workspace", ref.Namespace+"/"+ref.Name, "runID", ref.RunID, "operation", ref.Operation, "pid", cmd.Process.Pid)
	l.wg.Add(1)
	go l.wait(ref, p, logFile, timeoutOf(run))
	return nil
}

// failAtOnce ends a run reserved by Start without a process: its result is Failed with msg, and
// its output is msg too.
func (l *LocalLauncher) failAtOnce(ref Ref, p *localProc, msg string) error {
	err := os.MkdirAll(l.dir(ref.Namespace, ref.Name), 0o700)
	if err == nil {
		err = os.WriteFile(l.LogPath(ref), []byte(msg+"\n"), 0o600)
	}
	if err == nil {
		err = l.writeResult(l.ResultPath(ref), runner.Result{Operation: ref.Operation, RunID: ref.RunID, Outcome: runner.OutcomeFailed, Message: msg})
	}
	l.mu.Lock()
	delete(l.procs, ref)
	if err == nil {
		l.started[ref] = p.started
		if !l.stopping {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				l.notify(ref)
			}()
		}
	}
	l.mu.Unlock()
	close(p.done)
	if err != nil {
		return fmt.Errorf("ending the %s of run %s: %w", ref.Operation, ref.RunID, err)
	}
	return nil
}

// checkWrapper runs a verify run's check under /bin/sh, as
// sh -c checkWrapper magos-check <exit file> <command> <args>...: it runs the check, writes its
// exit code to the exit file (with shell built-ins only, whatever the check's PATH), and exits
// with it. Its command line also tells a check's process from another that reused its pid
// (LocalLauncher.runs).
const checkWrapper = `exitfile=$1; shift; "$@"; code=$?; printf '%d\n' "$code" > "$exitfile"; exit "$code"`

// checkShell runs checkWrapper.
var checkShell = []string{"/bin/sh", "-c", checkWrapper}

// checkCommand prepares the process of a verify run: Run.Check's command and arguments under
// checkWrapper, with the agent's PATH and the run's environment, in the run folder, its output
// to the run's log.
func (l *LocalLauncher) checkCommand(ctx context.Context, run *Run, ref Ref) (*exec.Cmd, *os.File, error) {
	dir := l.dir(ref.Namespace, ref.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("creating run folder: %w", err)
	}
	resolved, err := variables.Resolve(ctx, l.opts.Reader, ref.Namespace, run.Env)
	if err != nil {
		return nil, nil, err
	}
	var env []string
	if path, ok := os.LookupEnv("PATH"); ok {
		env = append(env, "PATH="+path) // first: a PATH of the run's replaces it
	}
	env = append(env, resolved...)
	argv := append(slices.Clone(checkShell), "magos-check", l.exitPath(ref))
	argv = append(argv, run.Check.Command...)
	argv = append(argv, run.Check.Args...)
	return l.process(ref, dir, env, argv)
}

// checkResult is the result of a verify run whose check exited with code.
func checkResult(ref Ref, code int) runner.Result {
	res := runner.Result{Operation: ref.Operation, RunID: ref.RunID, Outcome: runner.OutcomeSucceeded}
	if code != 0 {
		res.Outcome = runner.OutcomeFailed
		res.Message = checkExited(code)
	}
	return res
}

// exitCode is a process's exit code, 128 plus the signal's number for a process a signal
// killed (as a shell and the kubelet report it).
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// readExit reads the exit code checkWrapper wrote.
func readExit(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return code, err == nil
}

func (l *LocalLauncher) command(ctx context.Context, run *Run, ref Ref) (*exec.Cmd, *os.File, error) {
	dir := l.dir(ref.Namespace, ref.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("creating run folder: %w", err)
	}
	spec := run.Spec
	spec.PlanFile = filepath.Join(dir, spec.RunID+".tfplan")
	if spec.Backend.Kubernetes == nil && spec.Backend.LocalPath == "" {
		if l.opts.Kubeconfig != "" {
			spec.Backend.Kubernetes = &runner.KubernetesBackend{Namespace: ref.Namespace, SecretSuffix: ref.Name, ConfigPath: l.opts.Kubeconfig}
		} else {
			spec.Backend.LocalPath = filepath.Join(dir, "terraform.tfstate")
		}
	}
	if spec.BinaryPath == "" {
		spec.BinaryPath = l.opts.BinaryPath
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding run spec: %w", err)
	}
	resolved, err := variables.Resolve(ctx, l.opts.Reader, ref.Namespace, run.Env)
	if err != nil {
		return nil, nil, err
	}
	// The run's own entries come after the user's, so they win (exec keeps the last of
	// duplicate names): a VariableSet stored under an older CRD that names MAGOS_RUN_SPEC or
	// MAGOS_RESULT_FILE cannot replace the run spec or move the result.
	env := inheritedEnv()
	env = append(env, resolved...)
	if l.opts.Kubeconfig != "" {
		// Kubernetes providers reach the Workspace's cluster as the state backend does:
		// gavinbunney/kubectl reads KUBECONFIG before KUBE_CONFIG_PATH, hashicorp/kubernetes
		// only the latter, so both name the runner kubeconfig.
		env = append(env, runner.EnvKubeConfigPath+"="+l.opts.Kubeconfig, "KUBECONFIG="+l.opts.Kubeconfig)
	}
	env = append(env, l.opts.Env...)
	env = append(env, runner.EnvSpec+"="+string(raw), runner.EnvResultFile+"="+l.ResultPath(ref))
	return l.process(ref, dir, env, l.opts.Command)
}

// process prepares the process of a run, argv in the run folder dir with env, its stdout and
// stderr to the run's log (emptied), once what an earlier attempt of the run left (its result,
// a check's exit file) is removed.
func (l *LocalLauncher) process(ref Ref, dir string, env, argv []string) (*exec.Cmd, *os.File, error) {
	_ = os.Remove(l.ResultPath(ref))
	_ = os.Remove(l.exitPath(ref))
	logFile, err := os.OpenFile(l.LogPath(ref), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("creating run log: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	return cmd, logFile, nil
}

// inheritedEnv is the agent's environment without anything that belongs to a run.
func inheritedEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == runner.EnvSpec, name == runner.EnvResultFile,
			strings.HasPrefix(name, "TF_VAR_"), strings.HasPrefix(name, runner.EnvHCLVariablePrefix),
			strings.HasPrefix(name, "GIT_"):
			continue
		}
		out = append(out, kv)
	}
	return out
}

func (l *LocalLauncher) wait(ref Ref, p *localProc, logFile *os.File, timeout time.Duration) {
	defer l.wg.Done()
	timer := time.AfterFunc(timeout, func() {
		l.mu.Lock()
		p.timedOut = true
		l.mu.Unlock()
		l.stop(p)
	})
	waitErr := p.cmd.Wait()
	timer.Stop()
	_ = logFile.Close()
	_ = os.Remove(l.pidPath(ref))
	close(p.done)

	l.mu.Lock()
	killed, timedOut := p.killed, p.timedOut
	l.mu.Unlock()
	path := l.ResultPath(ref)
	verify := ref.Operation == runner.OperationVerify
	switch {
	case killed:
		// Stopped with the agent: lost, so the next agent runs it again.
		_ = os.Remove(path)
		_ = os.Remove(l.exitPath(ref))
	case timedOut && verify:
		_ = l.writeResult(path, runner.Result{Operation: ref.Operation, RunID: ref.RunID, Outcome: runner.OutcomeFailed, Message: checkTimedOut(timeout)})
	case timedOut:
		_ = l.writeResult(path, runner.Result{Operation: ref.Operation, RunID: ref.RunID, Outcome: runner.OutcomeFailed,
			Message: fmt.Sprintf("the run exceeded its timeout of %s and was stopped", timeout)})
	case verify:
		// The wrapper exits with the check's code (see checkWrapper).
		if err := l.writeResult(path, checkResult(ref, exitCode(p.cmd.ProcessState))); err == nil {
			_ = os.Remove(l.exitPath(ref))
		}
	default:
		if _, err := readResult(path); err != nil {
			msg := fmt.Sprintf("the runner ended without a result (%v)", waitErr)
			if tail := logTail(l.LogPath(ref), 800); tail != "" {
				msg += ": " + tail
			}
			_ = l.writeResult(path, runner.Result{Operation: ref.Operation, RunID: ref.RunID, Outcome: runner.OutcomeFailed, Message: msg})
		}
	}
	l.opts.Logger.V(1).Info("local run ended", "workspace", ref.Namespace+"/"+ref.Name, "runID", ref.RunID, "operation", ref.Operation, "error", fmt.Sprint(waitErr))

	l.mu.Lock()
	delete(l.procs, ref)
	if !killed {
		l.started[ref] = p.started
	}
	l.mu.Unlock()
	if killed {
		return
	}
	l.notify(ref)
}

// notify wakes the Workspace controller for the run's Workspace (unless the launcher stops).
func (l *LocalLauncher) notify(ref Ref) {
	ws := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}}
	select {
	case l.events <- event.GenericEvent{Object: ws}:
	case <-l.stopCh:
	}
}

// stop asks a run to stop (SIGTERM to its process group) and kills it after StopGrace.
func (l *LocalLauncher) stop(p *localProc) {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	signalGroup(p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(l.opts.StopGrace):
		signalGroup(p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// writeResult writes a run's result file (atomically), logging and returning what failed.
func (l *LocalLauncher) writeResult(path string, res runner.Result) error {
	b, err := res.Encode()
	if err != nil {
		l.opts.Logger.Error(err, "encoding run result", "path", path)
		return err
	}
	tmp := path + ".tmp"
	err = os.WriteFile(tmp, b, 0o600)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		l.opts.Logger.Error(err, "writing run result", "path", path)
	}
	return err
}

func readResult(path string) (runner.Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return runner.Result{}, err
	}
	return runner.DecodeResult(b)
}

func logTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	if st.Size() > n {
		if _, err := f.Seek(st.Size()-n, io.SeekStart); err != nil {
			return ""
		}
	}
	b, _ := io.ReadAll(f)
	return strings.TrimSpace(string(b))
}

// Output opens the run's log file.
func (l *LocalLauncher) Output(_ context.Context, ref Ref) (io.ReadCloser, error) {
	f, err := os.Open(l.LogPath(ref))
	if err != nil {
		return nil, fmt.Errorf("opening the output of the %s of run %s: %w", ref.Operation, ref.RunID, err)
	}
	return f, nil
}

// Status reports a run: running while its process lives, finished once its result file
// exists, not found otherwise.
func (l *LocalLauncher) Status(_ context.Context, ref Ref) (Status, error) {
	l.mu.Lock()
	p, running := l.procs[ref]
	startedAt, known := l.started[ref]
	l.mu.Unlock()
	if running {
		return Status{State: StateRunning, StartedAt: p.started}, nil
	}
	path := l.ResultPath(ref)
	res, err := readResult(path)
	if err != nil {
		if started, alive := l.orphan(ref); alive {
			// An earlier agent process started it and died: it still runs, and writes its
			// result itself. Starting it again would run it twice.
			return Status{State: StateRunning, StartedAt: started}, nil
		}
		code, ended := 0, false
		if ref.Operation == runner.OperationVerify {
			code, ended = readExit(l.exitPath(ref))
		}
		if !ended {
			// No result (or an unreadable one) and no process writes it: the run is lost;
			// start it again.
			return Status{State: StateNotFound}, nil
		}
		// A check an earlier agent process started ended after that agent did: its wrapper
		// wrote its exit code, the result is the launcher's to write.
		res = checkResult(ref, code)
		if err := l.writeResult(path, res); err == nil {
			_ = os.Remove(l.exitPath(ref))
		}
	}
	st := Status{State: StateFinished, Result: res}
	if fi, err := os.Stat(path); err == nil {
		st.FinishedAt = fi.ModTime()
	}
	if known {
		st.StartedAt = startedAt
	}
	return st, nil
}

// orphan reports whether the run's process, started by an earlier agent process, still runs
// (its pid file names a live process running the runner command), and when it started. It
// watches such a run until it ends, then wakes the Workspace controller, as the end of a run of
// its own does.
func (l *LocalLauncher) orphan(ref Ref) (time.Time, bool) {
	raw, err := os.ReadFile(l.pidPath(ref))
	if err != nil {
		return time.Time{}, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 || !l.runs(pid, l.commandOf(ref)) {
		return time.Time{}, false
	}
	var started time.Time
	if fi, err := os.Stat(l.pidPath(ref)); err == nil {
		started = fi.ModTime()
	}
	l.mu.Lock()
	watch := !l.orphans[ref] && !l.stopping
	if watch {
		l.orphans[ref] = true
		l.wg.Add(1) // under the lock: Run waits only after it set stopping
	}
	l.mu.Unlock()
	if watch {
		go l.watchOrphan(ref, pid)
	}
	return started, true
}

// commandOf is how the command line of the run's process starts: the runner command, or for a
// verify run the check's wrapper.
func (l *LocalLauncher) commandOf(ref Ref) []string {
	if ref.Operation == runner.OperationVerify {
		return checkShell
	}
	return l.opts.Command
}

// runs reports whether pid is a live process whose command line starts with command (the
// run's: not a process that reused the pid of one that ended).
func (l *LocalLauncher) runs(pid int, command []string) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	return len(args) >= len(command) && slices.Equal(args[:len(command)], command)
}

// watchOrphan waits for the run's orphaned process to end, then wakes the Workspace controller.
func (l *LocalLauncher) watchOrphan(ref Ref, pid int) {
	defer l.wg.Done()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for l.runs(pid, l.commandOf(ref)) {
		select {
		case <-l.stopCh:
			return
		case <-tick.C:
		}
	}
	_ = os.Remove(l.pidPath(ref))
	l.mu.Lock()
	delete(l.orphans, ref)
	l.mu.Unlock()
	l.notify(ref)
}

// Prune removes the files of the Workspace's other runs.
func (l *LocalLauncher) Prune(_ context.Context, ws *magosv1.Workspace, keepRunID string) error {
	dir := l.dir(ws.Namespace, ws.Name)
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("reading run folder: %w", err)
	}
	l.mu.Lock()
	busy := map[string]bool{}
	for ref := range l.procs {
		if ref.Namespace == ws.Namespace && ref.Name == ws.Name {
			busy[ref.RunID] = true
		}
	}
	for ref := range l.started {
		if ref.Namespace == ws.Namespace && ref.Name == ws.Name && ref.RunID != keepRunID {
			delete(l.started, ref)
		}
	}
	l.mu.Unlock()
	for _, e := range entries {
		name := e.Name()
		if name == "terraform.tfstate" || name == "terraform.tfstate.backup" || (keepRunID != "" && strings.HasPrefix(name, keepRunID)) {
			continue
		}
		if busy[runIDOf(name)] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("removing old run file: %w", err)
		}
	}
	return nil
}

// runIDOf returns the run ID a run file is named after (<runID>-<op>.<ext>, such as
// r-plan.json.pid, or <runID>.tfplan; run IDs have no dot).
func runIDOf(file string) string {
	base, _, _ := strings.Cut(file, ".")
	for _, op := range []runner.Operation{runner.OperationPlan, runner.OperationApply, runner.OperationDestroy, runner.OperationVerify} {
		if s, ok := strings.CutSuffix(base, "-"+string(op)); ok {
			return s
		}
	}
	return base
}

// Forget stops the Workspace's runs, if any, and removes its folder.
func (l *LocalLauncher) Forget(_ context.Context, namespace, name string) error {
	l.mu.Lock()
	var procs []*localProc
	for ref, p := range l.procs {
		if ref.Namespace == namespace && ref.Name == name {
			p.killed = true
			procs = append(procs, p)
		}
	}
	for ref := range l.started {
		if ref.Namespace == namespace && ref.Name == name {
			delete(l.started, ref)
		}
	}
	l.mu.Unlock()
	for _, p := range procs {
		l.stop(p)
		<-p.done
	}
	if err := os.RemoveAll(l.dir(namespace, name)); err != nil {
		return fmt.Errorf("removing run folder: %w", err)
	}
	return nil
}
