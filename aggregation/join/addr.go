package join

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrNoDefaultAddr is wrapped by DefaultSoftAddr's error.
var ErrNoDefaultAddr = errors.New("no default NIC address")

// DefaultSoftAddr is the soft NIC address of rank on one host when none is
// given: 127.0.0.<2+rank>, next to the switch's default 127.0.0.1. Ranks
// past 252 have none (127.0.0.255 is the broadcast address).
func DefaultSoftAddr(rank int) (netip.Addr, error) {
	if rank < 0 || rank > 252 {
		return netip.Addr{}, fmt.Errorf("join: rank %d: %w past 127.0.0.254", rank, ErrNoDefaultAddr)
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + rank)}), nil
}

// A job of more than one element type is one switch session per type and
// wire: float32 under the job's session id, int32 under id |
// Int32SessionBit, 16-bit-wire floats under id | Wire16SessionBit. Job
// session ids are therefore below Wire16SessionBit.
const (
	Int32SessionBit  = 1 << 31
	Wire16SessionBit = 1 << 30
	MaxJobSessionID  = Wire16SessionBit - 1
)

// ErrSessionID is wrapped by JobSessions' error.
var ErrSessionID = errors.New("session id out of range")

// JobSessions are the switch session ids of a job's float32 and int32
// halves on the 32-bit wire.
func JobSessions(id int64) (float32ID, int32ID uint32, err error) {
	if id < 0 || id > MaxJobSessionID {
		return 0, 0, fmt.Errorf("join: session id %d: %w (0 … %d)", id, ErrSessionID, MaxJobSessionID)
	}
	return uint32(id), uint32(id) | Int32SessionBit, nil
}

// JobSession16 is the switch session id of a job's 16-bit-wire half
// (aggregation.Config.Wire 16), beside JobSessions' two.
func JobSession16(id int64) (uint32, error) {
	if id < 0 || id > MaxJobSessionID {
		return 0, fmt.Errorf("join: session id %d: %w (0 … %d)", id, ErrSessionID, MaxJobSessionID)
	}
	return uint32(id) | Wire16SessionBit, nil
}
