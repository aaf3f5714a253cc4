package testutil

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer safe for concurrent writers and readers: a
// log destination or a child process's output that a test reads while it
// is being written.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
