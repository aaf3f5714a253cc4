package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: a process writing to term sees a
// terminal (isTerminal), what it writes is read from ctl.
func openPTY() (ctl, term *os.File, err error) {
	ctl, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	if err := unix.IoctlSetPointerInt(int(ctl.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		ctl.Close()
		return nil, nil, fmt.Errorf("unlock a pseudo-terminal: %w", err)
	}
	n, err := unix.IoctlGetInt(int(ctl.Fd()), unix.TIOCGPTN)
	if err != nil {
		ctl.Close()
		return nil, nil, fmt.Errorf("name a pseudo-terminal: %w", err)
	}
	term, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		ctl.Close()
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	return ctl, term, nil
}
