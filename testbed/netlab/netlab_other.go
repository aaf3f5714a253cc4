//go:build !linux

package netlab

import (
	"context"
	"os/exec"
)

// The lab needs Linux network namespaces: elsewhere everything returns
// ErrNotSupported.

func CheckRoot() error                                    { return ErrNotSupported }
func CheckTools() error                                   { return ErrNotSupported }
func Build(context.Context, Config) (*Lab, error)         { return nil, ErrNotSupported }
func (l *Lab) Shape(context.Context, Shaping) error       { return ErrNotSupported }
func (l *Lab) ShapeSpine(context.Context, Shaping) error  { return ErrNotSupported }
func (l *Lab) SetLoss(context.Context, float64) error     { return ErrNotSupported }
func (l *Lab) SetWirePackets(context.Context, bool) error { return ErrNotSupported }
func (l *Lab) Do(string, func() error) error              { return ErrNotSupported }
func (l *Lab) Counters(context.Context) (Counters, error) { return Counters{}, ErrNotSupported }
func (l *Lab) Close() error                               { return nil }
func Namespaces(string) ([]string, error)                 { return nil, ErrNotSupported }
func Cleanup(string) ([]string, error)                    { return nil, ErrNotSupported }
func (l *Lab) Command(ctx context.Context, ns, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, name, args...)
}
