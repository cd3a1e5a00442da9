package gitrepo

import "testing"

// TestCanonicalURL: every spelling of one repository maps to one canonical form, and
// different repositories stay different.
func TestCanonicalURL(t *testing.T) {
	same := map[string][]string{
		"example.com/org/infra": {
			"https://example.com/org/infra",
			"https://example.com/org/infra.git",
			"https://example.com/org/infra/",
			"https://example.com/org/infra.git/",
			"HTTPS://Example.COM/org/infra",
			"https://example.com:443/org/infra",
			"http://example.com/org/infra",
			"http://example.com:80/org/infra",
			"https://user:token@example.com/org/infra.git",
			"ssh://git@example.com/org/infra.git",
			"ssh://git@example.com:22/org/infra",
			"git@example.com:org/infra.git",
			"git@example.com:org/infra",
			"git://example.com/org/infra",
			"  https://example.com//org/infra  ",
		},
		"example.com:8443/org/infra": {
			"https://example.com:8443/org/infra.git",
		},
		"file:///srv/git/repo": {
			"file:///srv/git/repo",
			"file:///srv/git/repo/",
			"file:///srv/git/repo/.git",
			"file:///srv/git/repo/.git/",
			"file:///srv/git/repo.git",
			"/srv/git/repo",
			"/srv/git/repo/",
			"/srv/git//repo/.git",
		},
		"example.com/Org/Infra": {
			"https://example.com/Org/Infra",
		},
	}
	for want, spellings := range same {
		for _, in := range spellings {
			if got := CanonicalURL(in); got != want {
				t.Errorf("CanonicalURL(%q) = %q, want %q", in, got, want)
			}
		}
		if got := CanonicalURL(want); got != want {
			t.Errorf("CanonicalURL of the canonical form %q = %q, want it unchanged", want, got)
		}
	}
	// Different repositories never share a canonical form.
	seen := map[string]string{}
	for _, in := range []string{
		"https://example.com/org/infra",
		"https://example.com/org/infra2",
		"https://example.com/other/infra",
		"https://git.example.com/org/infra",
		"https://example.com:8443/org/infra",
		"https://example.com/org/Infra",
		"file:///srv/git/repo",
		"file:///srv/git/repo2",
		"file:///srv/repo",
	} {
		c := CanonicalURL(in)
		if prev, dup := seen[c]; dup {
			t.Errorf("%q and %q share the canonical form %q", prev, in, c)
		}
		seen[c] = in
	}
	if got := CanonicalURL(""); got != "" {
		t.Errorf("CanonicalURL(\"\") = %q, want empty", got)
	}
}

// TestCanonicalRef: a branch and its full ref name, "" and HEAD, and a SHA in either case are
// one ref each; tags and other refs are kept.
func TestCanonicalRef(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"main", "main"},
		{"refs/heads/main", "main"},
		{" refs/heads/release/1.2 ", "release/1.2"},
		{"", "HEAD"},
		{"HEAD", "HEAD"},
		{"v1.2.0", "v1.2.0"},
		{"refs/tags/v1.2.0", "refs/tags/v1.2.0"},
		{"refs/heads/", "refs/heads/"},
		{"0123456789ABCDEF0123456789abcdef01234567", "0123456789abcdef0123456789abcdef01234567"},
	} {
		if got := CanonicalRef(tc.in); got != tc.want {
			t.Errorf("CanonicalRef(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := CanonicalRef(tc.want); got != tc.want {
			t.Errorf("CanonicalRef of the canonical form %q = %q, want it unchanged", tc.want, got)
		}
	}
}

// TestCanonicalSource joins the two canonical forms.
func TestCanonicalSource(t *testing.T) {
	a := CanonicalSource("https://example.com/org/infra.git", "refs/heads/main")
	b := CanonicalSource("git@example.com:org/infra", "main")
	if a != b || a != "example.com/org/infra@main" {
		t.Errorf("CanonicalSource: %q and %q, want both example.com/org/infra@main", a, b)
	}
}
