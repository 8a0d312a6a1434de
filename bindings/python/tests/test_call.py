"""The low-level form: with client.call(...) as call."""
import threading
import time

import pytest

import carmy
from helpers import Carmyd, append, lines, wait_for


def test_runs_completes_then_replays(client, marker):
    with client.call("create_order", {"sku": "KB-01"}, request_id="abc",
                     meta={"agent": "a1"}) as call:
        assert not call.replayed
        assert call.execution_id.startswith("exec_")
        append(marker, "ran")
        call.complete({"order_id": 7})
        first = call.execution_id
    with client.call("create_order", {"sku": "KB-01"}, request_id="abc",
                     meta={"agent": "a1"}) as call:
        assert call.replayed
        assert call.result == {"order_id": 7}
        assert call.status == "completed"
        assert call.execution_id == first
    assert lines(marker) == [b"ran"]


def test_conflict_and_uncertain(client):
    with client.call("t", {"a": 1}, request_id="r") as call:
        with pytest.raises(carmy.ExecutionUncertain) as e:
            with client.call("t", {"a": 1}, request_id="r"):
                raise AssertionError("must not enter")
        assert e.value.state == "running"
        assert e.value.execution_id == call.execution_id
        call.complete("ok")
    with pytest.raises(carmy.IdempotencyConflict) as e:
        with client.call("t", {"a": 2}, request_id="r"):
            raise AssertionError("must not enter")
    assert e.value.state == "completed"


def test_map_key_order_does_not_matter(client):
    with client.call("t", {"a": 1, "b": 2}, request_id="o") as call:
        call.complete(1)
    with client.call("t", {"b": 2, "a": 1}, request_id="o") as call:
        assert call.replayed


def test_leaving_without_completing_releases(client, marker):
    with client.call("t", None, request_id="rel") as call:
        assert not call.replayed
    with client.call("t", None, request_id="rel") as call:
        assert not call.replayed
        call.complete("second")
    with client.call("t", None, request_id="rel") as call:
        assert call.result == "second"


def test_leaving_with_an_exception_records_failed(client):
    with pytest.raises(RuntimeError):
        with client.call("t", [1, 2], request_id="f") as call:
            raise RuntimeError("tool broke")
    with client.call("t", [1, 2], request_id="f") as call:
        assert call.replayed
        assert call.status == "failed"
        assert call.result == {"type": "RuntimeError",
                               "message": "tool broke"}


def test_complete_with_a_status(client):
    with client.call("t", None, request_id="s") as call:
        call.complete({"after": 30}, status="timed_out")
    with client.call("t", None, request_id="s") as call:
        assert call.status == "timed_out"
        assert call.result == {"after": 30}


def test_unserialisable_result_leaves_the_call_live(client):
    with client.call("t", None, request_id="u") as call:
        with pytest.raises(TypeError):
            call.complete(object())
        call.complete("fine")
    with client.call("t", None, request_id="u") as call:
        assert call.result == "fine"


def test_unserialisable_args_raise_before_reserving(client):
    with pytest.raises(TypeError):
        with client.call("t", {"x": object()}, request_id="a"):
            raise AssertionError("must not enter")
    with client.call("t", {"x": 1}, request_id="a") as call:
        assert not call.replayed
        call.complete(1)


def test_complete_twice_is_refused(client):
    with client.call("t", None, request_id="twice") as call:
        call.complete(1)
        with pytest.raises(carmy.CarmyError):
            call.complete(2)


def test_keyboard_interrupt_in_the_block_records_cancelled(client, marker):
    with pytest.raises(KeyboardInterrupt):
        with client.call("t", None, request_id="ki") as call:
            append(marker, "ran")
            raise KeyboardInterrupt
    with client.call("t", None, request_id="ki") as call:
        assert call.replayed
        assert call.status == "cancelled"
        assert call.result["type"] == "KeyboardInterrupt"
    assert lines(marker) == [b"ran"]


def test_the_spec_rows_through_the_with_form(client, marker):
    """Runs, replays, conflicts, and running elsewhere is uncertain."""
    def charge(amount, rid):
        with client.call("charge", {"amount": amount},
                         request_id=rid) as call:
            if not call.replayed:
                append(marker, "charged %d" % amount)
                call.complete({"charged": amount})
            return call.result
    assert charge(10, "row") == {"charged": 10}
    assert charge(10, "row") == {"charged": 10}
    with pytest.raises(carmy.IdempotencyConflict):
        charge(20, "row")
    with client.call("charge", {"amount": 5}, request_id="busy") as held:
        with pytest.raises(carmy.ExecutionUncertain) as e:
            charge(5, "busy")
        assert e.value.state == "running"
        held.complete({"charged": 5})
    assert lines(marker) == [b"charged 10"]


def test_an_exception_msgpack_cannot_pack_records_a_fixed_message(client):
    with pytest.raises(ValueError):
        with client.call("t", None, request_id="sur",
                         serializer="msgpack"):
            raise ValueError("\udc80")
    with client.call("t", None, request_id="sur",
                     serializer="msgpack") as call:
        assert call.replayed and call.status == "failed"
        assert call.result == {"type": "ValueError",
                               "message": carmy._UNSERIALISABLE_MESSAGE}


def test_a_completion_that_finds_carmyd_away_is_sent_again(marker,
                                                           monkeypatch):
    """carmyd is killed while the body runs and stays away for longer than
    libcarmy waits for it (CARMY_RECONNECT_MS, 200 ms here): complete()'s
    first try is refused DAEMON_UNAVAILABLE, the reservation live, and it
    tries again after a pause. carmyd is started again in that pause (it
    holds this process's call): the result is recorded, and replays."""
    d = Carmyd().start()
    real_sleep = time.sleep
    paused = []

    def sleep(s):
        if not paused:
            d.start()
        paused.append(s)
        real_sleep(s)

    try:
        monkeypatch.setenv("CARMY_RECONNECT_MS", "200")
        c = carmy.connect(d.socket, principal="u", session="s")
        monkeypatch.delenv("CARMY_RECONNECT_MS")
        with c.call("pay", {"amount": 5}, request_id="away") as call:
            append(marker, "ran")
            eid = call.execution_id
            d.kill()
            monkeypatch.setattr(time, "sleep", sleep)
            call.complete({"paid": 5})
            monkeypatch.setattr(time, "sleep", real_sleep)
        assert paused, "complete() was never refused"
        c2 = carmy.connect(d.socket, principal="u", session="s")
        with c2.call("pay", {"amount": 5}, request_id="away") as again:
            assert again.replayed and again.result == {"paid": 5}
            assert again.execution_id == eid
        assert lines(marker) == [b"ran"]
        c2.close()
        c.close()
    finally:
        d.cleanup()


def test_a_call_is_entered_once(client):
    call = client.call("once", {"a": 1}, request_id="once")
    with call:
        call.complete("ok")
    with pytest.raises(RuntimeError, match="entered once"):
        with call:
            raise AssertionError("must not enter")
    with client.call("once", {"a": 1}, request_id="once") as again:
        assert again.replayed and again.result == "ok"


def test_a_block_left_with_its_completion_refused_is_uncertain(
        client, monkeypatch):
    """complete() refused for good (every try, as a store that stays down
    would): leaving the block abandons the call, so a retry answers
    interrupted rather than running."""
    def refused(r, status, data):
        raise carmy.CarmyError("store failed", "STORE_FAILED",
                               r.execution_id)
    monkeypatch.setattr(carmy, "_complete", refused)
    with pytest.raises(carmy.CarmyError, match="store failed"):
        with client.call("t", None, request_id="refused") as call:
            call.complete("ok")
    with pytest.raises(carmy.ExecutionUncertain) as e:
        with client.call("t", None, request_id="refused"):
            raise AssertionError("must not enter")
    assert (e.value.state, e.value.execution_id) == ("interrupted",
                                                      call.execution_id)


def test_a_reservation_dropped_while_live_is_abandoned(client):
    """The low-level handle's Reservation let go of unfinished: its call
    turns uncertain now, not when the client closes."""
    r = client._handle.begin("t", "dropped", None, None, 0)
    assert r.live
    eid = r.execution_id
    del r
    with pytest.raises(carmy.ExecutionUncertain) as e:
        with client.call("t", None, request_id="dropped"):
            raise AssertionError("must not enter")
    assert (e.value.state, e.value.execution_id) == ("interrupted", eid)


def test_a_client_closed_while_its_begin_waits_runs_nothing(carmyd,
                                                             session,
                                                             marker):
    """A begin waiting (wait=) for another client's call, whose client is
    closed meanwhile: once the other call is given back, the begin's
    reservation goes back too (nothing ran) and it raises as a closed
    client does; the identity is free for the next caller."""
    other = carmy.connect(carmyd.socket, principal="p", session=session)
    c = carmy.connect(carmyd.socket, principal="p", session=session)
    holder = other.call("w", {"x": 1}, request_id="closing")
    holder.__enter__()

    @carmy.idempotent(c, tool="w", wait=60)
    def f(x, *, request_id):
        append(marker, "ran")
        return "done"
    def answers():
        return carmy.status(socket=carmyd.socket)["uncertain_answers"]
    got = []
    before = answers()
    th = threading.Thread(target=lambda: got.append(
        pytest.raises(ValueError, f, 1, request_id="closing")))
    th.start()
    # The begin found the call running (counted), and waits with carmyd.
    wait_for(lambda: answers() > before, "the begin to wait")
    c.close()
    holder.__exit__(None, None, None)
    th.join(60)
    assert not th.is_alive() and "closed" in str(got[0].value)
    assert lines(marker) == []
    with other.call("w", {"x": 1}, request_id="closing") as call:
        assert not call.replayed
        call.complete("second")
    other.close()


def test_resolve_names_an_unknown_status(client):
    with pytest.raises(ValueError, match="unknown status 'done'"):
        client.resolve("t", None, request_id="x", execution_id="exec_" +
                       "0" * 32, committed=True, result=1, status="done")


def test_a_signal_handler_ends_a_wait(carmyd, client, session, marker):
    """A wait= on the main thread runs signal handlers while it waits: one
    that raises ends it (^C's KeyboardInterrupt likewise), with nothing
    reserved; the call waited for is untouched."""
    import os
    import signal

    class Interrupted(Exception):
        pass

    def interrupt(signum, frame):
        raise Interrupted()
    other = carmy.connect(carmyd.socket, principal="user-42",
                          session=session)
    holder = other.call("w", {}, request_id="sig")
    holder.__enter__()

    @carmy.idempotent(client, tool="w", wait=600)
    def f(*, request_id):
        append(marker, "ran")

    def answers():
        return carmy.status(socket=carmyd.socket)["uncertain_answers"]
    before = answers()

    def signal_once_waiting():
        wait_for(lambda: answers() > before, "the wait to begin")
        os.kill(os.getpid(), signal.SIGUSR1)
    old = signal.signal(signal.SIGUSR1, interrupt)
    try:
        t = threading.Thread(target=signal_once_waiting)
        t.start()
        started = time.monotonic()
        with pytest.raises(Interrupted):
            f(request_id="sig")
        t.join()
        # Not the 600 s asked for: the handler ended it.
        assert time.monotonic() - started < 300
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert lines(marker) == []
    with pytest.raises(carmy.ExecutionUncertain) as e:
        with client.call("w", {}, request_id="sig"):
            raise AssertionError("must not enter")
    assert (e.value.state, e.value.execution_id) == ("running",
                                                      holder.execution_id)
    holder.__exit__(None, None, None)
    other.close()
