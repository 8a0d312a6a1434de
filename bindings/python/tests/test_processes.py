"""Real processes: racing workers, a worker killed mid-body, fork."""
import multiprocessing
import os
import signal

import pytest

import carmy
from helpers import append, lines, wait_for

ctx = multiprocessing.get_context("fork")


def _racer(socket, session, marker, barrier, results):
    c = carmy.connect(socket, principal="user-42", session=session)

    @carmy.idempotent(c, tool="race", wait=30)
    def charge(amount, *, request_id):
        append(marker, str(os.getpid()))
        return {"charged": amount, "by": os.getpid()}
    barrier.wait()
    results.put(charge(10, request_id="race-1"))
    c.close()


def test_sixteen_workers_race_on_one_key(carmyd, session, marker):
    barrier = ctx.Barrier(16)
    results = ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(carmyd.socket, session,
                                              marker, barrier, results))
             for _ in range(16)]
    for p in procs:
        p.start()
    got = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(lines(marker)) == 1
    winner = int(lines(marker)[0])
    assert got == [{"charged": 10, "by": winner}] * 16


def _killed(socket, session, marker, hold):
    c = carmy.connect(socket, principal="user-42", session=session)

    @carmy.idempotent(c, tool="pay")
    def pay(amount, *, request_id):
        append(marker, "started")
        os.read(hold, 1)            # never answered: killed here
        return "paid"
    pay(5, request_id="pay-1")


def test_worker_killed_mid_body_leaves_uncertain(client, carmyd, session,
                                                  marker):
    r, w = os.pipe()
    p = ctx.Process(target=_killed, args=(carmyd.socket, session, marker, r))
    p.start()
    wait_for(lambda: lines(marker) == [b"started"], "the body to start")
    os.kill(p.pid, signal.SIGKILL)
    p.join(60)
    os.close(r)
    os.close(w)

    @carmy.idempotent(client, tool="pay")
    def pay(amount, *, request_id):
        raise AssertionError("must not run again")

    def interrupted():
        try:
            pay(5, request_id="pay-1")
        except carmy.ExecutionUncertain as e:
            return e.state == "interrupted"
        return False
    wait_for(interrupted, "the entry to turn interrupted")
    with pytest.raises(carmy.ExecutionUncertain) as e:
        pay(5, request_id="pay-1")
    assert e.value.execution_id.startswith("exec_")
    assert lines(marker) == [b"started"]
    # An operator finds the payment went through and records it.
    client.resolve("pay", {"amount": 5}, request_id="pay-1",
                   execution_id=e.value.execution_id, committed=True,
                   result="paid")
    assert pay(5, request_id="pay-1") == "paid"
    assert lines(marker) == [b"started"]


def test_parents_client_after_fork_raises_forked(client, carmyd, session,
                                                 marker):
    @carmy.idempotent(client, tool="f")
    def f(x, *, request_id):
        append(marker, "%d %s" % (os.getpid(), request_id))
        return x
    assert f(1, request_id="before") == 1
    # The parent holds a live reservation across the fork.
    call = client.call("f2", None, request_id="held")
    call.__enter__()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            f(2, request_id="child")
            code = 10
        except carmy.Forked as e:
            code = 0 if e.code == "FORKED" else 11
        except BaseException:
            code = 12
        try:
            call.complete("from the child")
            code = code or 13
        except carmy.Forked:
            pass
        except BaseException:
            code = code or 14
        try:
            c2 = carmy.connect(carmyd.socket, principal="user-42",
                               session=session)

            @carmy.idempotent(c2, tool="f")
            def g(x, *, request_id):
                return x * 3
            code = code or (0 if g(3, request_id="own") == 9 else 15)
            c2.close()
        except BaseException:
            code = code or 16
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    # The parent's client and reservation are as they were.
    call.complete("from the parent")
    call.__exit__(None, None, None)
    assert f(1, request_id="before") == 1
    assert f(4, request_id="after") == 4
    with client.call("f2", None, request_id="held") as again:
        assert again.result == "from the parent"
    assert [line.split()[1] for line in lines(marker)] == [b"before",
                                                           b"after"]
