package swswitch

import (
	"reflect"
	"testing"

	"github.com/swml-rdma/swml-rdma/aggregation/switchmodel"
)

// TestTotals: a report's counters are the snapshot's, and its drops name
// every reason (the drops metric's labels), zeros included.
func TestTotals(t *testing.T) {
	st := Stats{PacketsIn: 10, BytesIn: 1000, PacketsOut: 8, BytesOut: 800}
	st.Model.Aggregated, st.Model.Completed, st.Model.Retransmissions, st.Model.Unicasts, st.Model.ResultsSkipped = 7, 6, 5, 4, 3
	st.Model.Drops[switchmodel.DropPSN] = 2
	tot := st.Totals()
	want := Totals{PacketsIn: 10, BytesIn: 1000, PacketsOut: 8, BytesOut: 800, Aggregated: 7, SlotsCompleted: 6, Retransmissions: 5, Unicasts: 4, ResultsSkipped: 3}
	got := tot
	got.Drops = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("totals %+v, want %+v", got, want)
	}
	if len(tot.Drops) != int(switchmodel.NumDropReasons)-1 {
		t.Errorf("%d drop reasons, want %d: %v", len(tot.Drops), switchmodel.NumDropReasons-1, tot.Drops)
	}
	for r := switchmodel.DropReason(1); r < switchmodel.NumDropReasons; r++ {
		n, ok := tot.Drops[r.String()]
		if !ok || n != st.Drops(r) {
			t.Errorf("drops[%s] = %d (%v), want %d", r, n, ok, st.Drops(r))
		}
	}
}
