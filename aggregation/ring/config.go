package ring

// Configuration: Config and its defaults, and the memory a rank registers
// for them.

import (
	"fmt"
	"time"

	"github.com/swml-rdma/swml-rdma/verbs"
)

// Ring defaults.
const (
	DefaultMessageSize          = 16 << 10
	DefaultMTU                  = verbs.MTU(1024)
	DefaultRetransmitTimeout    = 10 * time.Millisecond
	DefaultMaxRetransmitTimeout = time.Second
	DefaultPeerTimeout          = 10 * time.Second
	// ringWindowBytes sizes the default window: bytes in flight per rank.
	// Loopback needs little; a bigger window only queues (and inflates the
	// round trip on a loaded machine).
	ringWindowBytes = 256 << 10
)

// Config configures a ring all-reduce. Zero fields take the defaults.
type Config struct {
	// MessageSize is the bytes per RDMA WRITE message (a multiple of 4;
	// default 16 KiB). The last message of a segment may be shorter.
	MessageSize int
	// MTU is the path MTU: the payload bytes per packet (default 1024).
	MTU verbs.MTU
	// Window is the most messages a rank has in flight (sent, not yet
	// acknowledged); default 256 KiB / MessageSize, within [4, 256].
	Window int
	// RetransmitTimeout is the first and smallest retransmission timeout
	// (default 10 ms); MaxRetransmitTimeout caps the backoff (default 1 s).
	RetransmitTimeout, MaxRetransmitTimeout time.Duration
	// PeerTimeout bounds how long a rank waits without any progress before
	// it fails with ErrPeerTimeout (default 10 s).
	PeerTimeout time.Duration
}

// withDefaults fills the zero fields with the defaults and checks the
// whole.
func (c Config) withDefaults() (Config, error) {
	if c.MessageSize == 0 {
		c.MessageSize = DefaultMessageSize
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.RetransmitTimeout == 0 {
		c.RetransmitTimeout = DefaultRetransmitTimeout
	}
	if c.MaxRetransmitTimeout == 0 {
		c.MaxRetransmitTimeout = DefaultMaxRetransmitTimeout
	}
	if c.PeerTimeout == 0 {
		c.PeerTimeout = DefaultPeerTimeout
	}
	switch {
	case c.MessageSize < 4 || c.MessageSize%4 != 0 || c.MessageSize > 1<<30:
		return c, fmt.Errorf("ring: message size %d: give a multiple of 4 bytes up to 1 GiB", c.MessageSize)
	case c.Window < 0:
		return c, fmt.Errorf("ring: window %d: give a positive number of messages (0 for the default)", c.Window)
	case c.RetransmitTimeout < 0 || c.MaxRetransmitTimeout < c.RetransmitTimeout:
		return c, fmt.Errorf("ring: retransmission timeouts %v … %v: give 0 < first ≤ max", c.RetransmitTimeout, c.MaxRetransmitTimeout)
	case c.PeerTimeout < c.RetransmitTimeout:
		return c, fmt.Errorf("ring: peer timeout %v is below the retransmission timeout %v: a neighbour would be declared dead before the first retransmission", c.PeerTimeout, c.RetransmitTimeout)
	}
	if err := c.MTU.Check(); err != nil {
		return c, fmt.Errorf("ring: %w", err)
	}
	if c.Window == 0 {
		c.Window = DefaultWindow(c.MessageSize)
	}
	return c, nil
}

// DefaultWindow is the window, in messages, that a Config with Window 0
// gets for messages of messageSize bytes: 256 KiB in flight, within
// [4, 256] messages. Each rank's MR holds 2 × window messages.
func DefaultWindow(messageSize int) int {
	return min(max(ringWindowBytes/max(messageSize, 1), 4), 256)
}

// RegisteredBytes is one rank's registered memory for messages of
// messageSize bytes and a window of window messages (0: DefaultWindow): a
// send and a receive region of window messages each.
func RegisteredBytes(messageSize, window int) int {
	if window == 0 {
		window = DefaultWindow(messageSize)
	}
	return 2 * window * messageSize
}
