// Package release builds what a Magos Fleet release ships besides the binaries: the images as
// multi-platform OCI image indexes assembled from the cross-compiled files (no base image, no
// registry, no Docker), the packaged charts, the release notes taken from CHANGELOG.md and the
// checksums. The Makefile's release target drives it through cmd/magos-release; see
// docs/releasing.md.
//
// The images are described once, by the repository's Dockerfile: ParseDockerfile reads the
// subset of it the images use (FROM scratch or an earlier stage, COPY, USER, ENV, ENTRYPOINT,
// CMD) and refuses anything else, so the Dockerfile cannot grow an instruction the release
// would silently ignore.
package release

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Copy is one COPY instruction: the sources, relative to the build context, and the
// destination in the image. A source ending in "/" copies the folder's contents.
type Copy struct {
	Sources []string
	Dest    string
}

// Stage is one build stage of the Dockerfile with its parent's instructions already applied:
// the copies in order (each becomes one layer), and the image config it ends with.
type Stage struct {
	Name       string
	Copies     []Copy
	User       string
	Env        []string // KEY=VALUE, in the order set; a later value replaces an earlier one
	Entrypoint []string
	Cmd        []string

	cmdSet bool // CMD was set in this stage (not inherited), so a later ENTRYPOINT keeps it
}

// ParseDockerfile reads the stages of a Dockerfile written in the subset the images use. Every
// stage must be named (FROM ... AS name) and start FROM scratch or from an earlier stage.
func ParseDockerfile(r io.Reader) (map[string]*Stage, error) {
	stages := map[string]*Stage{}
	var cur *Stage
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			return nil, fmt.Errorf("Dockerfile line %d: line continuations are not supported", n)
		}
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		instr = strings.ToUpper(instr)
		if instr != "FROM" && cur == nil {
			return nil, fmt.Errorf("Dockerfile line %d: %s before the first FROM", n, instr)
		}
		var err error
		switch instr {
		case "FROM":
			cur, err = fromStage(rest, stages)
		case "COPY":
			err = parseCopy(rest, cur)
		case "USER":
			if rest == "" || strings.Contains(rest, " ") {
				err = fmt.Errorf("USER %q: want one user[:group]", rest)
			}
			cur.User = rest
		case "ENV":
			err = parseEnv(rest, cur)
		case "ENTRYPOINT":
			cur.Entrypoint, err = execForm(rest)
			// As in Docker, an ENTRYPOINT drops a CMD inherited from the parent stage.
			if !cur.cmdSet {
				cur.Cmd = nil
			}
		case "CMD":
			cur.Cmd, err = execForm(rest)
			cur.cmdSet = true
		default:
			err = fmt.Errorf("%s is not supported by the release's image assembly (tools/release)", instr)
		}
		if err != nil {
			return nil, fmt.Errorf("Dockerfile line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("Dockerfile has no stage")
	}
	return stages, nil
}

func fromStage(rest string, stages map[string]*Stage) (*Stage, error) {
	f := strings.Fields(rest)
	if len(f) != 3 || !strings.EqualFold(f[1], "AS") {
		return nil, fmt.Errorf("FROM %q: want FROM scratch|<stage> AS <name>", rest)
	}
	base, name := f[0], f[2]
	if _, dup := stages[name]; dup {
		return nil, fmt.Errorf("stage %q defined twice", name)
	}
	s := &Stage{Name: name}
	if base != "scratch" {
		parent, ok := stages[base]
		if !ok {
			return nil, fmt.Errorf("FROM %s: only scratch or an earlier stage (no image is pulled)", base)
		}
		s.Copies = append([]Copy(nil), parent.Copies...)
		s.User = parent.User
		s.Env = append([]string(nil), parent.Env...)
		s.Entrypoint = append([]string(nil), parent.Entrypoint...)
		s.Cmd = append([]string(nil), parent.Cmd...)
	}
	stages[name] = s
	return s, nil
}

func parseCopy(rest string, s *Stage) error {
	f := strings.Fields(rest)
	if len(f) < 2 {
		return fmt.Errorf("COPY %q: want sources and a destination", rest)
	}
	for _, a := range f {
		if strings.HasPrefix(a, "--") || strings.ContainsAny(a, "*?[") {
			return fmt.Errorf("COPY %q: flags and wildcards are not supported", rest)
		}
	}
	c := Copy{Sources: f[:len(f)-1], Dest: f[len(f)-1]}
	if len(c.Sources) > 1 && !strings.HasSuffix(c.Dest, "/") {
		return fmt.Errorf("COPY %q: several sources need a destination folder ending in /", rest)
	}
	if !strings.HasPrefix(c.Dest, "/") {
		return fmt.Errorf("COPY %q: the destination must be absolute", rest)
	}
	s.Copies = append(s.Copies, c)
	return nil
}

func parseEnv(rest string, s *Stage) error {
	f := strings.Fields(rest)
	if len(f) == 0 {
		return fmt.Errorf("ENV without a value")
	}
	for _, kv := range f {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(kv, `"'$`) {
			return fmt.Errorf("ENV %q: want KEY=VALUE pairs without quotes or variables", kv)
		}
		s.Env = setEnv(s.Env, kv)
	}
	return nil
}

// setEnv sets KEY=VALUE in env, replacing an earlier value of KEY in place.
func setEnv(env []string, kv string) []string {
	k, _, _ := strings.Cut(kv, "=")
	for i, e := range env {
		if strings.HasPrefix(e, k+"=") {
			env[i] = kv
			return env
		}
	}
	return append(env, kv)
}

func execForm(rest string) ([]string, error) {
	var args []string
	if err := json.Unmarshal([]byte(rest), &args); err != nil || len(args) == 0 {
		return nil, fmt.Errorf("%q: want the exec form, a JSON array of strings", rest)
	}
	return args, nil
}
