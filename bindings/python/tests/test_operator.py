"""carmy.status/show/resolve/release/forget/purge: carmyctl's commands
from Python, against a real carmyd and workers killed with SIGKILL."""
import multiprocessing
import os
import signal

import pytest

import carmy
from helpers import Carmyd, append, lines, wait_for

ctx = multiprocessing.get_context("fork")


@pytest.fixture
def own(marker):
    """A carmyd of this test's own (its counts are this test's only), a
    client on it, and the marker file."""
    d = Carmyd().start()
    c = carmy.connect(d.socket, principal="ops", session="s")
    yield d, c
    c.close()
    rc = d.stop()
    d.cleanup()
    assert rc == 0, "carmyd exited with %s" % rc


def _worker(socket, marker, hold, tool, rid):
    c = carmy.connect(socket, principal="ops", session="s")

    @carmy.idempotent(c, tool=tool)
    def body(amount, *, request_id):
        append(marker, "started " + request_id)
        os.read(hold, 1)            # never answered: killed here
        return "not reached"
    body(5, request_id=rid)


def interrupted_by_sigkill(d, c, marker, tool, rid):
    """A real worker reserves rid, starts its body and is killed with
    SIGKILL: the execution id of the interrupted entry it leaves."""
    r, w = os.pipe()
    p = ctx.Process(target=_worker, args=(d.socket, marker, r, tool, rid))
    p.start()
    wait_for(lambda: ("started " + rid).encode() in lines(marker),
             "the body to start")
    os.kill(p.pid, signal.SIGKILL)
    p.join(60)
    os.close(r)
    os.close(w)
    assert p.exitcode == -signal.SIGKILL
    found = []

    def uncertain():
        try:
            with c.call(tool, {"amount": 5}, request_id=rid):
                raise AssertionError("must not enter")
        except carmy.ExecutionUncertain as e:
            found[:] = [e]
            return e.state == "interrupted"
    wait_for(uncertain, "the entry to turn interrupted")
    return found[0].execution_id


def test_status_counts_entries_and_answers(own, marker):
    d, c = own
    s = carmy.status(socket=d.socket)
    assert (s["running"], s["uncertain"], s["completed"]) == (0, 0, 0)
    assert s["carmyd_up"] is True

    @carmy.idempotent(c, tool="t")
    def f(x, *, request_id):
        return x
    for i, x in enumerate("abc"):
        f(x, request_id="r%d" % i)
    f("a", request_id="r0")
    f("a", request_id="r0")
    with pytest.raises(carmy.IdempotencyConflict):
        f("z", request_id="r0")
    held = c.call("held", None, request_id="h")
    held.__enter__()
    with pytest.raises(carmy.ExecutionUncertain):
        with c.call("held", None, request_id="h"):
            raise AssertionError("must not enter")
    s = carmy.status(socket=d.socket)
    assert (s["running"], s["uncertain"], s["completed"]) == (1, 0, 3)
    assert (s["reserves"], s["replays"], s["conflicts"],
            s["uncertain_answers"], s["capacity_refusals"]) == (4, 2, 1, 1, 0)
    assert s["live"] == 4 and s["used"] >= 4
    held.complete("done")
    held.__exit__(None, None, None)
    interrupted_by_sigkill(d, c, marker, "pay", "p1")
    s = carmy.status(socket=d.socket)
    assert (s["running"], s["uncertain"], s["completed"]) == (0, 1, 4)


def test_resolve_an_interrupted_call_by_its_id(own, marker):
    d, c = own
    eid = interrupted_by_sigkill(d, c, marker, "pay", "p1")
    row = carmy.show(eid, socket=d.socket)
    assert row["state"] == "uncertain"
    assert (row["principal"], row["session"], row["request_id"]) == \
        ("ops", "s", "p1")
    assert row["tool"] == "pay" and row["args"] == {"amount": 5}
    # Not settled yet: an operator's committed resolve of it needs a
    # result in its format; then every retry replays it.
    carmy.resolve(eid, committed=True, result={"paid": 5},
                  socket=d.socket)

    @carmy.idempotent(c, tool="pay")
    def pay(amount, *, request_id):
        raise AssertionError("must not run again")
    assert pay(5, request_id="p1") == {"paid": 5}
    row = carmy.show(eid, socket=d.socket)
    assert row["state"] == "completed" and row["status"] == "completed"
    assert "resolved_uid" in row
    # Settled: a second resolve is refused, by name.
    with pytest.raises(carmy.CarmyError) as e:
        carmy.resolve(eid, committed=True, result=1, socket=d.socket)
    assert e.value.code == "NOT_INTERRUPTED"
    assert e.value.execution_id == eid
    assert lines(marker) == [b"started p1"]


def test_resolve_a_failure_with_its_status(own, marker):
    d, c = own
    eid = interrupted_by_sigkill(d, c, marker, "pay", "p2")
    carmy.resolve(eid, committed=True, status="failed",
                  result={"type": "CardDeclined", "message": "declined"},
                  socket=d.socket)

    @carmy.idempotent(c, tool="pay")
    def pay(amount, *, request_id):
        raise AssertionError("must not run again")
    with pytest.raises(carmy.ToolFailed) as e:
        pay(5, request_id="p2")
    assert (e.value.type, e.value.message) == ("CardDeclined", "declined")


def test_release_lets_the_next_call_run(own, marker):
    d, c = own
    eid = interrupted_by_sigkill(d, c, marker, "pay", "p3")
    carmy.release(eid, socket=d.socket)

    @carmy.idempotent(c, tool="pay")
    def pay(amount, *, request_id):
        append(marker, "ran again")
        return "paid"
    assert pay(5, request_id="p3") == "paid"
    assert lines(marker) == [b"started p3", b"ran again"]
    with pytest.raises(carmy.CarmyError) as e:
        carmy.show(eid, socket=d.socket)
    assert e.value.code == "NOT_FOUND"


def test_forget_and_purge(own, marker):
    d, c = own

    @carmy.idempotent(c, tool="f")
    def f(*, request_id):
        append(marker, request_id)
        return len(lines(marker))
    assert f(request_id="a") == 1
    with c.call("f", {}, request_id="a") as call:
        eid = call.execution_id
    carmy.forget(eid, socket=d.socket)
    assert f(request_id="a") == 2
    assert f(request_id="b") == 3
    held = c.call("f", None, request_id="held")
    held.__enter__()
    with pytest.raises(carmy.CarmyError) as e:
        carmy.forget(held.execution_id, socket=d.socket)
    assert e.value.code == "NOT_COMPLETED"
    held.__exit__(None, None, None)
    assert carmy.purge(0, socket=d.socket) == 2
    assert carmy.status(socket=d.socket)["completed"] == 0
    assert f(request_id="a") == 4


def test_operator_errors_are_named(own, tmp_path):
    d, c = own
    unknown = "exec_" + "0" * 32
    for fn in (carmy.show, carmy.release, carmy.forget):
        with pytest.raises(carmy.CarmyError) as e:
            fn(unknown, socket=d.socket)
        assert e.value.code == "NOT_FOUND"
    with pytest.raises(ValueError):
        carmy.release("exec_nothex", socket=d.socket)
    with pytest.raises(ValueError):
        carmy.resolve(unknown, committed=False, result=1, socket=d.socket)
    with pytest.raises(ValueError):
        carmy.resolve(unknown, committed=True, status="nope",
                      socket=d.socket)
    with pytest.raises(ValueError):
        carmy.resolve(unknown, committed=True, result=b"\0",
                      serializer="msgpack", socket=d.socket)
    with pytest.raises(carmy.DaemonUnavailable) as e:
        carmy.status(socket=str(tmp_path / "none.sock"))
    assert e.value.code == "DAEMON_UNAVAILABLE"


def test_carmyctl_missing_is_said(monkeypatch, tmp_path):
    monkeypatch.setenv("CARMYCTL", "")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError):
        carmy.status()
