package testenv

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that one goroutine may write while another reads it: the output of
// a command or a watch under test.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
