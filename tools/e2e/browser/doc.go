// Package browser holds the end-to-end tests of the hub's dashboard in a real browser (Debian's
// headless Chromium, driven with chromedp): on a real fleet (real API servers, the real magos-hub
// and magos-agent binaries, real OpenTofu runs) they sign in (with a token, or through a real
// OpenID provider), follow a Rollout live, act on it, and read its timeline and the fleet page.
// They live apart from package e2e so that `go test ./...` runs them beside it. Screenshots are
// saved under MAGOS_ARTIFACTS_DIR (default bin/artifacts).
package browser
