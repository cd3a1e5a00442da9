// Package firstrun holds the tests of what a first run of the developer tools prints on the
// terminal: tools/provision-assets.sh and tools/provision-node.sh (through tools/assets-lib.sh)
// show a few progress lines and keep what the go commands print in a log file, and
// tools/prereqs.sh names the missing Debian packages and the command that installs them before
// make builds anything. See README.md ("The first run").
package firstrun
