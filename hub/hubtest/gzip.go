package hubtest

import (
	"bytes"
	"compress/gzip"
	"io"
	"testing"
)

// Gzip compresses s as the agent stores run output (pkg/runoutput), for tests that write the
// output Secrets they read back: written here, not by the code under test.
func Gzip(t testing.TB, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := io.WriteString(w, s); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
