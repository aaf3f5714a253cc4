package aggregation

import (
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation/wire"
)

// TestNoticeLost: a gap notice names lost the packets the latest
// transmission sent just before the named one, as many as its gap, whose
// results are missing; nothing when it names a packet of another message
// or one the latest transmission did not send, when it came too soon
// after a resend to answer it, or with message writes.
func TestNoticeLost(t *testing.T) {
	now := time.Now()
	ms := time.Millisecond
	s := oneLane(&Session{cfg: Config{PacketsPerMessage: 16}})
	s.pktWrites, s.pktBits, s.notices = true, 4, true
	s.eng.est.rack.min.Sample(4 * ms)
	st := &qpState{}
	st.pkts.alloc(16, testWords)
	st.msg.busy, st.msg.id = true, 0x123
	st.pkts.transmitted()
	for _, k := range []int{0, 1, 2, 4} {
		st.pkts.record(k, now.Add(ms), now)
	}
	notice := func(k, gap int) wire.Imm {
		return wire.GapNotice(wire.PacketMsgID(st.msg.id, k, 4), uint32(gap), false)
	}
	cases := []struct {
		name string
		imm  wire.Imm
		at   time.Duration
		want uint64
	}{
		{"two before 7", notice(7, 2), 2 * ms, 1<<5 | 1<<6},
		{"four before 7: 4 is back", notice(7, 4), 2 * ms, 1<<3 | 1<<5 | 1<<6},
		{"more than were sent", notice(2, 9), 2 * ms, 0},
		{"another message", wire.GapNotice(wire.PacketMsgID(st.msg.id+1, 7, 4), 2, false), 2 * ms, 0},
		{"a whole-message id", wire.GapNotice(st.msg.id, 2, false), 2 * ms, 0},
	}
	for _, c := range cases {
		if got := s.noticeLost(st, c.imm, now.Add(c.at)); got != c.want {
			t.Errorf("%s: lost %016b, want %016b", c.name, got, c.want)
		}
	}
	// A resend of 5 and 6 at 3 ms: a notice of its packet 6 that comes
	// within half a time to result answers the first transmission; later
	// it names the resend's packets before 6 (5), not the first
	// transmission's.
	st.pkts.sent[0] = 1<<5 | 1<<6
	st.pkts.resendAt(now.Add(3*ms), s.eng.est.rack.minRTT())
	if got := s.noticeLost(st, notice(6, 1), now.Add(4*ms)); got != 0 {
		t.Errorf("notice 1 ms after the resend: lost %016b, want none", got)
	}
	if got := s.noticeLost(st, notice(6, 3), now.Add(6*ms)); got != 1<<5 {
		t.Errorf("notice of the resend: lost %016b, want %016b", got, uint64(1<<5))
	}
	if got := s.noticeLost(st, notice(9, 1), now.Add(6*ms)); got != 0 {
		t.Errorf("notice of a packet the resend did not send: lost %016b, want none", got)
	}
	// The answer to a tail probe of 6: its contribution is missing; the
	// gap counts 6's data, which went just before the probe. No timing
	// guard: a transmission has one tail probe.
	missing := func(k, gap int) wire.Imm { return wire.GapNotice(wire.PacketMsgID(st.msg.id, k, 4), uint32(gap), true) }
	if got := s.noticeLost(st, missing(6, 2), now.Add(3*ms+ms/2)); got != 1<<5|1<<6 {
		t.Errorf("tail probe, 5 and 6 lost: lost %016b, want %016b", got, uint64(1<<5|1<<6))
	}
	if got := s.noticeLost(st, missing(6, 1), now.Add(3*ms+ms/2)); got != 1<<6 {
		t.Errorf("tail probe, 6 lost: lost %016b, want %016b", got, uint64(1<<6))
	}
	if got := s.noticeLost(st, missing(6, 0), now.Add(6*ms)); got != 1<<6 {
		t.Errorf("tail probe, 6 missing without a gap: lost %016b, want %016b", got, uint64(1<<6))
	}
	st.pkts.record(6, now.Add(5*ms), st.timer.xmit)
	if got := s.noticeLost(st, missing(6, 1), now.Add(6*ms)); got != 0 {
		t.Errorf("tail probe of 6, whose result is back: lost %016b, want none", got)
	}
	s.pktWrites = false
	if got := s.noticeLost(st, notice(6, 1), now.Add(6*ms)); got != 0 {
		t.Errorf("message writes: lost %016b, want none", got)
	}
}
