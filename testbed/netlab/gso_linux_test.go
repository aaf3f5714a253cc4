package netlab

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/internal/testutil"
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

	const run, size = 24, 1000 // 24 kB: one GSO datagram, below tbf's burst
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

// TestWirePacketsLoss: with SetWirePackets the loss rules drop packets,
// not GSO datagrams. 20 GSO datagrams of 24 packets cross a link losing
// half its packets: per packet, a datagram arrives whole or not at all with
// probability 2⁻²³, so some arrive in part; a drop per datagram never
// delivers part of one.
func TestWirePacketsLoss(t *testing.T) {
	needLab(t)
	if gso, _ := udp.Probe(); !gso {
		t.Skip("kernel without UDP GSO")
	}
	ctx := context.Background()
	l, err := Build(ctx, Config{Workers: 1, Prefix: "swlabwire"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.SetWirePackets(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := l.SetLoss(ctx, 0.5); err != nil {
		t.Fatal(err)
	}
	var w, sw *udp.Conn
	for _, e := range []struct {
		ns string
		a  netip.Addr
		c  **udp.Conn
	}{{l.Workers[0], l.WorkerAddrs[0], &w}, {l.Switch, l.SwitchAddr, &sw}} {
		if err := l.Do(e.ns, func() (err error) {
			*e.c, err = udp.Listen(udp.Config{Addr: e.a})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer (*e.c).Close()
	}
	w.AllowGSO(l.SwitchAddr, true)
	const run, dgrams = 24, 20
	// The switch reads while the worker sends, so its socket buffer never
	// holds more than a few datagrams, until every packet has arrived or
	// been counted by the loss rules; then Close ends its ReadBatch.
	var per [dgrams]int
	var got atomic.Int64
	read := make(chan struct{})
	go func() {
		defer close(read)
		rx := make([]udp.Msg, 64)
		for i := range rx {
			rx[i].Buf = make([]byte, 2048)
		}
		for {
			n, err := sw.ReadBatch(rx)
			if err != nil {
				return
			}
			for _, m := range rx[:n] {
				if d := int(m.Bytes()[0]); d < dgrams {
					per[d]++
				}
			}
			got.Add(int64(n))
		}
	}()
	msgs := make([]udp.Msg, run)
	for d := range dgrams {
		for i := range msgs {
			b := make([]byte, 1000)
			b[0] = byte(d)
			msgs[i] = udp.Msg{Buf: b, N: len(b), Addr: netip.AddrPortFrom(l.SwitchAddr, 4791)}
		}
		if _, err := w.WriteBatch(msgs); err != nil {
			t.Fatal(err)
		}
	}
	if s := w.Stats(); s.TxGSODatagrams != dgrams {
		t.Fatalf("%d GSO datagrams sent, want %d", s.TxGSODatagrams, dgrams)
	}
	var c Counters
	testutil.Poll(testutil.Scale(testutil.WaitLimit), func() bool {
		var err error
		if c, err = l.Counters(ctx); err != nil {
			t.Fatal(err)
		}
		return c.LossDrops+uint64(got.Load()) >= run*dgrams
	})
	sw.Close()
	<-read
	partial := 0
	for _, k := range per {
		if k > 0 && k < run {
			partial++
		}
	}
	if partial == 0 {
		t.Fatalf("packets arrived per datagram %v: the loss rules dropped whole GSO datagrams", per)
	}
	// Every packet sent arrived or was dropped by the loss rules. The
	// rules drop any IPv4 packet on the links, so a packet of the lab's
	// own (an IGMP report when a link comes up, say) may add to the drops: a
	// few more than the test's are not a miscount (one such run: 228
	// arrived, 253 dropped, of 480).
	const others = 4
	if n := uint64(got.Load()); n > run*dgrams || c.LossDrops+n < run*dgrams || c.LossDrops+n > run*dgrams+others {
		t.Fatalf("%d packets arrived and %d dropped by the loss rules, of %d sent", n, c.LossDrops, run*dgrams)
	}
}
