//go:build !linux

package main

import (
	"io"
	"os"
)

// isTerminal reports whether w is an *os.File on a character device (a
// terminal, or another device: off Linux the progress line does not ask
// the terminal driver).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
