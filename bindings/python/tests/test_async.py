"""async def under @carmy.idempotent: cancellation, and an event loop that
keeps serving its other tasks while a call waits on carmyd (a stopped
carmyd with a durable store) or on a call running elsewhere. Every check
is on events: a loop blocked by a call would only run the checking task
after the watchdog resumed carmyd, or after the wait ran out."""
import asyncio
import os
import signal
import sys
import threading

import pytest

import carmy
from helpers import WAIT_S, Carmyd, append, lines, wait_for


def test_cancelled_error_records_cancelled_and_reraises(client, marker):
    started = []

    @carmy.idempotent(client, tool="cancel")
    async def work(*, request_id):
        append(marker, "ran")
        started[0].set()
        await asyncio.Event().wait()        # until cancelled
        return "never"

    async def main():
        started.append(asyncio.Event())
        task = asyncio.ensure_future(work(request_id="c1"))
        await started[0].wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(carmy.ToolFailed) as e:
            await work(request_id="c1")
        return e.value
    e = asyncio.run(main())
    assert e.status == "cancelled"
    assert e.type == "CancelledError"
    assert lines(marker) == [b"ran"]


def test_async_exception_replays_as_tool_failed(client, marker):
    @carmy.idempotent(client, tool="aboom")
    async def boom(x, *, request_id):
        append(marker, "ran")
        raise ValueError("no stock for %s" % x)

    async def main():
        with pytest.raises(ValueError):
            await boom("KB-01", request_id="b1")
        with pytest.raises(carmy.ToolFailed) as e:
            await boom("KB-01", request_id="b1")
        return e.value
    e = asyncio.run(main())
    assert (e.type, e.message, e.status) == ("ValueError",
                                             "no stock for KB-01", "failed")
    assert lines(marker) == [b"ran"]


async def _await(value):
    return value


class Opaque(Exception):
    """An exception with no text to record: its __str__ raises."""

    def __str__(self):
        raise RuntimeError("no text")


def _nested(depth):
    v = []
    for _ in range(depth):
        v = [v]
    return v


async def _raise(exc):
    raise exc


# As test_decorator.UNSERIALISABLE, for async def tools.
UNSERIALISABLE = {
    "int_msgpack_cannot_pack": (
        "msgpack", lambda: _await(2 ** 70), OverflowError, "OverflowError"),
    "result_too_deep_for_json": (
        "json", lambda: _await(_nested(100000)), RecursionError,
        "RecursionError"),
    "exception_whose_str_raises": (
        "json", lambda: _raise(Opaque()), Opaque, "Opaque"),
    "surrogate_message_with_msgpack": (
        "msgpack", lambda: _raise(ValueError("\udc80")), ValueError,
        "ValueError"),
}


@pytest.mark.parametrize("case", sorted(UNSERIALISABLE))
def test_async_unserialisable_outcome_is_recorded_and_replays(
        client, marker, case):
    serializer, body, first, kind = UNSERIALISABLE[case]

    @carmy.idempotent(client, tool=case, serializer=serializer)
    async def f(*, request_id):
        append(marker, "ran")
        return await body()

    async def main():
        with pytest.raises(first):
            await f(request_id="u1")
        got = []
        for _ in range(2):
            with pytest.raises(carmy.ToolFailed) as e:
                await f(request_id="u1")
            got.append((e.value.type, e.value.status,
                        e.value.execution_id))
        return got
    got = asyncio.run(main())
    assert got[0] == got[1]
    assert got[0][:2] == (kind, "failed")
    assert got[0][2].startswith("exec_")
    assert lines(marker) == [b"ran"]


def test_memory_store_replays_stay_on_the_loop(client, monkeypatch):
    """With carmyd's memory store a begin (a replay too) runs in place;
    only the completion, which carmyd answers, goes to a carmy thread."""
    assert client._handle.durable is False
    used = []
    submit = carmy._submit

    def counting(kind, fn, *args):
        used.append(kind)
        return submit(kind, fn, *args)
    monkeypatch.setattr(carmy, "_submit", counting)

    @carmy.idempotent(client, tool="fast")
    async def fast(x, *, request_id):
        return x + 1

    async def main():
        first = await fast(1, request_id="f1")
        n = len(used)
        again = [await fast(1, request_id="f1") for _ in range(50)]
        return first, n, again
    first, n, again = asyncio.run(main())
    assert first == 2 and again == [2] * 50
    assert n == 1
    assert used == ["io"]


def _journal_carmyd(tmp_path):
    return Carmyd("--store", "journal:%s" % (tmp_path / "j")).start()


class Stopped:
    """carmyd stopped with SIGSTOP until resume(); a watchdog resumes it
    after WAIT_S, and says so (fired), so that a blocked loop fails the
    test instead of hanging it."""

    def __init__(self, d):
        self.pid = d.proc.pid
        self.fired = threading.Event()
        self.timer = threading.Timer(WAIT_S, self._fire)

    def _fire(self):
        self.fired.set()
        os.kill(self.pid, signal.SIGCONT)

    def __enter__(self):
        os.kill(self.pid, signal.SIGSTOP)
        self.timer.start()
        return self

    def resume(self):
        self.timer.cancel()
        os.kill(self.pid, signal.SIGCONT)

    def __exit__(self, et, ev, tb):
        self.resume()
        return False


def _in_pool_call():
    """Whether a carmy thread runs a call now (rather than waiting for
    one): its innermost Python frame is the pool's work item's run()."""
    return any(f.f_code.co_name == "run" and
               f.f_code.co_filename.endswith("concurrent/futures/thread.py")
               for f in sys._current_frames().values())


async def _turns(n=5):
    """Let the loop run its other ready tasks n times."""
    for _ in range(n):
        await asyncio.sleep(0)


def test_durable_begin_and_complete_leave_the_loop_free(tmp_path, marker):
    d = _journal_carmyd(tmp_path)
    try:
        c = carmy.connect(d.socket, principal="u", session="s")
        assert c._handle.durable is True

        ev = {}

        @carmy.idempotent(c, tool="durable")
        async def tool(x, *, request_id):
            append(marker, "ran")
            ev["started"].set()
            await ev["go"].wait()
            return x * 2

        async def main():
            ev["started"], ev["go"] = asyncio.Event(), asyncio.Event()
            seen = {}
            # The begin of a new call waits for carmyd to record it.
            with Stopped(d) as stop:
                task = asyncio.ensure_future(tool(21, request_id="d1"))
                await _turns()
                seen["begin"] = (not stop.fired.is_set(), task.done(),
                                 lines(marker))
            await ev["started"].wait()
            # The completion waits for carmyd's answer.
            with Stopped(d) as stop:
                ev["go"].set()
                await _turns()
                seen["complete"] = (not stop.fired.is_set(), task.done())
            seen["result"] = await task
            return seen
        seen = asyncio.run(main())
        assert seen["begin"] == (True, False, [])
        assert seen["complete"] == (True, False)
        assert seen["result"] == 42
        assert lines(marker) == [b"ran"]

        @carmy.idempotent(c, tool="durable")
        async def again(x, *, request_id):
            raise AssertionError("must replay")
        assert asyncio.run(again(21, request_id="d1")) == 42
        c.close()
    finally:
        d.cleanup()


def test_cancelled_while_a_durable_begin_waits_gives_it_back(tmp_path,
                                                              marker):
    d = _journal_carmyd(tmp_path)
    try:
        c = carmy.connect(d.socket, principal="u", session="s")

        @carmy.idempotent(c, tool="gone")
        async def tool(*, request_id):
            append(marker, "ran " + request_id)
            return "ran"

        async def main():
            with Stopped(d) as stop:
                task = asyncio.ensure_future(tool(request_id="g1"))
                await _turns()
                # Cancelled once its begin runs on a carmy thread (not
                # while it is only queued, which would leave nothing to
                # give back).
                wait_for(_in_pool_call, "the begin to run on a carmy thread")
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                return not stop.fired.is_set()
        assert asyncio.run(main())
        assert lines(marker) == []

        # The reservation the begin made once carmyd came back is given
        # back: the next call runs (until then it is running, here).
        def runs():
            try:
                return asyncio.run(tool(request_id="g1")) == "ran"
            except carmy.ExecutionUncertain as e:
                assert e.state == "running"
                return False
        wait_for(runs, "the abandoned reservation to be given back")
        assert lines(marker) == [b"ran g1"]
        c.close()
    finally:
        d.cleanup()


def test_a_wait_leaves_the_loop_free(carmyd, client, session, marker):
    """wait= on a call running elsewhere: the loop serves the task that
    completes that call, and the waiter replays its result."""
    other = carmy.connect(carmyd.socket, principal="user-42",
                          session=session)

    @carmy.idempotent(other, tool="w", wait=WAIT_S)
    async def waiter(*, request_id):
        raise AssertionError("must not run")

    async def main():
        with client.call("w", {}, request_id="w1") as held:
            task = asyncio.ensure_future(waiter(request_id="w1"))
            await _turns()
            pending = not task.done()
            append(marker, "completing")
            held.complete("done")
        return pending, await task
    assert asyncio.run(main()) == (True, "done")
    other.close()


def test_a_task_cancelled_while_its_result_is_sent_records_it(
        client, marker, monkeypatch):
    """The task is cancelled while its completion is on its way (a retry
    while carmyd restarts, here held on an event): the completion, shielded,
    still records the result, and nothing abandons the call meanwhile; a
    retry replays it."""
    sending, cancelled = threading.Event(), threading.Event()
    real = carmy._complete

    def held(r, status, data):
        sending.set()
        assert cancelled.wait(WAIT_S)
        real(r, status, data)
    monkeypatch.setattr(carmy, "_complete", held)

    @carmy.idempotent(client, tool="sent")
    async def work(*, request_id):
        append(marker, "ran")
        return {"done": 1}

    async def main():
        task = asyncio.ensure_future(work(request_id="s1"))
        while not sending.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        cancelled.set()
        monkeypatch.setattr(carmy, "_complete", real)
        # The completion is still on its way: a wait= sees it land.
        return await carmy.idempotent(client, tool="sent", wait=WAIT_S)(
            work.__wrapped__)(request_id="s1")
    assert asyncio.run(main()) == {"done": 1}
    assert lines(marker) == [b"ran"]
