package aggregation

import "testing"

// TestDefaultGeometry: zero QPs and PacketsPerMessage take
// DefaultGeometry's values for the job's size — 8 QPs of 16-packet
// messages up to LargeJobWorkers workers, 32 QPs of 4-packet messages
// beyond — each field on its own, the registered memory the same either
// way (128 packets in flight), and a field that is given stays as given.
func TestDefaultGeometry(t *testing.T) {
	for _, tc := range []struct {
		workers, qps, ppm int // given
		wantQPs, wantPPM  int
	}{
		{1, 0, 0, 8, 16},
		{LargeJobWorkers, 0, 0, 8, 16},
		{LargeJobWorkers + 1, 0, 0, 32, 4},
		{256, 0, 0, 32, 4},
		{64, 8, 0, 8, 4},
		{64, 0, 16, 32, 16},
		{64, 4, 64, 4, 64},
	} {
		c, err := Config{Workers: tc.workers, QPs: tc.qps, PacketsPerMessage: tc.ppm}.defaults()
		if err != nil {
			t.Fatal(err)
		}
		if c.QPs != tc.wantQPs || c.PacketsPerMessage != tc.wantPPM {
			t.Errorf("%d workers, QPs %d, PacketsPerMessage %d: got %d × %d, want %d × %d",
				tc.workers, tc.qps, tc.ppm, c.QPs, c.PacketsPerMessage, tc.wantQPs, tc.wantPPM)
		}
		if got, want := (Config{Workers: tc.workers, QPs: tc.qps, PacketsPerMessage: tc.ppm}).RegisteredBytes(), (recvRegions+1)*tc.wantQPs*tc.wantPPM*DefaultPacketSize; got != want {
			t.Errorf("%d workers: RegisteredBytes %d, want %d", tc.workers, got, want)
		}
	}
	small := Config{Workers: 2}.RegisteredBytes()
	if large := (Config{Workers: 64}).RegisteredBytes(); large != small {
		t.Errorf("registered bytes: %d at 64 workers, %d at 2; the geometries keep the same packets in flight", large, small)
	}
}
