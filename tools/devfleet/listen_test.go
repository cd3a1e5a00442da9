package devfleet

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeHubEnv makes the test binary act as a stand-in for magos-hub (see fakeHub).
const fakeHubEnv = "DEVFLEET_FAKE_HUB"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeHubEnv); mode != "" {
		os.Exit(fakeHub(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeHub is a simulated stand-in for magos-hub, for the start-up's handling of the hub's
// listeners only: the real hub cannot be made to lose its port to another process on cue. It
// listens on its --metrics-bind-address and --dashboard-bind-address until killed, as the hub
// does, except that in mode "taken-once" its first start fails as the hub does when a port was
// taken ("address already in use"), and in mode "crash" it exits with another error.
func fakeHub(mode string, args []string) int {
	fs := flag.NewFlagSet("magos-hub", flag.ContinueOnError)
	metrics := fs.String("metrics-bind-address", "0", "")
	dashboard := fs.String("dashboard-bind-address", "", "")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	marker := os.Getenv("DEVFLEET_FAKE_HUB_MARKER")
	switch mode {
	case "crash":
		fmt.Println("ERROR\tsetup\tthe hub's config file: clusters[0].name is required")
		return 1
	case "taken-once":
		if _, err := os.Stat(marker); err != nil {
			_ = os.WriteFile(marker, nil, 0o600)
			fmt.Printf("ERROR\tsetup\tproblem running manager: listen tcp %s: bind: address already in use\n", *metrics)
			return 1
		}
	}
	for _, addr := range []string{*metrics, *dashboard} {
		if addr == "" || addr == "0" {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Printf("ERROR\tsetup\tproblem running manager: %v\n", err)
			return 1
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
	}
	select {}
}

// fakeFleet is a Fleet whose bin/magos-hub is the test binary, as fakeHub.
func fakeFleet(t *testing.T, mode string) *Fleet {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"bin", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(dir, "bin", "magos-hub")); err != nil {
		t.Fatal(err)
	}
	t.Setenv(fakeHubEnv, mode)
	t.Setenv("DEVFLEET_FAKE_HUB_MARKER", filepath.Join(dir, "started-once"))
	f := &Fleet{Dir: dir, out: &strings.Builder{}}
	t.Cleanup(func() {
		for _, p := range f.procs {
			stop(p)
		}
	})
	return f
}

// TestStartHubOnATakenPort checks the hub's start-up when a port is taken: a port the fleet
// chose (AnyAddress) and lost to another process before the hub bound it starts the hub again
// on another; an address the caller named is not changed, and a hub that exits fails the start
// at once with the end of its log.
func TestStartHubOnATakenPort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("a chosen port taken meanwhile: started again on another", func(t *testing.T) {
		f := fakeFleet(t, "taken-once")
		metrics := &hubListener{flag: "--metrics-bind-address", asked: AnyAddress}
		dashboard := &hubListener{flag: "--dashboard-bind-address", asked: AnyAddress}
		if err := f.startHub(ctx, "hub", []string{"controller"}, []*hubListener{metrics, dashboard}); err != nil {
			t.Fatalf("startHub: %v", err)
		}
		if len(f.procs) != 1 || f.procs[0].exited() {
			t.Fatalf("want one hub process running, have %d", len(f.procs))
		}
		for _, l := range []*hubListener{metrics, dashboard} {
			conn, err := net.DialTimeout("tcp", l.addr, time.Second)
			if err != nil {
				t.Fatalf("%s: the hub does not listen on %s: %v", l.flag, l.addr, err)
			}
			_ = conn.Close()
		}
		if got := f.out.(*strings.Builder).String(); !strings.Contains(got, "starting the hub again on another (attempt 2 of 5)") {
			t.Errorf("progress does not say the hub was started again:\n%s", got)
		}
	})

	t.Run("a named port taken: no second start, the log quoted", func(t *testing.T) {
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		f := fakeFleet(t, "listen")
		err = f.startHub(ctx, "hub", []string{"controller"}, []*hubListener{{flag: "--metrics-bind-address", asked: taken.Addr().String()}})
		if err == nil || !strings.Contains(err.Error(), "hub exited") || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("want the hub's exit with its log's bind error, got %v", err)
		}
		if got := f.out.(*strings.Builder).String(); strings.Contains(got, "again") {
			t.Errorf("a port the caller named was changed:\n%s", got)
		}
	})

	t.Run("a hub that exits otherwise: no second start, the log quoted", func(t *testing.T) {
		f := fakeFleet(t, "crash")
		err := f.startHub(ctx, "hub", []string{"controller"}, []*hubListener{{flag: "--metrics-bind-address", asked: AnyAddress}})
		if err == nil || !strings.Contains(err.Error(), "clusters[0].name is required") {
			t.Fatalf("want the hub's exit with its log, got %v", err)
		}
		if len(f.procs) != 0 {
			t.Errorf("an exited hub was kept as the fleet's process")
		}
	})

	t.Run("a process that exits while the fleet waits fails the wait at once", func(t *testing.T) {
		f := fakeFleet(t, "crash")
		p := &process{name: "hub", binary: "magos-hub", args: []string{"controller"}}
		if err := f.launch(p); err != nil {
			t.Fatal(err)
		}
		f.procs = append(f.procs, p)
		start := time.Now()
		err := f.poll(ctx, time.Minute, func() error { return fmt.Errorf("not yet") })
		if err == nil || !strings.Contains(err.Error(), "clusters[0].name is required") {
			t.Fatalf("want the exit with the log's end, got %v", err)
		}
		if waited := time.Since(start); waited > 30*time.Second {
			t.Errorf("the wait went on %s after the process exited", waited)
		}
	})
}
