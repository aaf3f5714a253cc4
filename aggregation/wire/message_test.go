package wire

import (
	"errors"
	"testing"
)

func TestMessagePackets(t *testing.T) {
	for _, c := range []struct{ msg, pkt, want int }{
		{16384, 1024, 16}, {1024, 1024, 1}, {4096, 256, 16},
		{3072, 1024, 0}, {1000, 1024, 0}, {0, 1024, 0}, {-2048, 1024, 0}, {1024, 0, 0},
	} {
		got, err := MessagePackets(c.msg, c.pkt)
		if got != c.want || (c.want == 0) != errors.Is(err, ErrMessageSize) {
			t.Errorf("MessagePackets(%d, %d) = %d, %v; want %d", c.msg, c.pkt, got, err, c.want)
		}
	}
}
