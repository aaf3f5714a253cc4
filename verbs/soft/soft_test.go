package soft

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/internal/testutil"
	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// endpoint is one NIC with a PD, an MR, CQs and one connected-later QP.
type endpoint struct {
	dev    *Device
	mr     verbs.MR
	scq    verbs.CQ
	rcq    verbs.CQ
	qp     verbs.QP
	closer func()
}

func newEndpoint(t testing.TB, addr string, mrSize int, access verbs.Access, cfg Config) *endpoint {
	t.Helper()
	cfg.Addr = netip.MustParseAddr(addr)
	d, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := d.AllocPD()
	mr, err := pd.AllocMR(mrSize, access)
	if err != nil {
		t.Fatal(err)
	}
	scq, _ := d.CreateCQ(1024)
	rcq, _ := d.CreateCQ(1024)
	qp, err := pd.CreateUCQP(verbs.QPConfig{SendCQ: scq, RecvCQ: rcq, MaxRecvWR: 512})
	if err != nil {
		t.Fatal(err)
	}
	e := &endpoint{dev: d, mr: mr, scq: scq, rcq: rcq, qp: qp}
	e.closer = func() {
		qp.Close()
		mr.Close()
		scq.Close()
		rcq.Close()
		pd.Close()
		d.Close()
	}
	t.Cleanup(e.closer)
	return e
}

// fabric is what a test's NICs exchange datagrams over: loopback sockets
// (mem nil; 127.11.x.x) or a private in-memory network (memlink), where
// the same addresses never meet another test's. One test, two transports.
type fabric struct{ mem *memlink.Network }

// forFabrics runs f as the subtests "memory" (parallel) and "socket".
func forFabrics(t *testing.T, f func(t *testing.T, fb fabric)) {
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		n, err := memlink.New(memlink.Config{})
		if err != nil {
			t.Fatal(err)
		}
		f(t, fabric{n})
	})
	t.Run("socket", func(t *testing.T) { f(t, fabric{}) })
}

// config returns cfg for a NIC at addr: over memory with its Endpoint.
func (fb fabric) config(t testing.TB, addr string, cfg Config) Config {
	t.Helper()
	if fb.mem == nil {
		return cfg
	}
	ep, err := fb.mem.Listen(netip.AddrPortFrom(netip.MustParseAddr(addr), 0))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Endpoint = ep
	return cfg
}

// endpoint returns a raw datagram endpoint at addr.
func (fb fabric) endpoint(t testing.TB, addr string) udp.Endpoint {
	t.Helper()
	var (
		e   udp.Endpoint
		err error
	)
	if fb.mem == nil {
		e, err = udp.Listen(udp.Config{Addr: netip.MustParseAddr(addr)})
	} else {
		e, err = fb.mem.Listen(netip.AddrPortFrom(netip.MustParseAddr(addr), 0))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func connectPair(t testing.TB, a, b *endpoint, mtu verbs.MTU) {
	t.Helper()
	const psnA, psnB = 0xFFFFF0, 100 // psnA wraps during the tests
	access := verbs.AccessRemoteWrite | verbs.AccessLocalWrite
	if err := verbs.Connect(a.qp, access, verbs.RTRAttr{RemoteQPN: b.qp.QPN(), RemoteAddr: b.dev.Addr(), RecvPSN: psnB, MTU: mtu}, psnA); err != nil {
		t.Fatal(err)
	}
	if err := verbs.Connect(b.qp, access, verbs.RTRAttr{RemoteQPN: a.qp.QPN(), RemoteAddr: a.dev.Addr(), RecvPSN: psnA, MTU: mtu}, psnB); err != nil {
		t.Fatal(err)
	}
}

func waitOne(t testing.TB, cq verbs.CQ) verbs.Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc := make([]verbs.Completion, 1)
	if _, err := cq.Wait(ctx, wc); err != nil {
		t.Fatalf("waiting for a completion: %v", err)
	}
	return wc[0]
}

func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*7 + seed)
	}
}

func TestWriteWithImmAllMTUs(t *testing.T) {
	forFabrics(t, func(t *testing.T, fb fabric) {
		for _, mtu := range []verbs.MTU{256, 512, 1024, 2048, 4096} {
			t.Run(strconv.Itoa(int(mtu)), func(t *testing.T) {
				a := newEndpoint(t, "127.11.0.2", 64<<10, verbs.AccessLocalWrite, fb.config(t, "127.11.0.2", Config{}))
				b := newEndpoint(t, "127.11.0.3", 64<<10, verbs.AccessLocalWrite|verbs.AccessRemoteWrite, fb.config(t, "127.11.0.3", Config{}))
				connectPair(t, a, b, mtu)
				for i, size := range []int{1, int(mtu) - 1, int(mtu), int(mtu) + 1, 5*int(mtu) + 3, 16 << 10} {
					src := a.mr.Bytes()[:size]
					fill(src, i)
					b.qp.PostRecv([]verbs.RecvWR{{ID: uint64(100 + i)}})
					va := uint64(1000 + i)
					imm := uint32(0xA0B0C000 + i)
					if _, err := a.qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.WRRDMAWriteWithImm, Local: verbs.SGE{Addr: 0, Length: uint32(size), LKey: a.mr.LKey()},
						RemoteAddr: va, RKey: b.mr.RKey(), Imm: imm, Signaled: true}}); err != nil {
						t.Fatal(err)
					}
					if wc := waitOne(t, a.scq); wc.WRID != uint64(i) || wc.Opcode != verbs.WCRDMAWrite || wc.Err() != nil {
						t.Fatalf("send completion %+v", wc)
					}
					wc := waitOne(t, b.rcq)
					if wc.WRID != uint64(100+i) || wc.Opcode != verbs.WCRecvRDMAWithImm || !wc.HasImm || wc.Imm != imm || wc.ByteLen != uint32(size) || wc.QPN != b.qp.QPN() {
						t.Fatalf("recv completion %+v", wc)
					}
					if got := b.mr.Bytes()[va : va+uint64(size)]; !bytes.Equal(got, src) {
						t.Fatalf("size %d: payload differs", size)
					}
				}
				if s := b.dev.Stats(); s.RxBadICRC+s.RxSequence+s.RxBadRange+s.RxBadRKey+s.RxMalformed != 0 {
					t.Fatalf("unexpected drops: %+v", s)
				}
			})
		}
	})
}

// rawPeer is a bare UDP endpoint at the address a QP expects its peer on,
// so tests can send hand-made packets.
type rawPeer struct {
	conn udp.Endpoint
	flow rdma.Flow
	h    rdma.ICRC
}

func newRawPeer(t *testing.T, fb fabric, addr string, dst *Device) *rawPeer {
	c := fb.endpoint(t, addr)
	return &rawPeer{conn: c, flow: rdma.Flow{Src: c.LocalAddr().Addr(), Dst: dst.Addr(), SrcPort: rdma.UDPPort, DstPort: rdma.UDPPort, DF: true}}
}

func (r *rawPeer) send(t *testing.T, pf rdma.PacketFields, payload []byte, corrupt bool) {
	t.Helper()
	b := make([]byte, rdma.PacketLen(pf.BTH.Opcode, len(payload)))
	off, err := pf.Encode(b, len(payload))
	if err != nil {
		t.Fatal(err)
	}
	copy(b[off:], payload)
	r.h.Seal(&r.flow, b)
	if corrupt {
		b[len(b)-1] ^= 0xFF
	}
	if _, err := r.conn.WriteBatch([]udp.Msg{{Buf: b, N: len(b), Addr: netip.AddrPortFrom(r.flow.Dst, rdma.UDPPort)}}); err != nil {
		t.Fatal(err)
	}
}

// settle waits until the NIC has counted n received packets.
func settle(t *testing.T, d *Device, n uint64) {
	t.Helper()
	// rxHandled, not RxPackets: the packet must have been handled to the
	// end, and its completions woken.
	testutil.WaitFor(t, fmt.Sprintf("the NIC handling %d packets", n), func() bool { return d.rxHandled.Load() >= n })
}

func TestUCRulesAndProtection(t *testing.T) {
	forFabrics(t, func(t *testing.T, fb fabric) {
		const mtu = 256
		b := newEndpoint(t, "127.11.0.3", 8192, verbs.AccessLocalWrite|verbs.AccessRemoteWrite, fb.config(t, "127.11.0.3", Config{}))
		pdRO, _ := b.dev.AllocPD()
		roMR, _ := pdRO.AllocMR(4096, verbs.AccessLocalWrite) // no remote write
		t.Cleanup(func() { roMR.Close() })
		peer := newRawPeer(t, fb, "127.11.0.2", b.dev)
		const peerQPN = 77
		if err := verbs.Connect(b.qp, verbs.AccessRemoteWrite, verbs.RTRAttr{RemoteQPN: peerQPN, RemoteAddr: peer.flow.Src, RecvPSN: 0, MTU: mtu}, 0); err != nil {
			t.Fatal(err)
		}
		b.qp.PostRecv(make([]verbs.RecvWR, 16))
		mem := b.mr.Bytes()
		pkt := func(op rdma.Opcode, psn uint32, va uint64, rkey, dmalen, imm uint32) rdma.PacketFields {
			return rdma.PacketFields{BTH: rdma.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: b.qp.QPN(), PSN: psn},
				RETH: rdma.RETHFields{VA: va, RKey: rkey, DMALen: dmalen}, Imm: imm}
		}
		chunk := func(v byte) []byte { return bytes.Repeat([]byte{v}, mtu) }
		sent := uint64(0)
		send := func(pf rdma.PacketFields, payload []byte, corrupt bool) {
			peer.send(t, pf, payload, corrupt)
			sent++
			settle(t, b.dev, sent)
		}
		// Message 1 (PSN 10..12): the middle packet is lost → nothing completes.
		send(pkt(rdma.UCRDMAWriteFirst, 10, 0, b.mr.RKey(), 3*mtu, 0), chunk(1), false)
		send(pkt(rdma.UCRDMAWriteLastWithImm, 12, 0, 0, 0, 0x1111), chunk(3), false)
		// Message 2 starts anywhere (PSN 50) and lands whole.
		send(pkt(rdma.UCRDMAWriteFirst, 50, 2048, b.mr.RKey(), 2*mtu, 0), chunk(5), false)
		send(pkt(rdma.UCRDMAWriteLastWithImm, 51, 0, 0, 0, 0x2222), chunk(6), false)
		wc := waitOne(t, b.rcq)
		if wc.Imm != 0x2222 || wc.ByteLen != 2*mtu {
			t.Fatalf("completion %+v, want imm 0x2222 (message 1 must not complete)", wc)
		}
		if mem[2048] != 5 || mem[2048+mtu] != 6 {
			t.Fatal("message 2 payload not written")
		}
		// Reordered: LAST before MIDDLE → both dropped, nothing completes.
		send(pkt(rdma.UCRDMAWriteFirst, 60, 4096, b.mr.RKey(), 3*mtu, 0), chunk(7), false)
		send(pkt(rdma.UCRDMAWriteLastWithImm, 62, 0, 0, 0, 0x3333), chunk(9), false)
		send(pkt(rdma.UCRDMAWriteMiddle, 61, 0, 0, 0, 0), chunk(8), false)
		before := append([]byte(nil), mem...)
		// Bad rkey, out-of-range va, MR without remote write, corrupted ICRC,
		// unknown QP: all dropped, memory untouched.
		send(pkt(rdma.UCRDMAWriteOnlyWithImm, 70, 0, 0xBAD00, mtu, 1), chunk(0xEE), false)
		send(pkt(rdma.UCRDMAWriteOnlyWithImm, 71, 8192-10, b.mr.RKey(), mtu, 2), chunk(0xEE), false)
		send(pkt(rdma.UCRDMAWriteOnlyWithImm, 72, 0, roMR.RKey(), mtu, 3), chunk(0xEE), false)
		send(pkt(rdma.UCRDMAWriteOnlyWithImm, 73, 0, b.mr.RKey(), mtu, 4), chunk(0xEE), true)
		bad := pkt(rdma.UCRDMAWriteOnlyWithImm, 74, 0, b.mr.RKey(), mtu, 5)
		bad.BTH.DestQP = 0x999
		send(bad, chunk(0xEE), false)
		// A WRITE WITH IMM with its receive queue empty is counted, not a crash.
		if !bytes.Equal(before, mem) {
			t.Fatal("a dropped packet modified memory")
		}
		if roMR.Bytes()[0] != 0 {
			t.Fatal("wrote into an MR without remote write access")
		}
		s := b.dev.Stats()
		want := Stats{RxSequence: 3, RxBadRKey: 2, RxBadRange: 1, RxBadICRC: 1, RxUnknownQP: 1}
		if s.RxSequence != want.RxSequence || s.RxBadRKey != want.RxBadRKey || s.RxBadRange != want.RxBadRange || s.RxBadICRC != want.RxBadICRC || s.RxUnknownQP != want.RxUnknownQP {
			t.Fatalf("drop counters %+v, want %+v", s, want)
		}
		n, _ := b.rcq.Poll(make([]verbs.Completion, 8))
		if n != 0 {
			t.Fatalf("%d unexpected completions", n)
		}
		// The next good message lands.
		send(pkt(rdma.UCRDMAWriteOnlyWithImm, 80, 0, b.mr.RKey(), 4, 0x4444), []byte{1, 2, 3, 4}, false)
		if wc := waitOne(t, b.rcq); wc.Imm != 0x4444 || !bytes.Equal(mem[:4], []byte{1, 2, 3, 4}) {
			t.Fatalf("completion after drops %+v", wc)
		}
		// A zero-length WRITE ONLY WITH IMMEDIATE (a switch's gap
		// notice) checks no rkey or address (IBA C9-88), moves nothing
		// and completes a receive with byte length 0.
		before = append(before[:0], mem...)
		send(pkt(rdma.UCRDMAWriteOnlyWithImm, 81, 1<<40, 0xBAD00, 0, 0x5555), nil, false)
		if wc := waitOne(t, b.rcq); wc.Imm != 0x5555 || !wc.HasImm || wc.ByteLen != 0 {
			t.Fatalf("zero-length write: completion %+v, want imm 0x5555 and byte length 0", wc)
		}
		if !bytes.Equal(before, mem) {
			t.Fatal("a zero-length write modified memory")
		}
		// No receive WR posted: drained queue, then one more message.
		b2 := newEndpoint(t, "127.11.0.4", 4096, verbs.AccessRemoteWrite, fb.config(t, "127.11.0.4", Config{}))
		peer2 := newRawPeer(t, fb, "127.11.0.5", b2.dev)
		verbs.Connect(b2.qp, verbs.AccessRemoteWrite, verbs.RTRAttr{RemoteQPN: 1, RemoteAddr: peer2.flow.Src, MTU: mtu}, 0)
		peer2.send(t, rdma.PacketFields{BTH: rdma.BTHFields{Opcode: rdma.UCRDMAWriteOnlyWithImm, DestQP: b2.qp.QPN()}, RETH: rdma.RETHFields{RKey: b2.mr.RKey(), DMALen: 4}}, []byte{9, 9, 9, 9}, false)
		settle(t, b2.dev, 1)
		if s := b2.dev.Stats(); s.RxNoRecvWR != 1 {
			t.Fatalf("no-receive-WR counter %d", s.RxNoRecvWR)
		}
	})
}

func TestBadSourceDropped(t *testing.T) {
	forFabrics(t, func(t *testing.T, fb fabric) {
		b := newEndpoint(t, "127.11.0.3", 4096, verbs.AccessRemoteWrite, fb.config(t, "127.11.0.3", Config{}))
		verbs.Connect(b.qp, verbs.AccessRemoteWrite, verbs.RTRAttr{RemoteQPN: 1, RemoteAddr: netip.MustParseAddr("127.11.0.2"), MTU: 256}, 0)
		intruder := newRawPeer(t, fb, "127.11.0.9", b.dev)
		intruder.send(t, rdma.PacketFields{BTH: rdma.BTHFields{Opcode: rdma.UCRDMAWriteOnly, DestQP: b.qp.QPN()}, RETH: rdma.RETHFields{RKey: b.mr.RKey(), DMALen: 4}}, []byte{1, 1, 1, 1}, false)
		settle(t, b.dev, 1)
		if s := b.dev.Stats(); s.RxBadSource != 1 || b.mr.Bytes()[0] != 0 {
			t.Fatalf("intruder packet: %+v", s)
		}
	})
}

func TestStateAndArgumentErrors(t *testing.T) {
	a := newEndpoint(t, "127.11.0.2", 4096, verbs.AccessLocalWrite, Config{})
	_, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite}})
	if !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("PostSend in RESET: %v", err)
	}
	if err := a.qp.ReadyToSend(0); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("RESET → RTS: %v", err)
	}
	a.qp.Init(verbs.AccessRemoteWrite)
	if err := a.qp.ReadyToReceive(verbs.RTRAttr{RemoteAddr: netip.MustParseAddr("127.11.0.3"), MTU: 1000}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("MTU 1000: %v", err)
	}
	if err := a.qp.ReadyToReceive(verbs.RTRAttr{RemoteAddr: netip.MustParseAddr("::1"), MTU: 1024}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("IPv6 peer on IPv4 NIC: %v", err)
	}
	a.qp.ReadyToReceive(verbs.RTRAttr{RemoteAddr: netip.MustParseAddr("127.11.0.3"), MTU: 1024})
	a.qp.ReadyToSend(0)
	_, err = a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Local: verbs.SGE{Addr: 4000, Length: 200, LKey: a.mr.LKey()}}})
	if !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("local range outside MR: %v", err)
	}
	_, err = a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend}})
	if !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("SEND on UC soft QP: %v", err)
	}
}

func TestCloseIdempotentNoLeak(t *testing.T) {
	goroutines := testutil.SnapshotGoroutines()
	e := newEndpoint(t, "127.11.0.2", 4096, verbs.AccessLocalWrite, Config{})
	done := make(chan error, 1)
	go func() {
		_, err := e.rcq.Wait(context.Background(), make([]verbs.Completion, 1))
		done <- err
	}()
	testutil.WaitBlocked(t, 1, "soft.(*CQ).Wait")
	e.closer()
	e.closer()
	select {
	case err := <-done:
		if !errors.Is(err, verbs.ErrClosed) {
			t.Fatalf("Wait after Close: %v", err)
		}
	case <-time.After(testutil.Scale(5 * time.Second)):
		t.Fatal("CQ Wait hangs after the device closed")
	}
	if _, err := e.dev.AllocPD(); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("AllocPD after Close: %v", err)
	}
	// The receive goroutine and the waiter are gone.
	goroutines.Check(t)
}

// TestCaptureDecodedByTshark writes a capture of multi-packet writes and has
// Wireshark's InfiniBand dissector decode every packet.
func TestCaptureDecodedByTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed (the README's test command installs it: apt-get install tshark)")
	}
	path := filepath.Join(t.TempDir(), "nic.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := udp.NewCapture(f)
	if err != nil {
		t.Fatal(err)
	}
	a := newEndpoint(t, "127.11.0.2", 64<<10, verbs.AccessLocalWrite, Config{Capture: cp})
	b := newEndpoint(t, "127.11.0.3", 64<<10, verbs.AccessRemoteWrite, Config{})
	connectPair(t, a, b, 1024)
	type posted struct {
		va   uint64
		rkey uint32
		len  uint32
	}
	var wrs []posted
	for i, size := range []int{100, 1024, 3000, 4096} {
		b.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i)}})
		p := posted{va: uint64(8192 * i), rkey: b.mr.RKey(), len: uint32(size)}
		wrs = append(wrs, p)
		a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWriteWithImm, Local: verbs.SGE{Length: uint32(size), LKey: a.mr.LKey()}, RemoteAddr: p.va, RKey: p.rkey, Imm: 7}})
		waitOne(t, b.rcq)
	}
	cp.Close()
	out, err := exec.Command(tshark, "-r", path, "-T", "fields", "-E", "separator=,",
		"-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn",
		"-e", "infiniband.reth.va", "-e", "infiniband.reth.r_key", "-e", "infiniband.reth.dmalen").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("tshark: %v\n%s%s", err, out, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	// Expected packets, in order.
	var want []string
	psn := uint32(0xFFFFF0)
	for _, p := range wrs {
		npk := (int(p.len) + 1023) / 1024
		for k := 0; k < npk; k++ {
			op := rdma.WriteOpcode(rdma.TransportUC, k == 0, k == npk-1, true)
			reth := ",,"
			if k == 0 {
				reth = fmt.Sprintf("%d,%d,%d", p.va, p.rkey, p.len)
			}
			want = append(want, fmt.Sprintf("%d,%d,%d,%s", uint8(op), b.qp.QPN(), psn, reth))
			psn = rdma.PSNAdd(psn, 1)
		}
	}
	if len(lines) != len(want) {
		t.Fatalf("tshark decoded %d packets, want %d:\n%s", len(lines), len(want), out)
	}
	for i := range want {
		if norm(lines[i]) != want[i] {
			t.Errorf("packet %d: tshark says %q, want %q", i, lines[i], want[i])
		}
	}
}

// norm turns tshark's hex fields (0x…) into decimal.
func norm(line string) string {
	f := strings.Split(line, ",")
	for i, v := range f {
		if strings.HasPrefix(v, "0x") {
			n, err := strconv.ParseUint(v[2:], 16, 64)
			if err == nil {
				f[i] = strconv.FormatUint(n, 10)
			}
		}
	}
	return strings.Join(f, ",")
}

// TestIPv6InNetns runs the IPv6 exchange inside a fresh network namespace
// (fd00::2 and fd00::3 on its loopback), re-executing this test binary under
// unshare(1).
func TestIPv6InNetns(t *testing.T) {
	if os.Getenv("SWML_IN_NETNS") == "1" {
		ipv6Exchange(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace (run the tests as root, as CI does)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare(1) not found (util-linux)")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("ip(8) not found (iproute2)")
	}
	script := ip + " link set lo up && " + ip + " addr add fd00::2/128 dev lo nodad && " + ip + " addr add fd00::3/128 dev lo nodad && exec \"$0\" -test.run '^TestIPv6InNetns$' -test.v"
	cmd := exec.Command(unshare, "--net", "sh", "-c", script, os.Args[0])
	cmd.Env = append(os.Environ(), "SWML_IN_NETNS=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestIPv6InNetns")) {
		t.Fatalf("in netns: %v\n%s", err, out)
	}
}

func ipv6Exchange(t *testing.T) {
	for _, mtu := range []verbs.MTU{256, 1024, 4096} {
		a := newEndpoint(t, "fd00::2", 64<<10, verbs.AccessLocalWrite, Config{})
		b := newEndpoint(t, "fd00::3", 64<<10, verbs.AccessRemoteWrite, Config{ICRC: ICRCVerify})
		connectPair(t, a, b, mtu)
		src := a.mr.Bytes()[:10000]
		fill(src, int(mtu))
		b.qp.PostRecv([]verbs.RecvWR{{ID: 1}})
		a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWriteWithImm, Local: verbs.SGE{Length: 10000, LKey: a.mr.LKey()}, RemoteAddr: 5, RKey: b.mr.RKey(), Imm: uint32(mtu)}})
		wc := waitOne(t, b.rcq)
		if wc.Imm != uint32(mtu) || !bytes.Equal(b.mr.Bytes()[5:10005], src) {
			t.Fatalf("MTU %d over IPv6: completion %+v, payload equal %v", mtu, wc, bytes.Equal(b.mr.Bytes()[5:10005], src))
		}
		if s := b.dev.Stats(); s.RxBadICRC != 0 {
			t.Fatalf("ICRC failures over IPv6: %+v", s)
		}
		a.closer()
		b.closer()
	}
}

var _ = binary.BigEndian

// TestRxWakesOncePerCQ: the receive goroutine wakes each CQ it added
// completions to once per batch, in the order first touched.
func TestRxWakesOncePerCQ(t *testing.T) {
	a, b := newCQ(nil, 4), newCQ(nil, 4)
	_, _ = a.RequestNotify(), b.RequestNotify()
	var w rxWakes
	for _, c := range []*CQ{a, a, b, a, b} {
		w.add(c)
	}
	if len(w.cqs) != 2 || w.cqs[0] != a || w.cqs[1] != b {
		t.Fatalf("pending wakes %v, want [a b]", w.cqs)
	}
	w.flush()
	if len(w.cqs) != 0 {
		t.Fatalf("%d wakes left after flush", len(w.cqs))
	}
	for name, c := range map[string]*CQ{"a": a, "b": b} {
		select {
		case <-c.Notifications():
		default:
			t.Errorf("CQ %s not woken", name)
		}
	}
}
