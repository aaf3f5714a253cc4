package wire

import (
	"errors"
	"fmt"
)

// ErrMessageSize is wrapped by MessagePackets' error.
var ErrMessageSize = errors.New("not the packet size times a power of two")

// IsPowerOfTwo reports whether n is 1, 2, 4, …
func IsPowerOfTwo(n int) bool { return n > 0 && n&(n-1) == 0 }

// MessagePackets is the number of packets of a message of messageSize
// bytes. A message is the packet size times a power of two: the switch's
// slots of a message are a power-of-two block of its pool, so that a
// packet's slot is a shift and a mask (wire.MakePoolIndex). Every front
// end that takes a message size in bytes (the CLI, libswml, the
// controller) checks it here.
func MessagePackets(messageSize, packetSize int) (int, error) {
	if packetSize <= 0 || messageSize%packetSize != 0 || !IsPowerOfTwo(messageSize/packetSize) {
		return 0, fmt.Errorf("message size %d: %w (%d)", messageSize, ErrMessageSize, packetSize)
	}
	return messageSize / packetSize, nil
}
