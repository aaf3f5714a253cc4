package aggregation

import (
	"context"
	"fmt"
	mathbits "math/bits"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/quant"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/rdma"
	"github.com/swml-rdma/swml-rdma/verbs/soft/udp/memlink"
)

// reproCase is one way of running the same all-reduce (TestReproducible).
type reproCase struct {
	qps, packet, ppm int
	threads          []int // per rank
	cores            int   // the switch's (swswitch.Config.Cores)
	writes           Writes
	wholeResend      bool
	loss, reorder    float64
}

func (c reproCase) String() string {
	return fmt.Sprintf("qps=%d packet=%d×%d threads=%v cores=%d %v whole=%v loss=%v reorder=%v",
		c.qps, c.packet, c.ppm, c.threads, c.cores, c.writes, c.wholeResend, c.loss, c.reorder)
}

// randomReproCase draws a case whose messages hold reproMessage bytes: the
// block of the block floating point is a message (docs/quantization.md),
// so the message size is part of the numbers; everything else is not.
func randomReproCase(rng *rand.Rand, n int) reproCase {
	packets := [][2]int{{256, 4}, {512, 2}, {1024, 1}}
	p := packets[rng.IntN(len(packets))]
	c := reproCase{
		qps: 1 + rng.IntN(6), packet: p[0], ppm: p[1],
		writes:  []Writes{MessageWrites, PacketWrites, AdaptiveWrites}[rng.IntN(3)],
		loss:    []float64{0, 0.01, 0.03}[rng.IntN(3)],
		reorder: []float64{0, 0.05}[rng.IntN(2)],
		cores:   1 + rng.IntN(3),
	}
	// Whole-message resends go with message writes only (Config), and of
	// multi-packet UC messages they starve at a few per cent of loss
	// (TestStarvation): drawn only where they finish.
	c.wholeResend = c.writes == MessageWrites && (c.loss < 0.03 || c.ppm == 1) && rng.IntN(4) == 0
	for range n {
		c.threads = append(c.threads, 1+rng.IntN(4))
	}
	return c
}

const reproMessage = 1024

// TestReproducible: the sums are a function of the inputs, the worker
// count and the message size alone (docs/protocol.md "Reproducible
// sums"). The same float32 and bfloat16 tensors all-reduced under random
// loss, reordering, QP counts, lanes per worker, switch cores (each QP's
// slots on one core, cores adding in parallel), packet sizes (one message
// size), message or packet writes and resend granularity give the same
// bits on every rank, in every call, as a loss-free job of one QP and one
// lane: integer addition does not depend on arrival order, and every
// resend carries the same integers.
func TestReproducible(t *testing.T) {
	const n, l = 3, 7*reproMessage/4*3 + 77
	in := gradients(11, n, l)
	in16 := halfInputs(in, quant.BFloat16)

	run := func(t *testing.T, net byte, c reproCase) ([][]float32, [][]uint16) {
		o := clusterOpts{cores: c.cores}
		if c.reorder > 0 {
			o.link = func(netip.Addr) memlink.LinkConfig {
				return memlink.LinkConfig{Reorder: c.reorder, ReorderDelay: 300 * time.Microsecond}
			}
		}
		cl := newSoftClusterWith(t, inMemory, net, c.loss, c.loss, o)
		cfg := softConfig(1, c.packet, c.ppm, c.qps)
		cfg.Writes, cfg.WholeMessageResend = c.writes, c.wholeResend
		cfg.PeerTimeout = time.Minute // a loaded host is slow, not lossy
		j := openJobWith(t, cl.ctlAddr, n, func(r int) Config {
			rc := cfg
			rc.Threads = c.threads[r]
			return rc
		}, cl.device(2))
		defer j.close(t)
		var out [][]float32
		for call := range 2 {
			got := clone2(in)
			noErrors(t, j.allReduce(context.Background(), got))
			if call == 0 {
				out = got
				continue
			}
			for r := range got {
				sameBits(t, fmt.Sprintf("call 2 vs 1, rank %d", r), got[r], out[r])
			}
		}
		out16 := clone2(in16)
		noErrors(t, allReduce16(j, out16, quant.BFloat16))
		for r, w := range j.workers {
			st := w.sess.Stats()
			t.Logf("rank %d: %d messages, %d resent (%d on evidence, %d timeouts, %d spurious)", r, st.Messages, st.Retransmissions, st.FastRetransmissions, st.Timeouts, st.SpuriousRetransmissions)
		}
		return out, out16
	}

	ref := reproCase{qps: 1, packet: 1024, ppm: 1, threads: []int{1, 1, 1}, cores: 1, writes: MessageWrites}
	want, want16 := run(t, 100, ref)
	checkSums(t, in, want, reproMessage/4)
	for r := range want {
		sameBits(t, fmt.Sprintf("reference rank %d vs 0", r), want[r], want[0])
	}

	for seed := range uint64(8) {
		c := randomReproCase(rand.New(rand.NewPCG(seed, 0x5eed)), n)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			t.Log(c)
			got, got16 := run(t, byte(101+seed), c)
			for r := range got {
				sameBits(t, fmt.Sprintf("rank %d vs the reference", r), got[r], want[0])
				for k := range got16[r] {
					if got16[r][k] != want16[0][k] {
						t.Fatalf("bfloat16 rank %d element %d: %#04x, the reference %#04x", r, k, got16[r][k], want16[0][k])
					}
				}
			}
		})
	}
}

// TestLateResultOverwrites: a copy of a result that arrives long after
// its message — here rank 0's first result of message 2, held back on the
// link until the result of message 2+recvRegions (the same receive
// region) arrives — lands in the region of a message in flight, over a
// result already back there. The worker sees the late completion and
// fetches the overwritten result again: the sums stay exact
// (docs/protocol.md "Buffer layout"). With packet writes the late packet
// lands after the first packet result of the newer message; with message
// writes the late message lands right after the newer one, in the same
// batch of the NIC.
func TestLateResultOverwrites(t *testing.T) {
	for _, w := range []Writes{PacketWrites, MessageWrites} {
		t.Run(w.String(), func(t *testing.T) {
			c := newSoftCluster(t, inMemory, 120, 0, 0)
			cfg := softConfig(1, 256, 4, 1)
			cfg.Writes = w
			const n, l = 2, 24 * 256
			j := openJob(t, c.ctlAddr, n, cfg, c.device(2))
			defer j.close(t)
			bits := uint(mathbits.Len(uint(cfg.PacketsPerMessage - 1)))
			const late = 2
			regionVA := uint64(recvRegion(late) * cfg.QPs * cfg.PacketSize * cfg.PacketsPerMessage)
			var holding, held, released bool
			c.setHold(func(toSwitch bool, r int, p *rdma.Packet) memlink.HoldVerdict {
				if toSwitch || r != 0 || released {
					return memlink.Pass
				}
				op := p.BTH.Opcode()
				var id uint16
				if p.ImmDt != nil {
					id = wire.Imm(p.ImmDt.Imm()).MsgID()
				}
				if w == PacketWrites {
					switch {
					case !held && p.ImmDt != nil && id == wire.PacketMsgID(late, 0, bits):
						held = true
						return memlink.HoldBack
					case held && p.ImmDt != nil && id == wire.PacketMsgID(late+recvRegions, 0, bits):
						released = true
						return memlink.Release
					}
					return memlink.Pass
				}
				switch {
				case !held && (holding || op.IsFirst() && p.RETH.VA() == regionVA):
					holding = true
					if op.IsLast() {
						if id != late {
							t.Errorf("held the result of message %d, want %d", id, late)
						}
						held = true
					}
					return memlink.HoldBack
				case held && op.IsLast() && p.ImmDt != nil && id == late+recvRegions:
					released = true
					return memlink.Release
				}
				return memlink.Pass
			})
			in := gradients(5, n, l)
			out := clone2(in)
			noErrors(t, j.allReduce(context.Background(), out))
			checkSums(t, in, out, 256)
			for r := range out {
				sameBits(t, fmt.Sprintf("rank %d vs 0", r), out[r], out[0])
			}
			st := j.workers[0].sess.Stats()
			t.Logf("held %v, released %v; rank 0: %+v", held, released, st)
			if !held || !released {
				t.Fatalf("the late copy was not delivered into a message in flight (held %v, released %v)", held, released)
			}
			if st.StaleResults == 0 {
				t.Fatalf("rank 0 saw no late result: %+v", st)
			}
		})
	}
}
