package gitrepo

import (
	"path"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
)

// defaultPorts are the ports a URL may name or leave out and still mean the same server.
var defaultPorts = map[string]int{"https": 443, "http": 80, "ssh": 22, "git": 9418}

// CanonicalURL returns the one spelling of a repository address that every other spelling of
// the same repository maps to, so that Workspaces writing one repository differently roll out
// as one source:
//
//   - scheme and host are lower-cased, and a default port is dropped (443 for https, 80 for
//     http, 22 for ssh, 9418 for git);
//   - the user and password are dropped (git@, a token);
//   - https, http, ssh, git and the scp-like form (git@host:org/repo) of one host and path name
//     one repository: the canonical form of each is host[:port]/path, without a scheme;
//   - a local path and a file:// URL of the same folder are one repository, written
//     file:///folder;
//   - the path is cleaned (duplicate and trailing slashes), then a final ".git" or "/.git" is
//     dropped (a bare repository named infra.git and the folder infra/.git of a checkout both
//     name the repository infra).
//
// CanonicalURL of a canonical form is that form. The path keeps its case: servers differ on whether it matters. A URL that cannot be parsed
// is returned trimmed, as it was written.
func CanonicalURL(raw string) string {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return ""
	}
	if canonicalNetworkForm(raw) {
		// Already host/path: read it as the https URL it stands for, so that the canonical
		// form of a canonical form is itself.
		raw = "https://" + raw
	}
	ep, err := transport.NewEndpoint(raw)
	if err != nil {
		return raw
	}
	p := cleanRepoPath(ep.Path)
	proto := strings.ToLower(ep.Protocol)
	if proto == "file" {
		if !strings.HasPrefix(p, "/") {
			p = "/" + p
		}
		return "file://" + p
	}
	host := strings.ToLower(ep.Host)
	if ep.Port != 0 && ep.Port != defaultPorts[proto] {
		host += ":" + strconv.Itoa(ep.Port)
	}
	return host + "/" + strings.TrimPrefix(p, "/")
}

// canonicalNetworkForm reports whether raw is written as CanonicalURL writes a network
// repository, host[:port]/path: no scheme, no user, not a local path, a colon only before a port.
func canonicalNetworkForm(raw string) bool {
	if strings.Contains(raw, "://") || strings.Contains(raw, "@") || strings.ContainsAny(raw[:1], "/.~") {
		return false
	}
	host, _, ok := strings.Cut(raw, "/")
	if !ok || host == "" {
		return false
	}
	name, port, hasPort := strings.Cut(host, ":")
	if !hasPort {
		return true
	}
	_, err := strconv.Atoi(port)
	return name != "" && err == nil
}

// cleanRepoPath cleans a repository path and drops a final ".git" or "/.git".
func cleanRepoPath(p string) string {
	if p == "" {
		return ""
	}
	p = path.Clean(p)
	for _, suffix := range []string{"/.git", ".git"} {
		if trimmed, ok := strings.CutSuffix(p, suffix); ok && trimmed != "" && trimmed != "/" {
			p = path.Clean(trimmed)
			break
		}
	}
	if p == "." {
		return ""
	}
	return p
}

// CanonicalRef returns the one spelling of a ref (spec.source.targetRevision) that its other
// spellings map to, as Resolve reads them: "" and "HEAD" both name the remote's default branch
// ("HEAD"); "refs/heads/<branch>" is the branch <branch> (Resolve tries refs/heads/<ref>
// first, so wherever both resolve they resolve to the same commit); a commit SHA is
// lower-cased. Tags and other refs are kept as written: "v1" may name a branch as well as a
// tag, so it is not the same ref as "refs/tags/v1".
func CanonicalRef(ref string) string {
	ref = strings.TrimSpace(ref)
	switch {
	case ref == "" || ref == "HEAD":
		return "HEAD"
	case IsSHA(ref):
		return strings.ToLower(ref)
	}
	if branch, ok := strings.CutPrefix(ref, "refs/heads/"); ok && branch != "" {
		return branch
	}
	return ref
}

// CanonicalSource is the canonical spelling of a repository and ref together,
// "<CanonicalURL>@<CanonicalRef>": equal for every spelling of one source.
func CanonicalSource(repoURL, ref string) string {
	return SourceKey(CanonicalURL(repoURL), CanonicalRef(ref))
}

// SourceKey joins a repository and ref that are already canonical into CanonicalSource's form,
// for callers that hold them canonical already.
func SourceKey(canonicalURL, canonicalRef string) string {
	return canonicalURL + "@" + canonicalRef
}
