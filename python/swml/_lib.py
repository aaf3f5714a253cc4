"""ctypes binding of libswml.so (cmd/libswml), the C ABI of swml-rdma."""

import atexit
import ctypes
import os
import sys
import threading
import weakref

OK = 0
PENDING = 1
EINVAL = -1
ECLOSED = -2
EPEER = -3
ETIMEOUT = -4
EINTERNAL = -5
EBROKEN = -6
EHANDLE = -7
EFORK = -8
EFAIL = -9
EMISMATCH = -10

# Element types (SWML_FLOAT32 …): the 16-bit floats go on the 16-bit wire
# where the switch has one, else on the float32 session's 32-bit wire,
# quantized straight from 16 bits ($SWML_WIRE chooses; docs/pytorch.md).
FLOAT32 = 0
INT32 = 1
BFLOAT16 = 2
FLOAT16 = 3

_CODE_NAMES = {
    EINVAL: "invalid argument",
    ECLOSED: "session closed",
    EPEER: "peer or switch gone",
    ETIMEOUT: "timed out",
    EINTERNAL: "internal error",
    EBROKEN: "session broken",
    EHANDLE: "no such handle",
    EFORK: "called after fork",
    EFAIL: "failed",
    EMISMATCH: "length mismatch",
}


class SwmlError(RuntimeError):
    """A failure reported by libswml: .code is the SWML_E… code."""

    def __init__(self, code, message):
        self.code = code
        super().__init__(f"swml ({_CODE_NAMES.get(code, code)}): {message}")


class ForkError(SwmlError):
    """libswml was called from a forked child of the process that loaded it."""


_lock = threading.Lock()
_lib = None
_lib_pid = None


def _mark_forked():
    # A forked child inherits the loaded library but not the Go runtime's
    # threads: any call into it would hang.
    global _lib
    if _lib is not None:
        _lib = _ForkedLib(_lib_pid)


class _ForkedLib:
    def __init__(self, parent):
        self.parent = parent

    def __getattr__(self, name):
        raise ForkError(
            EFORK,
            f"process {os.getpid()} is a fork of process {self.parent}, which loaded libswml: "
            "the Go runtime does not survive fork(), a call would hang. Start workers with the "
            "spawn method (multiprocessing.get_context('spawn'), torch.multiprocessing.spawn, "
            "torchrun) or load swml only in the children.",
        )


os.register_at_fork(after_in_child=_mark_forked)


def _candidates():
    env = os.environ.get("SWML_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    return [
        os.path.join(here, "libswml.so"),
        os.path.join(here, "..", "..", "bin", "libswml.so"),  # the repo's make libswml
        "libswml.so",
    ]


def load(path=None):
    """Load libswml.so once per process (path, $SWML_LIB, next to this
    package, the repository's bin/, then the loader's search path)."""
    global _lib, _lib_pid
    with _lock:
        if _lib is not None:
            if isinstance(_lib, _ForkedLib):
                _lib.swml_open  # raises ForkError
            return _lib
        errors = []
        for p in [path] if path else _candidates():
            if os.sep in p and not os.path.exists(p):
                errors.append(f"{p}: no such file")
                continue
            try:
                lib = ctypes.CDLL(p)
                break
            except OSError as e:
                errors.append(f"{p}: {e}")
        else:
            raise SwmlError(
                EINVAL,
                "cannot load libswml.so (" + "; ".join(errors) + "): install the package with "
                "`pip install ./python` (it builds the library), or build it with `make libswml` "
                "and set SWML_LIB=/path/to/bin/libswml.so",
            )
        i64, i64p = ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)
        cs = ctypes.c_char_p
        lib.swml_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.swml_open.argtypes = [cs, i64, ctypes.c_int, ctypes.c_int, cs, cs, cs, ctypes.c_int, ctypes.c_double, i64p]
        lib.swml_allreduce_async.argtypes = [i64, ctypes.c_void_p, i64, ctypes.c_int, i64p]
        lib.swml_wait.argtypes = [i64, ctypes.c_double]
        lib.swml_test.argtypes = [i64]
        lib.swml_close.argtypes = [i64]
        lib.swml_abort.argtypes = [i64, cs]
        lib.swml_rank.argtypes = [i64]
        lib.swml_world_size.argtypes = [i64]
        lib.swml_wire_bits.argtypes = [i64, ctypes.c_int]
        lib.swml_set_threads.argtypes = [ctypes.c_int]
        for f in ("swml_last_error", "swml_open", "swml_allreduce_async", "swml_wait", "swml_test",
                  "swml_close", "swml_abort", "swml_rank", "swml_world_size", "swml_wire_bits", "swml_set_threads"):
            getattr(lib, f).restype = ctypes.c_int
        _lib, _lib_pid = lib, os.getpid()
        return lib


def lib():
    return load()


def check(rc):
    """Raise SwmlError for a negative status; return the status otherwise.
    Call it on the thread that made the failing call (errors are per thread)."""
    if rc >= 0:
        return rc
    l = lib()
    n = l.swml_last_error(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    l.swml_last_error(buf, n + 1)
    raise SwmlError(rc, buf.value.decode("utf-8", "replace"))


def _b(s):
    return None if s is None else s.encode()


# Ending sessions at exit (docs/pytorch.md "The end of a job"). A session the
# program never closed ends when its owner is collected or, at the latest,
# when the interpreter exits: cleanly, so the switch counts a normal end
# (reason "end") and not a crashed rank (keepalive_lost). A program that dies
# of an uncaught exception aborts its sessions instead: the other ranks, still
# inside the job, then fail at once rather than after their peer timeout.
# Our own atexit handler (not weakref.finalize's) runs the finalizers so that
# they know the interpreter is exiting: only then does sys.last_value name the
# exception that ended the program, and not one an interactive session
# printed earlier.
_exiting = False
_at_exit = []  # the finalizers of on_exit, in creation order


def on_exit(obj, func, *args):
    """weakref.finalize(obj, func, *args), also run at interpreter exit if
    obj lives until then: the latest first, as weakref.finalize does; never
    in a forked child (it has the parent's objects, not its sessions).
    func(*args) must not refer to obj."""
    f = weakref.finalize(obj, _in_process, os.getpid(), func, *args)
    f.atexit = False
    with _lock:
        _at_exit[:] = [g for g in _at_exit if g.alive]
        _at_exit.append(f)
    return f


@atexit.register
def _run_at_exit():
    global _exiting
    _exiting = True
    with _lock:
        pending = list(reversed(_at_exit))
    for f in pending:
        # Not f(): weakref's own atexit handler, which runs first, has
        # turned every finalize call into a no-op.
        info = f.detach()
        if info is None:
            continue
        _, func, args, kwargs = info
        try:
            func(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the others still end
            report_at_exit("ending a session at exit", e)


def _in_process(pid, func, *args):
    if os.getpid() == pid:
        func(*args)


def exit_abort_reason():
    """Why the sessions must be aborted rather than closed: the uncaught
    exception that is ending the program, else None (a normal end, or not
    exiting)."""
    if not _exiting:
        return None
    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if exc is None:  # sys.exit() sets neither: the program chose to end
        return None
    return f"the process is exiting on an uncaught {type(exc).__name__}: {exc}"


def report_at_exit(what, err):
    """A failure while ending a session unattended (a finalizer, at exit):
    nobody can catch it, so it goes to stderr."""
    try:
        sys.stderr.write(f"swml: {what}: {err}\n")
    except Exception:  # noqa: BLE001 - stderr closed: nothing left to tell
        pass


def _end_unclosed(sid):
    reason = exit_abort_reason()
    try:
        if reason:
            check(_lib.swml_abort(sid, _b(reason)))
        else:
            check(_lib.swml_close(sid))
    except SwmlError as e:
        report_at_exit(f"ending session {sid} {'at exit' if _exiting else 'of a collected swml.Session'}", e)


class Session:
    """One worker's membership in a job at the switch (both element types).

    Arguments left None come from the environment: controller
    ($SWML_CONTROLLER, else 127.0.0.1:50099), session_id ($SWML_SESSION_ID,
    else 1), rank ($SWML_RANK, $OMPI_COMM_WORLD_RANK, $RANK: the first
    found), world_size ($SWML_WORKERS, $OMPI_COMM_WORLD_SIZE, $WORLD_SIZE), nic ($SWML_NIC, else soft), addr ($SWML_ADDR, else
    127.0.0.<2+rank> for soft), device ($SWML_DEVICE, ibverbs only). TLS
    to the controller and its registration token come from $SWML_TLS_CA,
    $SWML_TLS_CERT, $SWML_TLS_KEY, $SWML_TLS_SERVER_NAME and
    $SWML_REGISTRATION_TOKEN_FILE (docs/security.md). $SWML_WIRE chooses
    the wire of the float types: auto (unset: bfloat16 and float16 on the
    16-bit wire where the switch has one, float32 on the 32-bit wire), 16
    or 32 (docs/pytorch.md "Which wire a dtype uses"); wire_bits tells.
    """

    def __init__(self, controller=None, session_id=None, rank=None, world_size=None,
                 nic=None, addr=None, device=None, timeout=60.0, dtypes=("float32", "int32")):
        l = lib()
        mask = (1 if "float32" in dtypes else 0) | (2 if "int32" in dtypes else 0)
        out = ctypes.c_int64()
        check(l.swml_open(_b(controller or ""), -1 if session_id is None else int(session_id),
                          -1 if rank is None else int(rank), -1 if world_size is None else int(world_size),
                          _b(nic or ""), _b(addr or ""), _b(device or ""), mask, float(timeout),
                          ctypes.byref(out)))
        self._id = out.value
        self._end = on_exit(self, _end_unclosed, self._id)
        self.rank = check(l.swml_rank(self._id))
        self.world_size = check(l.swml_world_size(self._id))

    def allreduce_async(self, ptr, count, dtype):
        """Start an in-place SUM all-reduce of count elements at address ptr
        (FLOAT32 or INT32); returns a handle for wait. The library owns the
        buffer until wait says it is done: keep it alive and untouched."""
        h = ctypes.c_int64()
        check(lib().swml_allreduce_async(self._id, ctypes.c_void_p(ptr), int(count), int(dtype), ctypes.byref(h)))
        return h.value

    def wire_bits(self, dtype):
        """The element width on the wire, 32 or 16, of this session's
        all-reduces of dtype (FLOAT32, INT32, BFLOAT16 or FLOAT16)."""
        return check(lib().swml_wire_bits(self._id, int(dtype)))

    def wait(self, handle, timeout=-1.0):
        """Wait for handle (timeout seconds, < 0 forever): True when done
        (raises SwmlError if the all-reduce failed), False if still running."""
        return check(lib().swml_wait(handle, float(timeout))) == OK

    def close(self):
        """End this rank's part in the job cleanly (idempotent with abort).
        A session never closed ends when it is collected or at exit (see
        on_exit)."""
        if self._end.detach() is not None:
            check(lib().swml_close(self._id))

    def abort(self, reason="aborted by the application"):
        """End the job for every rank: their all-reduces fail naming this
        rank and reason."""
        if self._end.detach() is not None:
            check(lib().swml_abort(self._id, _b(reason)))

    @property
    def closed(self):
        return not self._end.alive

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()
        else:
            self.abort(repr(exc[1]))
