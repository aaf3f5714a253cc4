//go:build !linux

package netlab

import (
	"context"
	"net/netip"
	"os/exec"
	"time"
)

// The lab needs Linux network namespaces: elsewhere everything returns
// ErrNotSupported.

const (
	WorkerIf      = "eth0"
	BridgeIf      = "br0"
	DefaultPrefix = "swlab"
	DefaultQueue  = 20 * time.Millisecond
)

var DefaultSubnet = netip.MustParsePrefix("10.77.0.0/24")

type Config struct {
	Workers        int
	Prefix         string
	Subnet         netip.Prefix
	AddrsPerWorker int
}

type Shaping struct {
	RateBps uint64
	Queue   time.Duration
}

type Lab struct {
	Switch      string
	Workers     []string
	SwitchAddr  netip.Addr
	WorkerAddrs []netip.Addr
	Addrs       [][]netip.Addr
	SwitchAddrs []netip.Addr
}

type Counters struct {
	UDPRcvbufErrors, SwitchUDPRcvbufErrors   uint64
	TCPRetransSegs                           uint64
	QueueDrops, QueueDropsUp, QueueDropsDown uint64
	LossDrops                                uint64
}

func (c Counters) Sub(o Counters) Counters                { return Counters{} }
func CheckRoot() error                                    { return ErrNotSupported }
func CheckTools() error                                   { return ErrNotSupported }
func Build(context.Context, Config) (*Lab, error)         { return nil, ErrNotSupported }
func (l *Lab) Shape(context.Context, Shaping) error       { return ErrNotSupported }
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
