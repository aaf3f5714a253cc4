package udp

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/internal/testutil"
)

// waitPolling waits until a read polls its socket (Conn.busyPoll).
func waitPolling(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	if !testutil.Poll(testutil.Scale(5*time.Second), func() bool {
		return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("(*Conn).busyPoll("))
	}) {
		t.Fatal("no read is polling its socket")
	}
}

// TestBusyPollRead: a datagram that arrives while a read polls is what the
// read returns, counted as a hit; a poll that finds nothing ends in the
// poller's sleep, counted as a miss, and the read still gets the next
// datagram.
func TestBusyPollRead(t *testing.T) {
	a := listen(t, "127.10.0.2", Config{})
	b := listen(t, "127.10.0.3", Config{BusyPoll: testutil.Scale(time.Minute)})
	read := func() chan []byte {
		got := make(chan []byte, 1)
		go func() {
			msgs := []Msg{{Buf: make([]byte, 64)}}
			n, err := b.ReadBatch(msgs)
			if err != nil || n != 1 {
				t.Errorf("ReadBatch: %d, %v", n, err)
				got <- nil
				return
			}
			got <- msgs[0].Bytes()
		}()
		return got
	}
	send := func(p string) {
		if _, err := a.WriteBatch([]Msg{{Buf: []byte(p), N: len(p), Addr: b.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
	}
	got := read()
	waitPolling(t)
	send("polled")
	if p := <-got; string(p) != "polled" {
		t.Fatalf("read %q, want %q", p, "polled")
	}
	if s := b.Stats(); s.RxPollHits != 1 || s.RxPollMisses != 0 {
		t.Fatalf("after a poll that found a datagram: %d hits, %d misses, want 1 and 0", s.RxPollHits, s.RxPollMisses)
	}

	c := listen(t, "127.10.0.4", Config{BusyPoll: time.Microsecond})
	done := make(chan error, 1)
	go func() {
		msgs := []Msg{{Buf: make([]byte, 64)}}
		_, err := c.ReadBatch(msgs)
		if err == nil && string(msgs[0].Bytes()) != "slept" {
			err = errors.New("read " + string(msgs[0].Bytes()))
		}
		done <- err
	}()
	testutil.WaitBlocked(t, 1, "udp.(*Conn).ReadBatch")
	if s := c.Stats(); s.RxPollHits != 0 || s.RxPollMisses != 1 {
		t.Fatalf("asleep after polling: %d hits, %d misses, want 0 and 1", s.RxPollHits, s.RxPollMisses)
	}
	if _, err := a.WriteBatch([]Msg{{Buf: []byte("slept"), N: 5, Addr: c.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
