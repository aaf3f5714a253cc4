"""The "swml" torch.distributed backend and the DDP communication hook."""

import _thread
import collections
import os
import secrets
import signal
import sys
import threading
import weakref

import torch
import torch.distributed as dist
import torch._C._distributed_c10d as _c10d
from torch._C._distributed_c10d import _create_work_from_future

from . import _lib

_DTYPES = {torch.float32: _lib.FLOAT32, torch.int32: _lib.INT32,
           torch.bfloat16: _lib.BFLOAT16, torch.float16: _lib.FLOAT16}


def _torch_version(v=torch.__version__):
    """(major, minor) of a torch version string ("1.13.0a0", "2.1.0+cpu")."""
    parts = v.split("+")[0].split(".")
    return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)


# torch 1.x (tested: Debian 12's 1.13.1) crashes (SIGSEGV in DDP's reducer)
# when the Future of a Work that DDP waits for holds an exception. There, a
# failed all-reduce completes its Future with the tensors as they are (not
# reduced) and the error is raised as swml.SwmlError in the main thread as
# soon as it runs the user's Python again (right after loss.backward() or
# work.wait() returns), through a SIGUSR1 handler installed when the first
# swml group or hook starts, if SIGUSR1 has no handler. The handler raises
# only in the user's own code: raised in torch's or this package's Python,
# which torch's C++ may have called (DDP's reducer calls allreduce), the
# error would reach the user as torch's RuntimeError("Cannot extract
# tensors from value: …"), not as SwmlError; there it is raised at the next
# line of the user's code that runs (a line trace on the user's frame, unless
# a debugger or coverage tool traces already: then it signals again 20 ms
# later). Every later all-reduce fails the same way. torch 2.x takes an
# exception in a Work's Future: there the Future carries it (SIGNAL_PATH is
# False; not tested here).
SIGNAL_PATH = _torch_version() < (2, 0)

_failure = None
_retry = None  # the pending re-signal


def _library_frame(frame):
    f = frame.f_code.co_filename if frame is not None else ""
    return f.startswith(_TORCH_DIR) or f.startswith(_SWML_DIR) or f.startswith("<")


_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_SWML_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _raise_failure(signum, frame):
    if _failure is None:
        return
    if not _library_frame(frame):
        raise _failure
    # In torch's or this package's code: raise at the next line the user's
    # own code runs (the caller's frame, through a line trace), else retry.
    user = frame
    while user is not None and _library_frame(user):
        user = user.f_back
    if user is not None and sys.gettrace() is None:
        _arm_trace(user)
        return
    _retry_later()


def _retry_later():
    global _retry
    if _retry is None or not _retry.is_alive():
        _retry = threading.Timer(0.02, _signal_main)
        _retry.daemon = True
        _retry.start()


def _arm_trace(user):
    def local(fr, event, arg):
        if _failure is None:
            return None
        if event == "line" and not _library_frame(fr):
            sys.settrace(None)
            fr.f_trace = None
            raise _failure
        if event == "return" and fr.f_back is not None:
            fr.f_back.f_trace = local  # the user's frame returned: its caller
            fr.f_back.f_trace_lines = True
        return local

    def new_frames(fr, event, arg):
        return None  # tracing on, new frames untraced

    user.f_trace = local
    user.f_trace_lines = True
    sys.settrace(new_frames)


def _install_handler():
    if (SIGNAL_PATH and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None)):
        signal.signal(signal.SIGUSR1, _raise_failure)


def _signal_main():
    if signal.getsignal(signal.SIGUSR1) is _raise_failure:
        _thread.interrupt_main(signal.SIGUSR1)


def _fail(err):
    global _failure
    if _failure is None:
        _failure = err
        _signal_main()


def _done_future(tensors):
    fut = torch.futures.Future()
    fut.set_result(tensors)
    return fut


class _Completer:
    """Waits for a session's all-reduces in submission order on one thread and
    completes their torch Futures. It also keeps every pending tensor (the
    buffer libswml owns) and Work referenced until the all-reduce is done."""

    def __init__(self, session):
        self.session = session
        self.cv = threading.Condition()
        self.queue = collections.deque()
        _install_handler()
        self.thread = threading.Thread(target=self._run, name="swml-completer", daemon=True)
        self.thread.start()

    def submit(self, tensors):
        """Start an all-reduce of every tensor (contiguous, CPU, float32,
        int32, bfloat16 or float16), in order; returns a Future completed
        with tensors."""
        if _failure is not None:
            if not SIGNAL_PATH:
                raise _failure
            # Raising here would reach the user as torch's RuntimeError:
            # complete at once and raise SwmlError in the main thread.
            _signal_main()
            return _done_future(tensors)
        fut = torch.futures.Future()
        handles = []
        try:
            for t in tensors:
                handles.append(self.session.allreduce_async(t.data_ptr(), t.numel(), _DTYPES[t.dtype]))
        except Exception as e:  # noqa: BLE001 - handed to the future
            # Handles already started still own their buffers: the completer
            # waits for them before failing the future.
            with self.cv:
                self.queue.append((handles, tensors, fut, e))
                self.cv.notify()
            return fut
        with self.cv:
            self.queue.append((handles, tensors, fut, None))
            self.cv.notify()
        return fut

    def _run(self):
        while True:
            with self.cv:
                while not self.queue:
                    self.cv.wait()
                handles, tensors, fut, err = self.queue.popleft()
            if handles is None:
                return
            for h in handles:
                try:
                    self.session.wait(h)
                except Exception as e:  # noqa: BLE001 - handed to the future
                    err = err or e
            if err is not None:
                _fail(err)
                if not SIGNAL_PATH:
                    fut.set_exception(err)
                    continue
            fut.set_result(tensors)  # torch 1.x: never an exception, see _failure

    def stop(self):
        """Finish the all-reduces submitted so far, then end the thread."""
        with self.cv:
            self.queue.append((None, None, None, None))
            self.cv.notify()
        if threading.current_thread() is not self.thread:  # a finalizer may run here
            self.thread.join(timeout=30)


def _end_session(completer, session, abort_reason=None):
    """End a group's or a hook's session: its pending all-reduces first, then
    the session (close, or abort with a reason)."""
    completer.stop()
    if abort_reason:
        session.abort(abort_reason)
    else:
        session.close()


def _end_unattended(completer, session):
    """The finalizer of a ProcessGroupSwml never shut down: it was collected
    (destroy_process_group dropped the last reference) or the interpreter
    exits (docs/pytorch.md "The end of a job")."""
    try:
        _end_session(completer, session, _lib.exit_abort_reason())
    except Exception as e:  # noqa: BLE001 - nobody to raise to
        _lib.report_at_exit("ending the swml process group's session", e)


def _switch_sums(tensor, op):
    """Whether the switch can sum tensor: SUM of a non-empty CPU tensor of
    a dtype it takes, contiguous or not (see _dense)."""
    return (op == dist.ReduceOp.SUM and tensor.device.type == "cpu" and tensor.dtype in _DTYPES
            and tensor.numel() > 0)


def _swml_ok(tensor, op):
    return _switch_sums(tensor, op) and tensor.is_contiguous()


def _dense(obj, pairs):
    """obj (a tensor, or nested lists of tensors) with every non-contiguous
    tensor replaced by a contiguous copy; (original, copy) appended to pairs.
    Both the switch and Gloo (torch 1.13's ProcessGroupGloo reads and writes
    a tensor's first numel elements of storage, whatever its strides) need
    dense memory: a strided view goes through a copy, and the result is
    copied back into the view, leaving its neighbours untouched."""
    if isinstance(obj, torch.Tensor):
        if obj.is_contiguous():
            return obj
        c = obj.contiguous()
        pairs.append((obj, c))
        return c
    if isinstance(obj, (list, tuple)):
        return type(obj)(_dense(o, pairs) for o in obj)
    return obj


def _copy_back(pairs):
    for orig, c in pairs:
        orig.copy_(c)


class _CopyBackWork(dist.Work):
    """A Gloo Work without a Future (send, recv) whose tensors were dense
    copies: waiting for it copies the results into the original views."""

    def __init__(self, inner, pairs):
        super().__init__()
        self._inner, self._pairs, self._lock = inner, pairs, threading.Lock()

    def _finish(self):
        with self._lock:
            pairs, self._pairs = self._pairs, []
        _copy_back(pairs)

    def wait(self, timeout=None):
        ok = self._inner.wait() if timeout is None else self._inner.wait(timeout)
        self._finish()
        return ok

    def is_completed(self):
        done = self._inner.is_completed()
        if done and self._inner.is_success():
            self._finish()
        return done

    def is_success(self):
        return self._inner.is_success()

    def exception(self):
        return self._inner.exception()

    def source_rank(self):
        return self._inner.source_rank()

    def _source_rank(self):
        return self._inner._source_rank()

    def result(self):
        self.wait()
        return self._inner.result()


def agree_session_id(store, rank, key):
    """A fresh job session id that every rank agrees on through the job's
    store: rank 0 draws it and sets key, the others wait for it. Drawn from
    the OS's randomness, not the random module, which training scripts seed
    alike in every job: two jobs on one switch must not collide."""
    if rank == 0:
        store.set(key, str(1 + secrets.randbelow(_MAX_SESSION_ID)))
    return int(store.get(key).decode())


_MAX_SESSION_ID = (1 << 30) - 1  # aggregation/join.MaxJobSessionID


class ProcessGroupSwml(dist.ProcessGroup):
    """all_reduce SUM of CPU float32/int32/bfloat16/float16 tensors goes
    through the switch (a non-contiguous one through a dense copy);
    everything else (other ops and dtypes, broadcast, allgather, barrier,
    …) goes to an inner Gloo group on the same store, non-contiguous tensors
    through dense copies too.

    The session ends with shutdown(), or else when the group is collected
    (destroy_process_group drops the last reference) or the interpreter
    exits: cleanly, unless an uncaught exception ends the program
    (docs/pytorch.md "The end of a job")."""

    def __init__(self, store, rank, size, timeout, session=None):
        super().__init__(rank, size)
        self.gloo = dist.ProcessGroupGloo(dist.PrefixStore("swml-gloo", store), rank, size, timeout)
        if session is None:
            sid = os.environ.get("SWML_SESSION_ID")
            if sid is None:
                sid = agree_session_id(store, rank, "swml-session-id")
            session = _lib.Session(session_id=int(sid), rank=rank, world_size=size,
                                   timeout=max(timeout.total_seconds(), 1.0))
        self.session = session
        self.completer = _Completer(session)
        self._pending = set()  # Works kept alive until complete (the torch 1.13 trap)
        # Refers to the completer and the session, never to self.
        self._end = _lib.on_exit(self, _end_unattended, self.completer, session)

    def getBackendName(self):
        return "swml"

    def wire_bits(self, dtype):
        """The element width on the wire, 32 or 16, of this group's
        all-reduces of a torch dtype through the switch (docs/pytorch.md
        "Which wire a dtype uses")."""
        if dtype not in _DTYPES:
            raise ValueError(f"swml: {dtype} does not go through the switch (float32, int32, bfloat16, float16 do)")
        return self.session.wire_bits(_DTYPES[dtype])

    def _work(self, fut):
        work = _create_work_from_future(fut)
        self._pending.add(work)
        # The callback holds the set, not the group: run on the completer
        # thread, it must not be what keeps the group alive, or the group
        # would be collected (and its session ended) there, after
        # destroy_process_group has returned.
        fut.add_done_callback(lambda _f, w=work, pending=self._pending: pending.discard(w))
        return work

    def allreduce(self, tensors, opts=None):
        if opts is None:
            opts = _c10d.AllreduceOptions()
        if not all(_switch_sums(t, opts.reduceOp) for t in tensors):
            return self._gloo(lambda ts: self.gloo.allreduce(ts, opts), tensors)
        pairs = []
        fut = self.completer.submit(_dense(tensors, pairs))
        if pairs:
            def copy_back(f):
                f.value()  # a failure stays a failure
                _copy_back(pairs)
                return tensors
            fut = fut.then(copy_back)
        return self._work(fut)

    def _gloo(self, call, outputs, inputs=None):
        """call(outputs[, inputs]) on the inner Gloo group with dense copies
        of non-contiguous tensors; the outputs are copied back into the
        caller's tensors when the Work completes (see _dense)."""
        out_pairs, in_pairs = [], []
        outs = _dense(outputs, out_pairs)
        if inputs is None:
            work = call(outs)
        else:
            work = call(outs, _dense(inputs, in_pairs))
        if not out_pairs:
            return work  # Gloo's Work holds the input copies until done
        try:
            fut = work.get_future()
        except RuntimeError:  # send/recv: no Future in torch 1.13
            return _CopyBackWork(work, out_pairs)

        def copy_back(f):
            f.value()
            _copy_back(out_pairs)
            return outputs
        return self._work(fut.then(copy_back))

    # Everything else: Gloo.
    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or _c10d.AllreduceCoalescedOptions()
        return self._gloo(lambda ts: self.gloo.allreduce_coalesced(ts, opts), tensors)

    def broadcast(self, tensors, opts=None):
        opts = opts or _c10d.BroadcastOptions()
        return self._gloo(lambda ts: self.gloo.broadcast(ts, opts), tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = opts or _c10d.AllgatherOptions()
        return self._gloo(lambda o, i: self.gloo.allgather(o, i, opts), output_tensors, input_tensors)

    def _allgather_base(self, output, input, opts=None):
        opts = opts or _c10d.AllgatherOptions()
        return self._gloo(lambda o, i: self.gloo._allgather_base(o, i, opts), output, input)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        opts = opts or _c10d.AllgatherOptions()
        return self._gloo(lambda o, i: self.gloo.allgather_coalesced(o, i, opts), output_lists, input_list)

    def gather(self, output_tensors, input_tensors, opts=None):
        opts = opts or _c10d.GatherOptions()
        return self._gloo(lambda o, i: self.gloo.gather(o, i, opts), output_tensors, input_tensors)

    def scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or _c10d.ScatterOptions()
        return self._gloo(lambda o, i: self.gloo.scatter(o, i, opts), output_tensors, input_tensors)

    def reduce(self, tensors, opts=None):
        opts = opts or _c10d.ReduceOptions()
        return self._gloo(lambda ts: self.gloo.reduce(ts, opts), tensors)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or _c10d.ReduceScatterOptions()
        return self._gloo(lambda o, i: self.gloo.reduce_scatter(o, i, opts), output_tensors, input_tensors)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts or _c10d.AllToAllOptions()
        return self._gloo(lambda o, i: self.gloo.alltoall_base(o, i, output_split_sizes, input_split_sizes, opts),
                          output, input)

    def send(self, tensors, dst, tag=0):
        return self._gloo(lambda _, ts: self.gloo.send(ts, dst, tag), [], tensors)

    def recv(self, tensors, src, tag=0):
        return self._gloo(lambda ts: self.gloo.recv(ts, src, tag), tensors)

    def recv_anysource(self, tensors, tag=0):
        return self._gloo(lambda ts: self.gloo.recv_anysource(ts, tag), tensors)

    def barrier(self, opts=None):
        return self.gloo.barrier(opts or _c10d.BarrierOptions())

    def shutdown(self, abort_reason=None):
        """End the switch session now: wait for the pending all-reduces,
        then close it (or abort the job for every rank, with a reason).
        Idempotent; without it the session ends when the group is
        collected or at exit."""
        if self._end.detach() is not None:
            _end_session(self.completer, self.session, abort_reason)


_created = []  # a weak reference to this process's swml group


def _create(store, rank, size, timeout):
    live = _created[0]() if _created else None
    if live is not None and live._end.alive:
        raise NotImplementedError(
            "swml: one swml process group per process (the default group); create sub-groups with backend='gloo'")
    pg = ProcessGroupSwml(store, rank, size, timeout)
    _created[:] = [weakref.ref(pg)]
    return pg


def register():
    """Register the "swml" backend with torch.distributed (idempotent)."""
    if not hasattr(dist.Backend, "SWML"):
        dist.Backend.register_backend("swml", _create)


def process_group():
    """The swml ProcessGroup of this process (after init_process_group)."""
    pg = _created[0]() if _created else None
    if pg is None:
        raise RuntimeError("swml: no swml process group: call torch.distributed.init_process_group('swml') first")
    return pg


def hook_session_id():
    """The session id swml.init() gives a DDP hook's session when neither
    the caller nor $SWML_SESSION_ID names one: agreed through the default
    process group's store, once per call in the same order on every rank;
    None before init_process_group."""
    if not dist.is_initialized():
        return None
    global _hook_sessions
    _hook_sessions += 1
    return agree_session_id(dist.distributed_c10d._get_default_store(), dist.get_rank(),
                            f"swml-hook-session-id/{_hook_sessions}")


_hook_sessions = 0


# The DDP communication hook.

class HookState:
    """State of allreduce_hook: a Session (swml.init()) and the world size
    to average by. When the state is collected (its DDP model is) or the
    interpreter exits, the hook's pending all-reduces finish; the session
    itself ends with close(), or when it is collected or at exit (see
    swml.Session)."""

    def __init__(self, session):
        self.session = session
        self.completer = _Completer(session)
        self._end = _lib.on_exit(self, _Completer.stop, self.completer)

    def close(self):
        """Wait for the pending all-reduces, then close the session."""
        if self._end.detach() is not None:
            _end_session(self.completer, self.session)


def allreduce_hook(state, bucket):
    """DDP communication hook: averages the gradient bucket through the
    switch. model.register_comm_hook(swml.HookState(swml.init()),
    swml.allreduce_hook) on a DDP model of any backend (gloo, for the rest)."""
    t = bucket.buffer()
    t.div_(state.session.world_size)
    if not _swml_ok(t, dist.ReduceOp.SUM):
        raise _lib.SwmlError(_lib.EINVAL, f"allreduce_hook: bucket of {t.dtype} on {t.device}: the switch sums contiguous CPU float32, int32, bfloat16 or float16")
    return state.completer.submit([t]).then(lambda f: f.value()[0])
