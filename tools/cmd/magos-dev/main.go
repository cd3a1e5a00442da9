// Command magos-dev runs Magos Fleet on one machine.
//
//	magos-dev up   [--spokes us-east-1,eu-west-1,ap-south-1] [--single] [--dir DIR]
//	magos-dev demo [--spokes ...] [--fail-region REGION] [--dir DIR]
//
// up starts a hub API server and spoke API servers, registers the spokes with the hub as agent
// clusters, runs the hub and one agent per spoke (Workspaces run as local processes), writes
// hub.kubeconfig and <spoke>.kubeconfig into --dir, prints the dashboard's address (--dashboard)
// and where the token to sign in with is, prints "ready" and runs until interrupted.
// demo does the same, then rolls a small module out region by region and exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/magosfleet/magos/pkg/version"
	"github.com/magosfleet/magos/tools/demo"
	"github.com/magosfleet/magos/tools/devfleet"
	"github.com/magosfleet/magos/tools/workdir"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "magos-dev:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "version") {
		fmt.Println(version.Get())
		return nil
	}
	if len(args) == 0 || (args[0] != "up" && args[0] != "demo") {
		return errors.New("usage: magos-dev up|demo [flags] (see --help)")
	}
	cmd := args[0]
	fs := pflag.NewFlagSet("magos-dev "+cmd, pflag.ContinueOnError)
	spokes := fs.StringSlice("spokes", devfleet.DefaultSpokes, "spoke clusters to start")
	single := fs.Bool("single", false, "one cluster that is both hub and spoke")
	dir := fs.String("dir", defaultDir(), "folder for kubeconfigs, logs and run data")
	failRegion := fs.String("fail-region", "", "demo: make this region's Workspace fail, to show the Rollout halting")
	approval := fs.Bool("approval", false, "demo: the last region's step requires approval; the demo waits for magosctl rollout approve")
	planFirst := fs.Bool("plan-first", false, "demo: the Rollout previews the change in every region (spec.planFirst) before the first applies")
	drift := fs.Bool("drift", false, "demo: every step's drift is block; a ConfigMap edited by hand in the second region holds the next release until the drift is accepted")
	rollback := fs.Bool("rollback", false, "demo: every step runs a smoke-test check after its apply; release v2 fails it in the second region, and the Rollout (onFailure: Rollback) returns the regions that applied v2 to v1, last first")
	timeout := fs.Duration("timeout", 10*time.Minute, "demo: give up after this long")
	dashboard := fs.String("dashboard", "127.0.0.1:8480", "address of the hub's dashboard, host:port (empty turns it off)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	for _, s := range *spokes {
		if s == "" || s == "hub" || strings.ContainsAny(s, " /") {
			return fmt.Errorf("--spokes: %q is not a usable cluster name", s)
		}
	}
	if cmd == "demo" && *single {
		return errors.New("demo: --single has no regions to roll out to; use up --single")
	}
	if *drift && (*failRegion != "" || *approval || *planFirst) {
		return errors.New("demo: --drift runs a scenario of its own; leave out --fail-region, --approval and --plan-first")
	}
	if *rollback && (*drift || *failRegion != "" || *approval || *planFirst) {
		return errors.New("demo: --rollback runs a scenario of its own; leave out --drift, --fail-region, --approval and --plan-first")
	}
	if *drift && len(*spokes) < 2 {
		return errors.New("demo: --drift needs at least two spokes")
	}
	// --dir is emptied only when magos-dev made it: never a folder of the user's. The default
	// folder is in Magos's own cache; an earlier magos-dev filled it without a marker.
	if !fs.Changed("dir") {
		if err := workdir.Claim(*dir, "magos-dev "+cmd); err != nil {
			return err
		}
	}
	if err := workdir.Prepare(*dir, "magos-dev "+cmd); err != nil {
		return fmt.Errorf("--dir: %w", err)
	}
	started := time.Now()
	fopts := devfleet.Options{Dir: *dir, Spokes: *spokes, Single: *single, Progress: os.Stderr, Dashboard: *dashboard}
	var hook *webhook
	if cmd == "demo" {
		// The hub tells a webhook on this machine what happens; it prints each notification.
		var err error
		if hook, err = startWebhook(os.Stdout); err != nil {
			return err
		}
		defer hook.stop()
		fopts.Notifications = hook.config()
	}
	fleet, err := devfleet.Start(ctx, fopts)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(os.Stderr, "magos-dev: stopping")
		if err := fleet.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "magos-dev:", err)
		}
	}()
	fmt.Fprintf(os.Stderr, "magos-dev: fleet up in %s; kubeconfigs in %s, logs in %s\n",
		time.Since(started).Round(time.Second), *dir, filepath.Join(*dir, "logs"))
	if err := printDashboard(ctx, fleet); err != nil {
		return err
	}
	if hook != nil {
		if err := hook.register(ctx, fleet); err != nil {
			return err
		}
		fmt.Printf("notifications: the hub sends each step's start, approval wait and completion, and any failure, to a webhook on %s; each arrives below as a \"notification:\" line\n", hook.url)
	}
	if cmd == "up" {
		fmt.Println("ready")
		fmt.Printf("  kubectl --kubeconfig %s get clusters\n", fleet.Kubeconfig("hub"))
		for _, s := range fleet.Order {
			fmt.Printf("  kubectl --kubeconfig %s get workspaces -A\n", fleet.Kubeconfig(s))
		}
		<-ctx.Done()
		return nil
	}
	if *drift {
		ds, err := demo.RunDrift(ctx, fleet, demo.DriftOptions{Options: demo.Options{Out: os.Stdout, Timeout: *timeout}})
		if err != nil {
			return err
		}
		ds.Final.Print(os.Stdout)
		fmt.Printf("\ndemo: the drift in %s held release v2 (%s) until it was accepted; total wall time %s (including start-up)\n",
			ds.Region, ds.Held, time.Since(started).Round(time.Second))
		if !ds.Final.Completed {
			return errors.New("demo: the Rollout did not complete after the drift was accepted")
		}
		return nil
	}
	if *rollback {
		if len(fleet.Order) < 2 {
			return errors.New("demo: --rollback needs at least two spokes")
		}
		rs, err := demo.RunRollback(ctx, fleet, demo.RollbackOptions{OnFailure: true,
			Options: demo.Options{Out: os.Stdout, Timeout: *timeout, Verification: demo.SmokeCheck(fleet.Order[1])}})
		if err != nil {
			return err
		}
		fmt.Printf("\ndemo: release v2 (%.12s) failed its smoke test in %s; the fleet is back at v1 (%.12s), last region first; total wall time %s (including start-up)\n",
			rs.From, fleet.Order[1], rs.To, time.Since(started).Round(time.Second))
		return nil
	}
	summary, err := demo.Run(ctx, fleet, demo.Options{FailRegion: *failRegion, Approval: *approval, PlanFirst: *planFirst, Out: os.Stdout, Timeout: *timeout})
	if err != nil {
		return err
	}
	hook.waitForLast(ctx, 30*time.Second)
	summary.Print(os.Stdout)
	fmt.Printf("\ndemo: total wall time %s (including start-up)\n", time.Since(started).Round(time.Second))
	switch {
	case *failRegion == "" && !summary.Completed:
		return errors.New("demo: the Rollout did not complete")
	case *failRegion != "" && summary.HaltedAt != *failRegion:
		return fmt.Errorf("demo: expected the Rollout to halt at %s, it halted at %q", *failRegion, summary.HaltedAt)
	}
	return nil
}

// printDashboard prints the dashboard's address and writes a token to sign in with into the
// fleet's folder.
func printDashboard(ctx context.Context, fleet *devfleet.Fleet) error {
	url := fleet.DashboardURL()
	if url == "" {
		return nil
	}
	token, err := fleet.DashboardToken(ctx)
	if err != nil {
		return err
	}
	operator, err := fleet.OperatorToken(ctx)
	if err != nil {
		return err
	}
	file, opFile := filepath.Join(fleet.Dir, "dashboard.token"), filepath.Join(fleet.Dir, "dashboard-operator.token")
	for f, t := range map[string]string{file: token, opFile: operator} {
		if err := os.WriteFile(f, []byte(t+"\n"), 0o600); err != nil {
			return fmt.Errorf("writing a dashboard token: %w", err)
		}
	}
	fmt.Printf("dashboard: %s (sign in with the token in %s to look, or in %s to act: pause, approve, reject, retry)\n", url, file, opFile)
	return nil
}

func defaultDir() string {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "magos", "dev")
}
