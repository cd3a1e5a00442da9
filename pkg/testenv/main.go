package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/magosfleet/magos/pkg/localcluster"
)

// DebugEnv is the environment variable that, when set, makes Main's logger log at debug level
// instead of errors only.
const DebugEnv = "MAGOS_TEST_DEBUG"

// MainOptions configures Main: what a package's tests share.
type MainOptions struct {
	// Fleet are the test clusters started before the tests (localcluster.New) and stopped
	// after them.
	Fleet localcluster.Options
	// Logger, when set, is controller-runtime's logger. By default it is zap in development
	// mode, errors only, or from debug level up when MAGOS_TEST_DEBUG is set.
	Logger *logr.Logger
	// Setup, when set, runs once the clusters run, before the tests: it fills the package's
	// shared state from env.Fleet, and starts what the tests share (env.Background), with
	// env.Cleanup for what to undo after them. An error fails the run before any test.
	Setup func(env *MainEnv) error
}

// MainEnv is what MainOptions.Setup gets: the running test clusters, and where to register what
// runs after the tests.
type MainEnv struct {
	// Fleet is the running test clusters.
	Fleet *localcluster.Fleet

	cleanups []func(code int)
}

// Cleanup registers f to run after the tests (or after a failed Setup) with the run's exit
// code, before the clusters stop. Clean-ups run last registered first, as testing.T.Cleanup's.
func (e *MainEnv) Cleanup(f func(code int)) {
	e.cleanups = append(e.cleanups, f)
}

// Background runs start (a manager's Start) in the background from now until the tests end, or
// until the returned stop is called; stop cancels it and waits for it to return, and a returned
// error is printed naming what. It is Background for a TestMain.
func (e *MainEnv) Background(what string, start func(context.Context) error) (stop func()) {
	halt := Go(context.Background(), start)
	stop = func() {
		if err := halt(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		}
	}
	e.Cleanup(func(int) { stop() })
	return stop
}

// Main is a package's TestMain: it parses the flags, gives controller-runtime its logger,
// starts the test clusters of opts.Fleet, runs opts.Setup and the tests, undoes the set-up,
// stops the clusters and exits with the tests' code. A `go test -fuzz` worker process, and a
// fuzzing run that runs no tests (-run '^$'), only run the fuzz target: no logger, clusters
// or set-up.
func Main(m *testing.M, opts MainOptions) {
	os.Exit(RunMain(m, opts))
}

// RunMain is Main returning the exit code instead of exiting, for a TestMain that has clean-up
// of its own to do around it.
func RunMain(m *testing.M, opts MainOptions) int {
	flag.Parse()
	if fuzzOnly() {
		return m.Run()
	}
	if opts.Logger != nil {
		ctrl.SetLogger(*opts.Logger)
	} else {
		ctrl.SetLogger(DefaultLogger())
	}
	fleet, err := localcluster.New(opts.Fleet)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting test clusters:", err)
		return 1
	}
	defer func() {
		if err := fleet.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping test clusters:", err)
		}
	}()
	env := &MainEnv{Fleet: fleet}
	code := 1
	defer func() {
		for i := len(env.cleanups) - 1; i >= 0; i-- {
			env.cleanups[i](code)
		}
	}()
	if opts.Setup != nil {
		if err := opts.Setup(env); err != nil {
			fmt.Fprintln(os.Stderr, "setting up the tests:", err)
			return code
		}
	}
	code = m.Run()
	return code
}

// DefaultLogger is Main's default logger: zap in development mode, errors only, or from debug
// level up when MAGOS_TEST_DEBUG is set.
func DefaultLogger() logr.Logger {
	level := zapcore.ErrorLevel
	if os.Getenv(DebugEnv) != "" {
		level = zapcore.DebugLevel
	}
	return zap.New(zap.UseDevMode(true), zap.Level(level))
}

// fuzzOnly reports whether this process only fuzzes: a fuzz worker, or a fuzzing run that runs
// no tests. Neither needs clusters.
func fuzzOnly() bool {
	return flagValue("test.fuzzworker") == "true" || (flagValue("test.fuzz") != "" && flagValue("test.run") == "^$")
}

func flagValue(name string) string {
	if f := flag.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}
