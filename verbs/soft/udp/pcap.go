package udp

import (
	"bufio"
	"encoding/binary"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/swml-rdma/swml-rdma/rdma"
)

// pcap file constants (libpcap format 2.4, microsecond timestamps).
const (
	pcapMagic        = 0xa1b2c3d4
	linkTypeEthernet = 1
	pcapSnapLen      = 65535
)

// Capture writes datagrams as Ethernet/IP/UDP frames to a pcap stream, so
// that Wireshark and tshark decode them as RoCEv2 (UDP 4791). The frames are
// reconstructed from what the socket saw: IPv4 headers carry DF and
// Identification 0 (what our endpoints send; a received packet's real
// Identification is not visible to a UDP socket), MAC addresses are zero and
// the UDP checksum is 0. Safe for concurrent use.
type Capture struct {
	mu    sync.Mutex
	w     *bufio.Writer
	c     io.Closer
	frame []byte
	err   error
	n     uint64
}

// NewCapture writes the pcap file header to w and returns a Capture. If w is
// an io.Closer, Close closes it.
func NewCapture(w io.Writer) (*Capture, error) {
	bw := bufio.NewWriterSize(w, 1<<16)
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], pcapMagic)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], pcapSnapLen)
	binary.LittleEndian.PutUint32(h[20:], linkTypeEthernet)
	if _, err := bw.Write(h[:]); err != nil {
		return nil, err
	}
	c := &Capture{w: bw, frame: make([]byte, 0, 16+rdma.EthernetHeaderLen+60+65536)}
	if cl, ok := w.(io.Closer); ok {
		c.c = cl
	}
	return c, nil
}

// Write records one datagram from src to dst. Errors are sticky and reported
// by Close.
func (c *Capture) Write(src, dst netip.AddrPort, payload []byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	e := rdma.Encap{Flow: rdma.Flow{Src: src.Addr(), Dst: dst.Addr(), SrcPort: src.Port(), DstPort: dst.Port(), DF: true}}
	hl := e.HeaderLen(true)
	f := c.frame[:16+hl+len(payload)]
	if _, err := e.EncodeHeaders(f[16:], len(payload), true); err != nil {
		return // mixed families cannot happen on one socket
	}
	copy(f[16+hl:], payload)
	now := time.Now()
	binary.LittleEndian.PutUint32(f[0:], uint32(now.Unix()))
	binary.LittleEndian.PutUint32(f[4:], uint32(now.Nanosecond()/1000))
	binary.LittleEndian.PutUint32(f[8:], uint32(hl+len(payload)))
	binary.LittleEndian.PutUint32(f[12:], uint32(hl+len(payload)))
	_, c.err = c.w.Write(f)
	c.n++
}

// Packets is the number of frames written.
func (c *Capture) Packets() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Flush writes buffered frames.
func (c *Capture) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}

// Close flushes and closes the underlying writer if it is a Closer.
func (c *Capture) Close() error {
	err := c.Flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c != nil {
		if cerr := c.c.Close(); err == nil {
			err = cerr
		}
		c.c = nil
	}
	return err
}
