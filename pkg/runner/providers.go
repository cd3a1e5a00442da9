package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// LockFile is the module's dependency lock file. The runner never removes, rewrites or
// upgrades it (init runs without -upgrade): tofu checks every provider it installs against
// the checksums it records, and a provider that matches none fails the run (initFailure).
const LockFile = ".terraform.lock.hcl"

// providerSources are where a run's tool installs providers from, when the run's environment
// names any (EnvProviderMirror, EnvProviderNetworkMirror).
type providerSources struct {
	set     bool     // either variable is set: install from these only, never from a registry
	mirrors []string // existing mirror folders, in the order given
	missing []string // mirror folders given that do not exist (skipped)
	network string   // network mirror URL, "" for none
}

// providerSourcesOf reads EnvProviderMirror and EnvProviderNetworkMirror from env. A folder
// must be an absolute path; one that does not exist is skipped (a Job lists the image's
// folder, ImageProviderMirror, after its own, and another runner image may lack it). The URL
// must be https:// (CheckNetworkMirrorURL).
func providerSourcesOf(env []string) (providerSources, error) {
	var s providerSources
	if list := getenv(env, EnvProviderMirror); list != "" {
		s.set = true
		for _, dir := range strings.Split(list, ":") {
			if dir == "" {
				continue
			}
			if !filepath.IsAbs(dir) {
				return s, fmt.Errorf("%s: %q is not an absolute path", EnvProviderMirror, dir)
			}
			switch fi, err := os.Stat(dir); {
			case errors.Is(err, fs.ErrNotExist):
				s.missing = append(s.missing, dir)
			case err != nil:
				return s, fmt.Errorf("%s: %w", EnvProviderMirror, err)
			case !fi.IsDir():
				return s, fmt.Errorf("%s: %s is not a folder", EnvProviderMirror, dir)
			default:
				s.mirrors = append(s.mirrors, filepath.Clean(dir))
			}
		}
	}
	if u := getenv(env, EnvProviderNetworkMirror); u != "" {
		if err := CheckNetworkMirrorURL(u); err != nil {
			return s, fmt.Errorf("%s: %w", EnvProviderNetworkMirror, err)
		}
		s.set = true
		// A base URL: the mirror protocol's paths are resolved below it.
		if !strings.HasSuffix(u, "/") {
			u += "/"
		}
		s.network = u
	}
	return s, nil
}

// CheckNetworkMirrorURL fails unless raw is a provider network mirror URL tofu accepts: https://
// and a host (tofu refuses any other scheme). The agent checks its flag with it at start.
func CheckNetworkMirrorURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %w", raw, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q: want an https:// URL with a host (OpenTofu installs from network mirrors over https only)", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: want a base URL without credentials, query or fragment (credentials go in a CLI configuration's credentials block)", raw)
	}
	return nil
}

// String lists the sources for messages.
func (s providerSources) String() string {
	var parts []string
	for _, dir := range s.mirrors {
		parts = append(parts, "folder "+dir)
	}
	for _, dir := range s.missing {
		parts = append(parts, "folder "+dir+" (missing, skipped)")
	}
	if s.network != "" {
		parts = append(parts, "network mirror "+s.network)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// cliConfigFile is the tool's CLI configuration (OpenTofu reads JSON as well as HCL): only
// provider_installation, with one filesystem_mirror per folder and the network_mirror, in that
// order, and no direct block, so no provider ever comes from a registry.
type cliConfigFile struct {
	ProviderInstallation []providerInstallation `json:"provider_installation,omitempty"`
}

type providerInstallation struct {
	FilesystemMirror []map[string]string `json:"filesystem_mirror,omitempty"`
	NetworkMirror    []map[string]string `json:"network_mirror,omitempty"`
}

// cliConfig returns the tool's CLI configuration file. The file TF_CLI_CONFIG_FILE names in the
// run's environment wins when it exists (an operator's own configuration: a runner image's, a
// local agent's); one that does not exist is ignored. Otherwise the runner writes one into the
// run's folder: empty when the environment names no provider source (tofu's defaults), else a
// provider_installation with those sources only. Either way no CLI configuration of the
// machine (~/.tofurc, ~/.terraformrc) applies.
func (r *run) cliConfig() (string, error) {
	if own := getenv(r.opts.Env, EnvCLIConfigFile); own != "" {
		_, err := os.Stat(own)
		switch {
		case err == nil:
			r.log.Info("Using the CLI configuration the run's environment names: it decides where providers come from", "file", own)
			return own, nil
		case !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("%s: %w", EnvCLIConfigFile, err)
		}
		r.log.V(1).Info("The CLI configuration the run's environment names does not exist; using the runner's", "file", own)
	}
	sources, err := providerSourcesOf(r.opts.Env)
	if err != nil {
		return "", err
	}
	r.providers = sources
	var content []byte
	if sources.set {
		if len(sources.missing) > 0 {
			r.log.Info("Provider mirror folders missing; skipped", "folders", sources.missing)
		}
		var pi providerInstallation
		for _, dir := range sources.mirrors {
			pi.FilesystemMirror = append(pi.FilesystemMirror, map[string]string{"path": dir})
		}
		if sources.network != "" {
			pi.NetworkMirror = append(pi.NetworkMirror, map[string]string{"url": sources.network})
		}
		if content, err = json.MarshalIndent(cliConfigFile{ProviderInstallation: []providerInstallation{pi}}, "", "  "); err != nil {
			return "", fmt.Errorf("encoding the CLI configuration: %w", err)
		}
		r.log.V(1).Info("Providers come from mirrors only", "sources", sources.String())
	}
	path := filepath.Join(r.dir, "cli.tfrc")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		return "", fmt.Errorf("writing the CLI configuration: %w", err)
	}
	return path, nil
}

// initFailure explains a failed init in the terms of the run: a provider that matches none of
// the checksums of the module's lock file, or one that none of the run's provider sources has.
func (r *run) initFailure(err error) error {
	// The tool wraps its messages to its width: match on the words alone.
	msg := strings.Join(strings.Fields(err.Error()), " ")
	switch {
	case strings.Contains(msg, "match any of the checksums") && strings.Contains(msg, "recorded in the dependency lock file"):
		return fmt.Errorf("a provider package does not match the checksums in the module's dependency lock file (%s), so it was not installed: fix the mirror, or the lock file for the mirror's packages (tofu providers lock): %w", LockFile, err)
	case r.providers.set && (strings.Contains(msg, "Failed to query available provider packages") ||
		strings.Contains(msg, "Failed to resolve provider packages") || strings.Contains(msg, "Failed to install provider")):
		return fmt.Errorf("a provider could not be installed from the run's provider sources (%s; no registry is ever contacted): add it to a mirror: %w", r.providers, err)
	}
	return err
}
