package sweep

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// proc is a process of a row (netlab.Lab.Command: its own process group
// in a namespace): its command and what it wrote.
type proc struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	// started is when it was started; exited when waitAll saw it end.
	started, exited time.Time
}

func startProc(cmd *exec.Cmd, name string) (*proc, error) {
	p := &proc{name: name, cmd: cmd}
	cmd.Stdout, cmd.Stderr = &p.stdout, &p.stderr
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return p, nil
}

// failure describes a process that failed: its error and its last words.
func (p *proc) failure(err error) error {
	tail := strings.TrimSpace(p.stderr.String() + "\n" + p.stdout.String())
	if lines := strings.Split(tail, "\n"); len(lines) > 4 {
		tail = strings.Join(lines[len(lines)-4:], "\n")
	}
	return fmt.Errorf("%s: %w: %s", p.name, err, tail)
}

// terminate sends SIGTERM to p's process group, as a ctx cancel does.
func (p *proc) terminate() {
	if p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM) // gone already: nothing to end
	}
}

// stopAll ends procs that still run and waits for them.
func stopAll(procs []*proc) {
	for _, p := range procs {
		if p.cmd.ProcessState == nil {
			p.terminate()
		}
	}
	for _, p := range procs {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Wait() // its failure, if any, is reported by the caller
		}
	}
}

// waitAll waits for every proc; the first failure (in the order they end)
// is returned and the others are then ended: they would wait for the
// failed rank until their own timeouts.
func waitAll(procs []*proc) error {
	errc := make(chan error, len(procs))
	for _, p := range procs {
		go func() {
			err := p.cmd.Wait()
			p.exited = time.Now()
			if err != nil {
				errc <- p.failure(err)
				return
			}
			errc <- nil
		}()
	}
	var first error
	for range procs {
		if err := <-errc; err != nil && first == nil {
			first = err
			for _, p := range procs {
				p.terminate()
			}
		}
	}
	return first
}
