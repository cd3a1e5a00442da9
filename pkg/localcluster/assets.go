package localcluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

var (
	assetsOnce sync.Once
	assetsDir  string
	assetsErr  error
)

// Assets returns the folder holding etcd and kube-apiserver. It honours KUBEBUILDER_ASSETS and
// otherwise runs tools/provision-assets.sh (cheap once cached), which also sets MAGOS_TOFU and
// MAGOS_PROVIDERS for the rest of the process.
func Assets() (string, error) {
	assetsOnce.Do(func() {
		if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
			assetsDir = dir
			return
		}
		assetsErr = provision()
		assetsDir = os.Getenv("KUBEBUILDER_ASSETS")
	})
	if assetsErr != nil {
		return "", assetsErr
	}
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(assetsDir, bin)); err != nil {
			return "", fmt.Errorf("test assets: %s missing in KUBEBUILDER_ASSETS=%s: run tools/provision-assets.sh", bin, assetsDir)
		}
	}
	return assetsDir, nil
}

// Tofu returns the path of the tofu binary the tests run (MAGOS_TOFU, else provisioned).
func Tofu() (string, error) { return provisioned("MAGOS_TOFU") }

// Providers returns the provider mirror the tests and the dev fleet's runs install providers
// from (MAGOS_PROVIDERS, else provisioned): a folder in OpenTofu's unpacked filesystem mirror
// layout holding the providers the runner image carries (see docs/providers.md).
func Providers() (string, error) { return provisioned("MAGOS_PROVIDERS") }

// provisioned returns the environment variable name, running tools/provision-assets.sh first
// (which sets it) when it is empty.
func provisioned(name string) (string, error) {
	if p := os.Getenv(name); p != "" {
		return p, nil
	}
	if err := provision(); err != nil {
		return "", err
	}
	return os.Getenv(name), nil
}

var provisionMu sync.Mutex

func provision() error {
	provisionMu.Lock()
	defer provisionMu.Unlock()
	if os.Getenv("KUBEBUILDER_ASSETS") != "" && os.Getenv("MAGOS_TOFU") != "" && os.Getenv("MAGOS_PROVIDERS") != "" {
		return nil
	}
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	// Its progress lines, and on a failure the tail of its log and the log's path, go straight to
	// the terminal; the error does not repeat them.
	var out bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(root, "tools", "provision-assets.sh"))
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("test assets: tools/provision-assets.sh: %w (what it said is above)", err)
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			if err := os.Setenv(k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// RepoRoot returns the root of the checkout (the folder holding go.work).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("localcluster: no go.work above the working directory")
		}
		dir = parent
	}
}

// childPIDsWithArg returns the PIDs of this process's children whose command line mentions arg.
func childPIDsWithArg(arg string) []int {
	entries, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// stat: pid (comm) state ppid ...
		rest := string(stat[bytes.LastIndexByte(stat, ')')+2:])
		fields := strings.Fields(rest)
		if len(fields) < 2 || fields[1] != self {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if arg == "" || bytes.Contains(cmdline, []byte(arg)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// RSSBytes returns the resident memory of the given processes, summed.
func RSSBytes(pids ...int) int64 {
	var total int64
	for _, pid := range pids {
		status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				total += kb * 1024
			}
		}
	}
	return total
}

// CPUSeconds returns the CPU time (user and system) the given processes have used, summed.
func CPUSeconds(pids ...int) float64 {
	const ticksPerSecond = 100 // USER_HZ, 100 on every Linux architecture Go supports
	var ticks int64
	for _, pid := range pids {
		stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			continue
		}
		// stat: pid (comm) state ppid ...; utime and stime are fields 14 and 15.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
		if len(fields) < 13 {
			continue
		}
		for _, f := range fields[11:13] {
			n, _ := strconv.ParseInt(f, 10, 64)
			ticks += n
		}
	}
	return float64(ticks) / ticksPerSecond
}
