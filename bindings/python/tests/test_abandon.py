"""abandon(): a call whose tool the caller lost track of is given up as
uncertain at once (interrupted), neither completed nor released, until an
operator resolves it."""
import threading

import pytest

import carmy
from helpers import WAIT_S, Carmyd, append, lines


def expect_interrupted(c, tool, args, rid, eid):
    """A retry of (tool, args, rid) on c raises ExecutionUncertain for
    execution eid, interrupted; the block never runs."""
    with pytest.raises(carmy.ExecutionUncertain) as e:
        with c.call(tool, args, request_id=rid):
            raise AssertionError("must not enter")
    assert e.value.code == "EXECUTION_UNCERTAIN"
    assert e.value.state == "interrupted"
    assert e.value.execution_id == eid


def test_an_abandoned_call_is_interrupted_until_resolved(carmyd, client,
                                                         marker):
    with client.call("pay", {"amount": 5}, request_id="lost") as call:
        assert not call.replayed
        append(marker, "ran")
        eid = call.execution_id
        call.abandon()
    expect_interrupted(client, "pay", {"amount": 5}, "lost", eid)

    @carmy.idempotent(client, tool="pay")
    def pay(amount, *, request_id):
        append(marker, "ran again")
        return "paid twice"
    with pytest.raises(carmy.ExecutionUncertain) as e:
        pay(5, request_id="lost")
    assert (e.value.state, e.value.execution_id) == ("interrupted", eid)
    assert carmy.show(eid, socket=carmyd.socket)["state"] == "uncertain"

    carmy.resolve(eid, committed=True, result={"paid": 5},
                  socket=carmyd.socket)
    assert pay(5, request_id="lost") == {"paid": 5}
    with client.call("pay", {"amount": 5}, request_id="lost") as call:
        assert call.replayed
        assert (call.result, call.status) == ({"paid": 5}, "completed")
        assert call.execution_id == eid
    assert lines(marker) == [b"ran"]


def test_resolved_not_committed_the_abandoned_call_runs_again(carmyd, client,
                                                              marker):
    with client.call("t", None, request_id="nc") as call:
        eid = call.execution_id
        call.abandon()
    carmy.resolve(eid, committed=False, socket=carmyd.socket)
    with client.call("t", None, request_id="nc") as call:
        assert not call.replayed
        assert call.execution_id != eid
        append(marker, "ran")
        call.complete("second")
    assert lines(marker) == [b"ran"]


def test_another_client_and_a_waiter_see_it_interrupted(carmyd, client,
                                                        session):
    other = carmy.connect(carmyd.socket, principal="user-42",
                          session=session)
    try:
        got = {}

        def wait():
            try:
                with other.call("w", None, request_id="wa", wait=WAIT_S):
                    got["entered"] = True
            except carmy.CarmyError as e:
                got["error"] = e
        with client.call("w", None, request_id="wa") as held:
            t = threading.Thread(target=wait)
            t.start()
            held.abandon()
            t.join(WAIT_S * 2)
        assert not t.is_alive()
        # Waiting or not yet when the call was abandoned, the waiter is
        # told it is interrupted: neither a replay nor a second run.
        assert "entered" not in got
        assert isinstance(got["error"], carmy.ExecutionUncertain)
        assert got["error"].state == "interrupted"
        assert got["error"].execution_id == held.execution_id
        expect_interrupted(other, "w", None, "wa", held.execution_id)
    finally:
        other.close()


def test_leaving_the_block_after_abandon_neither_completes_nor_releases(
        client, marker):
    with client.call("t", None, request_id="left") as call:
        call.abandon()
    expect_interrupted(client, "t", None, "left", call.execution_id)
    with pytest.raises(RuntimeError):
        with client.call("t", None, request_id="raised") as raised:
            raised.abandon()
            raise RuntimeError("lost track of it")
    # Not recorded as failed: still interrupted.
    expect_interrupted(client, "t", None, "raised", raised.execution_id)


def test_abandon_twice_is_not_reserved(client):
    with client.call("t", None, request_id="twice") as call:
        call.abandon()
        with pytest.raises(carmy.CarmyError) as e:
            call.abandon()
        assert e.value.code == "NOT_RESERVED"
        assert e.value.execution_id == call.execution_id
        with pytest.raises(carmy.CarmyError) as e:
            call.complete("made up")
        assert e.value.code == "NOT_RESERVED"
    expect_interrupted(client, "t", None, "twice", call.execution_id)


def test_abandon_after_complete_is_not_reserved(client):
    with client.call("t", None, request_id="done") as call:
        call.complete(1)
        with pytest.raises(carmy.CarmyError) as e:
            call.abandon()
        assert e.value.code == "NOT_RESERVED"
        assert type(e.value) is carmy.CarmyError
    with client.call("t", None, request_id="done") as call:
        assert call.replayed and call.result == 1
        with pytest.raises(carmy.CarmyError) as e:
            call.abandon()
        assert e.value.code == "NOT_RESERVED"


def test_abandon_before_entering_is_not_reserved(client):
    call = client.call("t", None, request_id="early")
    with pytest.raises(carmy.CarmyError) as e:
        call.abandon()
    assert e.value.code == "NOT_RESERVED"
    with call:
        assert not call.replayed


def test_the_reservation_is_no_longer_live(client):
    r = client._handle.begin("t", "low", None, None, 0)
    assert r.live
    r.abandon()
    assert not r.live
    for again in (r.abandon, r.release,
                  lambda: r.complete(carmy._carmy.STATUS_COMPLETED, b"1")):
        with pytest.raises(carmy.CarmyError) as e:
            again()
        assert e.value.code == "NOT_RESERVED"
    expect_interrupted(client, "t", None, "low", r.execution_id)


def test_abandon_on_a_closed_client_raises(client):
    with client.call("t", None, request_id="closed") as call:
        client.close()
        with pytest.raises(ValueError):
            call.abandon()


def test_an_abandoned_call_stays_interrupted_across_a_restart(tmp_path,
                                                              marker):
    d = Carmyd("--store", "journal:%s" % (tmp_path / "j")).start()
    try:
        c = carmy.connect(d.socket, principal="u", session="s")
        assert c.durable
        with c.call("pay", {"amount": 5}, request_id="j1") as call:
            append(marker, "ran")
            eid = call.execution_id
            call.abandon()
        expect_interrupted(c, "pay", {"amount": 5}, "j1", eid)
        # Restarted from the journal alone (its segment is transient).
        assert d.stop() == 0
        d.start()
        c2 = carmy.connect(d.socket, principal="u", session="s")
        expect_interrupted(c2, "pay", {"amount": 5}, "j1", eid)
        assert carmy.show(eid, socket=d.socket)["state"] == "uncertain"
        carmy.resolve(eid, committed=True, result={"paid": 5},
                      socket=d.socket)
        with c2.call("pay", {"amount": 5}, request_id="j1") as again:
            assert again.replayed and again.result == {"paid": 5}
            assert again.execution_id == eid
        assert lines(marker) == [b"ran"]
        c2.close()
        c.close()
        assert d.stop() == 0
    finally:
        d.cleanup()
