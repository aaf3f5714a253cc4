"""The "swml" torch.distributed backend and the DDP communication hook."""

import _thread
import collections
import os
import random
import signal
import sys
import threading

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
        with self.cv:
            self.queue.append((None, None, None, None))
            self.cv.notify()
        self.thread.join(timeout=30)


def _swml_ok(tensor, op):
    return (op == dist.ReduceOp.SUM and tensor.device.type == "cpu" and tensor.dtype in _DTYPES
            and tensor.is_contiguous() and tensor.numel() > 0)


class ProcessGroupSwml(dist.ProcessGroup):
    """all_reduce SUM of contiguous CPU float32/int32/bfloat16/float16
    tensors goes through the switch; everything else (other ops and dtypes, broadcast, allgather,
    barrier, …) goes to an inner Gloo group on the same store."""

    def __init__(self, store, rank, size, timeout, session=None):
        super().__init__(rank, size)
        self.gloo = dist.ProcessGroupGloo(dist.PrefixStore("swml-gloo", store), rank, size, timeout)
        if session is None:
            sid = os.environ.get("SWML_SESSION_ID")
            if sid is None:
                # Every rank agrees on a fresh id through the store, so two
                # jobs on one switch do not collide.
                if rank == 0:
                    store.set("swml-session-id", str(random.randrange(1, 1 << 31)))
                sid = int(store.get("swml-session-id").decode())
            session = _lib.Session(session_id=int(sid), rank=rank, world_size=size,
                                   timeout=max(timeout.total_seconds(), 1.0))
        self.session = session
        self.completer = _Completer(session)
        self._pending = set()  # Works kept alive until complete (the torch 1.13 trap)

    def getBackendName(self):
        return "swml"

    def _work(self, fut):
        work = _create_work_from_future(fut)
        self._pending.add(work)
        fut.add_done_callback(lambda _f, w=work: self._pending.discard(w))
        return work

    def allreduce(self, tensors, opts=None):
        if opts is None:
            opts = _c10d.AllreduceOptions()
        if not all(_swml_ok(t, opts.reduceOp) for t in tensors):
            return self.gloo.allreduce(tensors, opts)
        return self._work(self.completer.submit(tensors))

    # Everything else: Gloo.
    def allreduce_coalesced(self, tensors, opts=None):
        return self.gloo.allreduce_coalesced(tensors, opts or _c10d.AllreduceCoalescedOptions())

    def broadcast(self, tensors, opts=None):
        return self.gloo.broadcast(tensors, opts or _c10d.BroadcastOptions())

    def allgather(self, output_tensors, input_tensors, opts=None):
        return self.gloo.allgather(output_tensors, input_tensors, opts or _c10d.AllgatherOptions())

    def _allgather_base(self, output, input, opts=None):
        return self.gloo._allgather_base(output, input, opts or _c10d.AllgatherOptions())

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return self.gloo.allgather_coalesced(output_lists, input_list, opts or _c10d.AllgatherOptions())

    def gather(self, output_tensors, input_tensors, opts=None):
        return self.gloo.gather(output_tensors, input_tensors, opts or _c10d.GatherOptions())

    def scatter(self, output_tensors, input_tensors, opts=None):
        return self.gloo.scatter(output_tensors, input_tensors, opts or _c10d.ScatterOptions())

    def reduce(self, tensors, opts=None):
        return self.gloo.reduce(tensors, opts or _c10d.ReduceOptions())

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        return self.gloo.reduce_scatter(output_tensors, input_tensors, opts or _c10d.ReduceScatterOptions())

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.gloo.alltoall_base(output, input, output_split_sizes, input_split_sizes,
                                       opts or _c10d.AllToAllOptions())

    def send(self, tensors, dst, tag=0):
        return self.gloo.send(tensors, dst, tag)

    def recv(self, tensors, src, tag=0):
        return self.gloo.recv(tensors, src, tag)

    def recv_anysource(self, tensors, tag=0):
        return self.gloo.recv_anysource(tensors, tag)

    def barrier(self, opts=None):
        return self.gloo.barrier(opts or _c10d.BarrierOptions())

    def shutdown(self, abort_reason=None):
        """Close (or abort, with a reason) the switch session."""
        self.completer.stop()
        if abort_reason:
            self.session.abort(abort_reason)
        else:
            self.session.close()


_created = []


def _create(store, rank, size, timeout):
    if _created:
        raise NotImplementedError(
            "swml: one swml process group per process (the default group); create sub-groups with backend='gloo'")
    pg = ProcessGroupSwml(store, rank, size, timeout)
    _created.append(pg)
    return pg


def register():
    """Register the "swml" backend with torch.distributed (idempotent)."""
    if not hasattr(dist.Backend, "SWML"):
        dist.Backend.register_backend("swml", _create)


def process_group():
    """The swml ProcessGroup of this process (after init_process_group)."""
    if not _created:
        raise RuntimeError("swml: no swml process group: call torch.distributed.init_process_group('swml') first")
    return _created[0]


# The DDP communication hook.

class HookState:
    """State of allreduce_hook: a Session (swml.init()) and the world size
    to average by."""

    def __init__(self, session):
        self.session = session
        self.completer = _Completer(session)


def allreduce_hook(state, bucket):
    """DDP communication hook: averages the gradient bucket through the
    switch. model.register_comm_hook(swml.HookState(swml.init()),
    swml.allreduce_hook) on a DDP model of any backend (gloo, for the rest)."""
    t = bucket.buffer()
    t.div_(state.session.world_size)
    if not _swml_ok(t, dist.ReduceOp.SUM):
        raise _lib.SwmlError(_lib.EINVAL, f"allreduce_hook: bucket of {t.dtype} on {t.device}: the switch sums contiguous CPU float32, int32, bfloat16 or float16")
    return state.completer.submit([t]).then(lambda f: f.value()[0])
