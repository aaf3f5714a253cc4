// Package ucstream checks a sender's RoCEv2 UC streams packet by packet, as
// a UC responder that follows the IBA sees them: per destination QP, a
// FIRST opens a message, MIDDLEs and the LAST continue it, and PSNs are
// consecutive. A break — a FIRST or ONLY while a message is open, a MIDDLE
// or LAST with none open, a PSN gap — makes the responder drop what it
// holds (rxe wedges the QP). Tests feed it every packet a sender emits
// (e.g. the software switch's results) and, where nothing was lost, want
// no break.
//
// Not safe for concurrent use; the zero Checker is ready.
package ucstream

import (
	"fmt"
	"net/netip"

	"github.com/swml-rdma/swml-rdma/rdma"
)

// Key names one stream: a destination address and QP.
type Key struct {
	Dst netip.Addr
	QPN uint32
}

type state struct {
	open    bool
	started bool
	nextPSN uint32
}

// Checker follows every stream it is shown.
type Checker struct {
	streams map[Key]*state
	pkt     rdma.Packet
	// Packets counts the packets observed; Breaks describes each break
	// (the first 100).
	Packets int
	Breaks  []string
	nbreaks int
}

// Observe takes one UDP payload (BTH to ICRC) sent to dst.
func (c *Checker) Observe(dst netip.Addr, b []byte) {
	c.Packets++
	if c.streams == nil {
		c.streams = make(map[Key]*state)
	}
	if err := c.pkt.Parse(b); err != nil {
		c.add(fmt.Sprintf("to %v: %v", dst, err))
		return
	}
	k := Key{dst.Unmap(), c.pkt.BTH.DestQP()}
	s := c.streams[k]
	if s == nil {
		s = &state{}
		c.streams[k] = s
	}
	op, psn := c.pkt.BTH.Opcode(), c.pkt.BTH.PSN()
	if s.started && psn != s.nextPSN {
		c.add(fmt.Sprintf("%v QP %#x: PSN %#x, want %#x", k.Dst, k.QPN, psn, s.nextPSN))
	}
	s.started, s.nextPSN = true, (psn+1)&rdma.PSNMask
	switch {
	case op.IsFirst() && s.open:
		c.add(fmt.Sprintf("%v QP %#x PSN %#x: %v while a message is open", k.Dst, k.QPN, psn, op))
	case !op.IsFirst() && !s.open:
		c.add(fmt.Sprintf("%v QP %#x PSN %#x: %v with no message open", k.Dst, k.QPN, psn, op))
	}
	s.open = !op.IsLast()
}

// NumBreaks is the number of breaks seen.
func (c *Checker) NumBreaks() int { return c.nbreaks }

func (c *Checker) add(s string) {
	c.nbreaks++
	if len(c.Breaks) < 100 {
		c.Breaks = append(c.Breaks, s)
	}
}
