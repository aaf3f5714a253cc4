package udp

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func listen(t testing.TB, addr string, cfg Config) *Conn {
	t.Helper()
	cfg.Addr = netip.MustParseAddr(addr)
	c, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestBatchRoundTrip(t *testing.T) {
	a := listen(t, "127.10.0.2", Config{BatchSize: 8})
	b := listen(t, "127.10.0.3", Config{BatchSize: 8})
	const n = 20
	out := make([]Msg, n)
	for i := range out {
		out[i] = Msg{Buf: bytes.Repeat([]byte{byte(i)}, 100+i), N: 100 + i, Addr: b.LocalAddr()}
	}
	if sent, err := a.WriteBatch(out); err != nil || sent != n {
		t.Fatalf("WriteBatch = %d, %v", sent, err)
	}
	in := make([]Msg, 8)
	for i := range in {
		in[i].Buf = make([]byte, 2048)
	}
	got := 0
	for got < n {
		k, err := b.ReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range in[:k] {
			if m.N != 100+got || m.Buf[0] != byte(got) || m.Addr != a.LocalAddr() {
				t.Fatalf("datagram %d: len %d first %d from %v", got, m.N, m.Buf[0], m.Addr)
			}
			got++
		}
	}
	if s := b.Stats(); s.RxPackets != n {
		t.Fatalf("rx stats %+v", s)
	}
	if s := a.Stats(); s.TxPackets != n {
		t.Fatalf("tx stats %+v", s)
	}
}

func TestAddressInUse(t *testing.T) {
	listen(t, "127.10.0.2", Config{})
	_, err := Listen(Config{Addr: netip.MustParseAddr("127.10.0.2")})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("own address")) {
		t.Fatalf("second Listen: %v", err)
	}
}

func TestCloseUnblocksRead(t *testing.T) {
	c := listen(t, "127.10.0.4", Config{})
	done := make(chan error)
	go func() {
		_, err := c.ReadBatch([]Msg{{Buf: make([]byte, 64)}})
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadBatch still blocked after Close")
	}
}

func TestLossInjection(t *testing.T) {
	a := listen(t, "127.10.0.2", Config{SendLoss: 0.5, Seed: 7})
	b := listen(t, "127.10.0.3", Config{})
	msgs := make([]Msg, 200)
	for i := range msgs {
		msgs[i] = Msg{Buf: []byte{1, 2, 3, 4}, N: 4, Addr: b.LocalAddr()}
	}
	a.WriteBatch(msgs)
	s := a.Stats()
	if s.TxLossDropped == 0 || s.TxLossDropped == 200 || s.TxLossDropped+s.TxPackets != 200 {
		t.Fatalf("loss stats %+v", s)
	}
}

func TestAllocs(t *testing.T) {
	a := listen(t, "127.10.0.2", Config{})
	b := listen(t, "127.10.0.3", Config{})
	out := []Msg{{Buf: make([]byte, 1024), N: 1024, Addr: b.LocalAddr()}}
	in := []Msg{{Buf: make([]byte, 2048)}}
	if n := testing.AllocsPerRun(200, func() {
		a.WriteBatch(out)
		b.ReadBatch(in)
	}); n != 0 {
		t.Fatalf("%v allocations per round trip, want 0", n)
	}
}

func TestCaptureFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := NewCapture(f)
	if err != nil {
		t.Fatal(err)
	}
	a := listen(t, "127.10.0.2", Config{Capture: cp})
	b := listen(t, "127.10.0.3", Config{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		b.ReadBatch([]Msg{{Buf: make([]byte, 64)}})
	}()
	a.WriteBatch([]Msg{{Buf: make([]byte, 40), N: 40, Addr: b.LocalAddr()}})
	wg.Wait()
	if err := cp.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	// 24-byte file header + 16-byte record header + 14 + 20 + 8 + 40.
	if len(data) != 24+16+14+20+8+40 {
		t.Fatalf("pcap is %d bytes", len(data))
	}
}
