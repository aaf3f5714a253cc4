// Command libswml is the C ABI of swml-rdma: built with
//
//	go build -buildmode=c-shared -o bin/libswml.so ./cmd/libswml
//
// (make libswml) it gives libswml.so and libswml.h. The Python package
// python/swml loads it with ctypes; docs/pytorch.md describes both.
//
// Every function returns an int status: SWML_OK (0), SWML_PENDING (1, from
// swml_test and swml_wait with a timeout) or a negative SWML_E… code; the
// message of the calling thread's last failure is swml_last_error. Nothing
// panics across the ABI: every export recovers and reports SWML_EINTERNAL.
//
// Buffer ownership: swml_allreduce_async reads and overwrites the caller's
// buffer in the background. From the call until swml_wait or swml_test
// reports the handle done (OK or an error, but not SWML_PENDING), the
// library owns the buffer: the caller must not read, write or free it.
// After that the library never touches it again.
//
// Fork: the Go runtime does not survive fork(). A process that loaded this
// library must not call it from a forked child (the call would hang); start
// workers with spawn (Python multiprocessing "spawn", torchrun). Every call
// made from a process other than the one that opened the session fails with
// SWML_EFORK.
package main

/*
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>

// Status codes.
#define SWML_OK         0
#define SWML_PENDING    1
#define SWML_EINVAL    -1
#define SWML_ECLOSED   -2
#define SWML_EPEER     -3
#define SWML_ETIMEOUT  -4
#define SWML_EINTERNAL -5
#define SWML_EBROKEN   -6
#define SWML_EHANDLE   -7
#define SWML_EFORK     -8
#define SWML_EFAIL     -9
#define SWML_EMISMATCH -10


// Element types of swml_allreduce_async.
#define SWML_FLOAT32 0
#define SWML_INT32   1
#define SWML_BFLOAT16 2
#define SWML_FLOAT16  3
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/swml-rdma/swml-rdma/aggregation/join"
)

func main() {}

func init() {
	getenv = cGetenv
	// A launcher's count of the ranks on this host, read when the library
	// loads (C's environment: what the host program set by then counts).
	if n := join.HostShare(getenv); n > 0 {
		runtime.GOMAXPROCS(n)
	}
}

// cGetenv reads the C library's current environment (see glue.go getenv).
func cGetenv(name string) string {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	v := C.getenv(cs)
	if v == nil {
		return ""
	}
	return C.GoString(v)
}

// lastErr is each OS thread's last error message: a C caller's call runs on
// its own thread, so the thread id names the caller.
var (
	errMu   sync.Mutex
	lastErr = map[int]string{}
)

func setErr(msg string) {
	errMu.Lock()
	if len(lastErr) > 4096 { // threads come and go: bound the map
		clear(lastErr)
	}
	lastErr[syscall.Gettid()] = msg
	errMu.Unlock()
}

// guard turns a panic into SWML_EINTERNAL with the stack in the message.
func guard(rc *C.int) {
	if r := recover(); r != nil {
		setErr(fmt.Sprintf("swml: internal error (please report): %v\n%s", r, debug.Stack()))
		*rc = C.SWML_EINTERNAL
	}
}

// fail records err and returns its code.
func fail(err error) C.int {
	if err == nil {
		return C.SWML_OK
	}
	setErr(err.Error())
	return C.int(code(err))
}

var loadPID = os.Getpid()

func forked() error {
	if os.Getpid() != loadPID {
		return &abiError{codeFork, fmt.Sprintf("swml: called from process %d, a fork of process %d that loaded libswml: the Go runtime does not survive fork(); start workers with the spawn method (multiprocessing.get_context(\"spawn\"), torch.multiprocessing.spawn, torchrun)", os.Getpid(), loadPID)}
	}
	return nil
}

//export swml_last_error
func swml_last_error(buf *C.char, n C.size_t) (rc C.int) {
	defer guard(&rc)
	errMu.Lock()
	msg := lastErr[syscall.Gettid()]
	errMu.Unlock()
	if buf == nil || n == 0 {
		return C.int(len(msg))
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	k := copy(b[:n-1], msg)
	b[k] = 0
	return C.int(len(msg))
}

//export swml_open
func swml_open(controller *C.char, sessionID C.int64_t, rank, worldSize C.int, nic, addr, device *C.char, dtypes C.int, timeoutS C.double, out *C.int64_t) (rc C.int) {
	defer guard(&rc)
	if err := forked(); err != nil {
		return fail(err)
	}
	if out == nil {
		return fail(&abiError{codeInval, "swml_open: out is NULL"})
	}
	o := openArgs{controller: C.GoString(controller), sessionID: int64(sessionID), rank: int(rank), workers: int(worldSize),
		nic: C.GoString(nic), addr: C.GoString(addr), device: C.GoString(device), dtypes: int(dtypes),
		timeout: time.Duration(float64(timeoutS) * float64(time.Second))}
	id, err := open(o)
	if err != nil {
		return fail(err)
	}
	*out = C.int64_t(id)
	return C.SWML_OK
}

//export swml_allreduce_async
func swml_allreduce_async(sess C.int64_t, ptr unsafe.Pointer, count C.int64_t, dtype C.int, out *C.int64_t) (rc C.int) {
	defer guard(&rc)
	if err := forked(); err != nil {
		return fail(err)
	}
	if out == nil {
		return fail(&abiError{codeInval, "swml_allreduce_async: out is NULL"})
	}
	id, err := allReduceAsync(int64(sess), ptr, int64(count), int(dtype))
	if err != nil {
		return fail(err)
	}
	*out = C.int64_t(id)
	return C.SWML_OK
}

//export swml_wait
func swml_wait(h C.int64_t, timeoutS C.double) (rc C.int) {
	defer guard(&rc)
	if err := forked(); err != nil {
		return fail(err)
	}
	done, err := wait(int64(h), float64(timeoutS))
	if !done && err == nil {
		return C.SWML_PENDING
	}
	return fail(err)
}

//export swml_test
func swml_test(h C.int64_t) (rc C.int) {
	defer guard(&rc)
	return swml_wait(h, 0)
}

//export swml_close
func swml_close(sess C.int64_t) (rc C.int) {
	defer guard(&rc)
	if err := forked(); err != nil {
		return fail(err)
	}
	return fail(closeSession(int64(sess), ""))
}

//export swml_abort
func swml_abort(sess C.int64_t, reason *C.char) (rc C.int) {
	defer guard(&rc)
	if err := forked(); err != nil {
		return fail(err)
	}
	r := C.GoString(reason)
	if r == "" {
		r = "aborted through swml_abort"
	}
	return fail(closeSession(int64(sess), r))
}

//export swml_rank
func swml_rank(sess C.int64_t) (rc C.int) {
	defer guard(&rc)
	s, err := lookup(int64(sess))
	if err != nil {
		return fail(err)
	}
	return C.int(s.rank)
}

//export swml_world_size
func swml_world_size(sess C.int64_t) (rc C.int) {
	defer guard(&rc)
	s, err := lookup(int64(sess))
	if err != nil {
		return fail(err)
	}
	return C.int(s.workers)
}

// swml_set_threads sets the OS threads that run the library's Go code at
// once (runtime.GOMAXPROCS) to n, if n ≥ 1, and returns the setting
// before; n < 1 only reads it. The runtime takes GOMAXPROCS from the
// environment the process started with; the library sets its rank's
// share of the host itself when it loads, if a launcher says how many
// ranks share it (join.HostShare, docs/pytorch.md "Launch").
//
//export swml_set_threads
func swml_set_threads(n C.int) (rc C.int) {
	defer guard(&rc)
	if n < 1 {
		return C.int(runtime.GOMAXPROCS(0))
	}
	return C.int(runtime.GOMAXPROCS(int(n)))
}

// swml_wire_bits returns the element width on the wire, 32 or 16, that
// session sess all-reduces dtype with (SWML_WIRE, and whether the switch
// has a 16-bit pipeline), or a negative SWML_E… code.
//
//export swml_wire_bits
func swml_wire_bits(sess C.int64_t, dtype C.int) (rc C.int) {
	defer guard(&rc)
	bits, err := wireBits(int64(sess), int(dtype))
	if err != nil {
		return fail(err)
	}
	return C.int(bits)
}
