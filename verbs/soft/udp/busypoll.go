package udp

import "time"

// busyPoller decides how long a read of an empty socket polls before it
// sleeps. Sleeping in the runtime's poller and being woken by the next
// datagram costs an epoll_wait, a wake-up (an inter-processor interrupt
// when the reader's CPU is idle, a virtual machine exit on a VM) and two
// context switches. Where the sender answers within microseconds — a
// worker and the software switch on one host, the unshaped network lab —
// nearly every datagram used to wake a sleeping reader: 1 680 wake-ups and
// 2 470 context switches per 16 MiB all-reduce of 4 workers, against 100
// and 170 for Gloo's ranks. Polling a little longer, with the CPU given to every
// other runnable thread between tries (sched_yield) and to the process's
// other goroutines (runtime.Gosched), catches the next datagram without a
// sleep; where the gaps are long (a shaped link), a poll that found
// nothing makes the next few reads sleep at once, so the polling costs at
// most one read in busyPollBackoff+1 its budget.
//
// Not safe for concurrent use: a Conn's reads are serialised.
type busyPoller struct {
	budget time.Duration // 0: never poll
	skip   int           // reads left that sleep without polling
}

// busyPollBackoff is how many reads sleep at once after a fruitless poll.
const busyPollBackoff = 7

func newBusyPoller(d time.Duration) busyPoller { return busyPoller{budget: max(d, 0)} }

// due reports whether this read polls before sleeping.
func (b *busyPoller) due() bool {
	if b.budget <= 0 {
		return false
	}
	if b.skip > 0 {
		b.skip--
		return false
	}
	return true
}

// done records a poll's outcome: found says whether it ended with data.
func (b *busyPoller) done(found bool) {
	if !found {
		b.skip = busyPollBackoff
	}
}
