// Package generated holds the test that fails when the generated files (deepcopy code and the
// CRDs of both charts) are out of date with the API types. Run `make generate` to fix it.
package generated
