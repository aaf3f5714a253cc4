package verbs

import (
	"errors"
	"testing"
)

func TestMTU(t *testing.T) {
	for _, m := range []MTU{256, 512, 1024, 2048, 4096} {
		if err := m.Check(); err != nil {
			t.Errorf("MTU %d rejected: %v", m, err)
		}
	}
	for _, m := range []MTU{0, 128, 1000, 1500, 8192} {
		if err := m.Check(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("MTU %d: %v", m, err)
		}
	}
}

func TestNames(t *testing.T) {
	tests := []struct{ got, want string }{
		{WCRemAccessErr.String(), "REM_ACCESS_ERR"},
		{WCStatus(5).String(), "WR_FLUSH_ERR"},
		{WCStatus(99).String(), "WCStatus(99)"},
		{QPStateRTS.String(), "RTS"},
		{WRRDMAWriteWithImm.String(), "RDMA_WRITE_WITH_IMM"},
		{WCRecvRDMAWithImm.String(), "RECV_RDMA_WITH_IMM"},
		{(AccessLocalWrite | AccessRemoteWrite).String(), "LOCAL_WRITE|REMOTE_WRITE"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	c := Completion{WRID: 3, QPN: 17, Status: WCRemAccessErr}
	if err := c.Err(); err == nil || err.Error() != "verbs: completion wr_id 3 on QP 17: REM_ACCESS_ERR" {
		t.Fatalf("Completion.Err = %v", err)
	}
}
