package soft

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/swml-rdma/swml-rdma/internal/testutil"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// nicMetric returns one sample of reg's swml_nic_… family name with the
// given variable label value ("" for none).
func nicMetric(t *testing.T, reg *prometheus.Registry, name, device, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var dev, other string
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "device" {
					dev = lp.GetValue()
				} else {
					other = lp.GetValue()
				}
			}
			if dev == device && other == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{device=%q, %q}", name, device, label)
	return 0
}

// TestCollector checks that the swml_nic_ counters follow traffic and drops,
// and that the names and help texts pass promlint. Addresses: 127.11.30.x
// (a range of the cmd/swml-rdma block reserved for the metrics tests).
func TestCollector(t *testing.T) {
	a := newEndpoint(t, "127.11.30.2", 8192, verbs.AccessLocalWrite, Config{})
	// b polls its empty socket for longer than the test runs: every read
	// that finds it empty ends with a datagram (a hit), none sleeps.
	b := newEndpoint(t, "127.11.30.3", 8192, verbs.AccessLocalWrite|verbs.AccessRemoteWrite, Config{BusyPoll: time.Minute})
	connectPair(t, a, b, 1024)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(a.dev), NewCollector(b.dev))

	ch := make(chan prometheus.Metric, 64)
	NewCollector(a.dev).Collect(ch)
	if n := len(ch); n != 2+2+2+len(nicDropReasons)+1+2 {
		t.Fatalf("%d samples from one device", n)
	}
	b.qp.PostRecv([]verbs.RecvWR{{ID: 1}})
	if _, err := a.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRRDMAWriteWithImm, Local: verbs.SGE{Length: 3000, LKey: a.mr.LKey()},
		RKey: b.mr.RKey(), Imm: 7, Signaled: true}}); err != nil {
		t.Fatal(err)
	}
	waitOne(t, a.scq)
	waitOne(t, b.rcq)
	// A datagram that is no RoCEv2 packet.
	c, err := net.Dial("udp4", "127.11.30.3:4791")
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("not a BTH"))
	c.Close()
	testutil.WaitFor(t, "the NIC counting the malformed datagram", func() bool { return b.dev.Stats().RxMalformed == 1 })

	an, bn := a.dev.Name(), b.dev.Name()
	for _, tc := range []struct {
		name, device, label string
		want                float64
	}{
		{"swml_nic_packets_total", an, "out", 3},
		{"swml_nic_messages_total", an, "out", 1},
		{"swml_nic_packets_total", bn, "in", 4},
		{"swml_nic_messages_total", bn, "in", 1},
		{"swml_nic_drops_total", bn, "malformed", 1},
		{"swml_nic_drops_total", bn, "icrc", 0},
		{"swml_nic_cq_overruns_total", bn, "", 0},
		{"swml_nic_busy_polls_total", bn, "miss", 0},
		{"swml_nic_busy_polls_total", an, "hit", 0},
		{"swml_nic_busy_polls_total", an, "miss", 0},
	} {
		if got := nicMetric(t, reg, tc.name, tc.device, tc.label); got != tc.want {
			t.Errorf("%s{device=%q,%q} = %v, want %v", tc.name, tc.device, tc.label, got, tc.want)
		}
	}
	if got := nicMetric(t, reg, "swml_nic_busy_polls_total", bn, "hit"); got < 1 {
		t.Errorf("busy polls that found a datagram %v, want ≥ 1", got)
	}
	if got := nicMetric(t, reg, "swml_nic_bytes_total", bn, "in"); got < 3000 {
		t.Errorf("bytes in %v, want ≥ 3000", got)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	if !strings.HasPrefix(an, "soft:") {
		t.Errorf("device label %q", an)
	}
}
