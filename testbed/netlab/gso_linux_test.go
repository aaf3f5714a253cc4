package netlab

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
)

// TestGSOToDeclaredPeer sends runs of packets from a worker's endpoint to
// the switch namespace's endpoint over a real veth link and the bridge,
// unshaped and through tbf: over IPv4 off loopback, OffloadAuto sends one
// datagram per packet until the peer is declared with AllowGSO, then GSO
// datagrams; either way every packet arrives once, whole and in order.
func TestGSOToDeclaredPeer(t *testing.T) {
	needLab(t)
	if gso, gro := udp.Probe(); !gso || !gro {
		t.Skip("kernel without UDP GSO/GRO")
	}
	ctx := context.Background()
	l, err := Build(ctx, Config{Workers: 1, Prefix: "swlabgso"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	listen := func(ns string, a netip.Addr) *udp.Conn {
		var c *udp.Conn
		if err := l.Do(ns, func() (err error) {
			c, err = udp.Listen(udp.Config{Addr: a})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	w := listen(l.Workers[0], l.WorkerAddrs[0])
	sw := listen(l.Switch, l.SwitchAddr)
	dst := netip.AddrPortFrom(l.SwitchAddr, rdma.UDPPort)

	const run, size = 24, 1000 // 24 kB: one GSO datagram below tbf's 32 KiB burst
	seq := uint32(0)
	send := func() {
		t.Helper()
		msgs := make([]udp.Msg, run)
		for i := range msgs {
			b := bytes.Repeat([]byte{byte(seq)}, size)
			binary.BigEndian.PutUint32(b, seq)
			seq++
			msgs[i] = udp.Msg{Buf: b, N: size, Addr: dst}
		}
		if n, err := w.WriteBatch(msgs); err != nil || n != run {
			t.Fatalf("WriteBatch: %d of %d, %v", n, run, err)
		}
	}
	next := uint32(0)
	recv := func() {
		t.Helper()
		msgs := make([]udp.Msg, run)
		for i := range msgs {
			msgs[i].Buf = make([]byte, 2048)
		}
		deadline := time.Now().Add(5 * time.Second)
		for next < seq {
			if time.Now().After(deadline) {
				t.Fatalf("received %d of %d packets", next, seq)
			}
			n, err := sw.ReadBatch(msgs[:min(run, int(seq-next))])
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs[:n] {
				want := bytes.Repeat([]byte{byte(next)}, size)
				binary.BigEndian.PutUint32(want, next)
				if m.Addr.Addr() != l.WorkerAddrs[0] || !bytes.Equal(m.Bytes(), want) {
					t.Fatalf("packet %d: %d bytes from %v, not the %d sent from %v", next, m.N, m.Addr, size, l.WorkerAddrs[0])
				}
				next++
			}
		}
	}
	for _, rate := range []uint64{0, 200e6} {
		t.Run(fmt.Sprintf("rate=%d", rate), func(t *testing.T) {
			if err := l.Shape(ctx, Shaping{RateBps: rate}); err != nil {
				t.Fatal(err)
			}
			w.AllowGSO(l.SwitchAddr, false)
			if w.GSOTo(l.SwitchAddr) {
				t.Fatal("GSO to an undeclared IPv4 peer off loopback")
			}
			before := w.Stats()
			send()
			recv()
			if s := w.Stats(); s.TxGSODatagrams != before.TxGSODatagrams || s.TxDatagrams-before.TxDatagrams != run {
				t.Fatalf("undeclared peer: %d datagrams (%d GSO) for %d packets, want one each", s.TxDatagrams-before.TxDatagrams, s.TxGSODatagrams-before.TxGSODatagrams, run)
			}
			w.AllowGSO(l.SwitchAddr, true)
			if !w.GSOTo(l.SwitchAddr) {
				t.Fatal("AllowGSO did not take")
			}
			before = w.Stats()
			send()
			recv()
			if s := w.Stats(); s.TxGSODatagrams-before.TxGSODatagrams != 1 || s.TxPackets-before.TxPackets != run {
				t.Fatalf("declared peer: %d GSO datagrams for %d packets, want 1", s.TxGSODatagrams-before.TxGSODatagrams, s.TxPackets-before.TxPackets)
			}
		})
	}
}
