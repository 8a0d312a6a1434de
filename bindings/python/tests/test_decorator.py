"""@carmy.idempotent against a real carmyd."""
import asyncio
import threading

import pytest

import carmy
from helpers import Carmyd, append, lines


def counted(client, marker, **kw):
    """create_order, decorated, appending to marker each time it runs."""
    @carmy.idempotent(client, tool="create_order", **kw)
    def create_order(sku, qty=1, *, request_id):
        append(marker, "%s %s" % (sku, qty))
        return {"order_id": len(lines(marker)), "sku": sku}
    return create_order


def test_runs_then_replays(client, marker):
    f = counted(client, marker)
    assert f("KB-01", 1, request_id="order-7f3") == {"order_id": 1,
                                                      "sku": "KB-01"}
    assert f("KB-01", 1, request_id="order-7f3") == {"order_id": 1,
                                                      "sku": "KB-01"}
    assert lines(marker) == [b"KB-01 1"]


def test_other_arguments_conflict(client, marker):
    f = counted(client, marker)
    f("KB-01", 1, request_id="order-7f3")
    with pytest.raises(carmy.IdempotencyConflict) as e:
        f("KB-02", 1, request_id="order-7f3")
    assert e.value.code == "IDEMPOTENCY_CONFLICT"
    assert e.value.execution_id.startswith("exec_")
    assert e.value.state == "completed"
    assert isinstance(e.value, carmy.CarmyError)
    assert len(lines(marker)) == 1


def test_running_elsewhere_is_uncertain(client, marker):
    inner = []

    @carmy.idempotent(client, tool="t")
    def slow(x, *, request_id):
        with pytest.raises(carmy.ExecutionUncertain) as e:
            slow(x, request_id=request_id)
        inner.append(e.value)
        return x
    assert slow(5, request_id="r1") == 5
    assert inner[0].state == "running"
    assert inner[0].code == "EXECUTION_UNCERTAIN"
    assert "not safe to retry blindly" in " ".join(
        carmy.ExecutionUncertain.__doc__.split())


def test_positional_keyword_and_defaults_are_one_call(client, marker):
    f = counted(client, marker)
    first = f("KB-01", 1, request_id="k")
    assert f(sku="KB-01", qty=1, request_id="k") == first
    assert f(qty=1, sku="KB-01", request_id="k") == first
    assert f("KB-01", request_id="k") == first
    assert f("KB-01", qty=1, request_id="k") == first
    assert len(lines(marker)) == 1


def test_tool_name_is_fingerprinted(client, marker):
    @carmy.idempotent(client, tool="a")
    def a(x, *, request_id):
        return x

    @carmy.idempotent(client, tool="b")
    def b(x, *, request_id):
        return x
    a(1, request_id="same")
    with pytest.raises(carmy.IdempotencyConflict):
        b(1, request_id="same")


def test_default_tool_is_the_qualified_name(client):
    @carmy.idempotent(client)
    def g(x, request_id):
        return x
    assert g(1, "r") == 1

    @carmy.idempotent(client, tool=g.__qualname__)
    def h(x, request_id):
        raise AssertionError("must replay")
    assert h(1, "r") == 1


def test_unserialisable_argument_raises_before_reserving(client, marker):
    f = counted(client, marker)
    with pytest.raises(TypeError):
        f(object(), 1, request_id="ser")
    assert lines(marker) == []
    # Nothing was reserved: the id is free for a call that runs.
    f("KB-01", 1, request_id="ser")
    assert len(lines(marker)) == 1


def test_bad_binding_raises_type_error(client, marker):
    f = counted(client, marker)
    with pytest.raises(TypeError):
        f("KB-01", 1, 2, request_id="x")
    with pytest.raises(TypeError):
        f("KB-01", sku="KB-01", request_id="x")
    with pytest.raises(TypeError):
        f("KB-01", nope=1, request_id="x")
    with pytest.raises(TypeError):
        f("KB-01")
    assert lines(marker) == []


def test_exception_is_recorded_and_replays_as_tool_failed(client, marker):
    @carmy.idempotent(client, tool="boom")
    def boom(x, *, request_id):
        append(marker, "ran")
        raise ValueError("no stock for %s" % x)
    with pytest.raises(ValueError):
        boom("KB-01", request_id="b1")
    with pytest.raises(carmy.ToolFailed) as e:
        boom("KB-01", request_id="b1")
    assert e.value.type == "ValueError"
    assert e.value.message == "no stock for KB-01"
    assert e.value.status == "failed"
    assert e.value.execution_id.startswith("exec_")
    assert lines(marker) == [b"ran"]


def test_keyboard_interrupt_records_cancelled(client, marker):
    @carmy.idempotent(client, tool="stop")
    def stop(*, request_id):
        append(marker, "ran")
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        stop(request_id="c1")
    with pytest.raises(carmy.ToolFailed) as e:
        stop(request_id="c1")
    assert e.value.status == "cancelled"
    assert e.value.type == "KeyboardInterrupt"
    assert lines(marker) == [b"ran"]


def test_unserialisable_result_is_recorded_failed(client, marker):
    @carmy.idempotent(client, tool="bad")
    def bad(*, request_id):
        append(marker, "ran")
        return object()
    with pytest.raises(TypeError):
        bad(request_id="u1")
    with pytest.raises(carmy.ToolFailed) as e:
        bad(request_id="u1")
    assert e.value.type == "TypeError"
    assert lines(marker) == [b"ran"]


class Opaque(Exception):
    """An exception with no text to record: its __str__ raises."""

    def __str__(self):
        raise RuntimeError("no text")


def nested(depth):
    """A list depth deep: more than the json encoder recurses into."""
    v = []
    for _ in range(depth):
        v = [v]
    return v


def raise_(exc):
    raise exc


# Outcomes the serializer cannot record, each as (serializer, the tool's
# body, what the first call raises, the recorded type, the recorded
# message or its start).
UNSERIALISABLE = {
    "int_msgpack_cannot_pack": (
        "msgpack", lambda: 2 ** 70, OverflowError, "OverflowError",
        carmy._UNSERIALISABLE_RESULT + ": "),
    "result_too_deep_for_json": (
        "json", lambda: nested(100000), RecursionError, "RecursionError",
        carmy._UNSERIALISABLE_RESULT + ": "),
    "exception_whose_str_raises": (
        "json", lambda: raise_(Opaque()), Opaque, "Opaque",
        carmy._UNSERIALISABLE_MESSAGE),
    "surrogate_message_with_msgpack": (
        "msgpack", lambda: raise_(ValueError("\udc80")), ValueError,
        "ValueError", carmy._UNSERIALISABLE_MESSAGE),
}


@pytest.mark.parametrize("case", sorted(UNSERIALISABLE))
def test_unserialisable_outcome_is_recorded_and_replays(client, marker,
                                                        case):
    """Once the body ran the call is recorded, whatever the serializer
    refuses: a retry replays the failure (one execution id), never
    ExecutionUncertain."""
    serializer, body, first, kind, message = UNSERIALISABLE[case]

    @carmy.idempotent(client, tool=case, serializer=serializer)
    def f(*, request_id):
        append(marker, "ran")
        return body()
    with pytest.raises(first):
        f(request_id="u1")
    ids = set()
    for _ in range(2):
        with pytest.raises(carmy.ToolFailed) as e:
            f(request_id="u1")
        assert (e.value.type, e.value.status) == (kind, "failed")
        assert e.value.message.startswith(message)
        ids.add(e.value.execution_id)
    with client.call(case, {}, request_id="u1",
                     serializer=serializer) as call:
        assert call.replayed and call.status == "failed"
        ids.add(call.execution_id)
    assert len(ids) == 1 and ids.pop().startswith("exec_")
    assert lines(marker) == [b"ran"]


class StoreFailing:
    """A stand-in for a Reservation whose store fails the first ``fails``
    completions (carmyd's STORE_FAILED: the reservation stays live)."""

    execution_id = "exec_" + "0" * 32

    def __init__(self, fails):
        self.fails = fails
        self.live = True
        self.sent = []

    def complete(self, status, data):
        self.sent.append((status, data))
        if len(self.sent) <= self.fails:
            raise carmy.CarmyError("store failed", "STORE_FAILED")
        self.live = False


def test_a_completion_the_store_fails_is_sent_again(monkeypatch):
    monkeypatch.setattr(carmy, "_RETRY_PAUSES_S", (0, 0, 0))
    r = StoreFailing(3)
    assert carmy._record(r, {"a": 1}, carmy._json_dumps) == {"a": 1}
    assert r.sent == [(carmy._carmy.STATUS_COMPLETED, b'{"a":1}')] * 4
    assert not r.live


def test_a_store_that_keeps_failing_raises_store_failed(monkeypatch):
    """After the retries, the caller gets STORE_FAILED with the execution
    id (the tool's exception as its context)."""
    monkeypatch.setattr(carmy, "_RETRY_PAUSES_S", (0, 0, 0))
    r = StoreFailing(99)
    with pytest.raises(carmy.CarmyError) as e:
        try:
            raise ValueError("no stock")
        except ValueError as exc:
            carmy._finish_error(r, exc, carmy._json_dumps)
    assert e.value.code == "STORE_FAILED"
    assert e.value.execution_id == r.execution_id
    assert isinstance(e.value.__context__, ValueError)
    assert len(r.sent) == 4 and r.live


def test_msgpack_serializer(client):
    @carmy.idempotent(client, tool="m", serializer="msgpack")
    def m(*, request_id):
        return {"blob": b"\x00\xff", "n": [1, 2]}
    assert m(request_id="m1") == {"blob": b"\x00\xff", "n": [1, 2]}

    @carmy.idempotent(client, tool="m", serializer="msgpack")
    def again(*, request_id):
        raise AssertionError("must replay")
    assert again(request_id="m1") == {"blob": b"\x00\xff", "n": [1, 2]}


def test_request_id_limits(client):
    @carmy.idempotent(client, tool="ids")
    def f(*, request_id):
        return 1
    assert f(request_id="k" * 256) == 1
    with pytest.raises(carmy.InvalidId) as e:
        f(request_id="k" * 257)
    assert e.value.code == "INVALID_ID"
    with pytest.raises(carmy.InvalidId):
        f(request_id="")
    with pytest.raises(TypeError):
        f(request_id=7)


def test_bad_principal_is_invalid_id(carmyd):
    with pytest.raises(carmy.InvalidId):
        carmy.connect(carmyd.socket, principal="p" * 257, session="s")


def test_key_must_be_a_parameter(client):
    with pytest.raises(TypeError):
        @carmy.idempotent(client, key="rid")
        def f(x, *, request_id):
            return x


def test_threads_share_one_client(client, marker):
    f = counted(client, marker, wait=30)
    barrier = threading.Barrier(8)
    out, errors = [], []

    def worker(i):
        try:
            barrier.wait()
            for k in range(20):
                out.append((k, f("KB-%d" % k, 1, request_id="t-%d" % k)))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(lines(marker)) == 20
    by_key = {}
    for k, v in out:
        by_key.setdefault(k, v)
        assert by_key[k] == v


def test_wait_replays_a_call_running_elsewhere(carmyd, client, session,
                                               marker):
    started, go = threading.Event(), threading.Event()

    @carmy.idempotent(client, tool="w")
    def slow(*, request_id):
        started.set()
        assert go.wait(30)
        append(marker, "ran")
        return "done"
    other = carmy.connect(carmyd.socket, principal="user-42",
                          session=session)

    @carmy.idempotent(other, tool="w", wait=30)
    def waiter(*, request_id):
        raise AssertionError("must not run")
    t = threading.Thread(target=slow, kwargs={"request_id": "w1"})
    t.start()
    assert started.wait(30)
    got = []
    w = threading.Thread(target=lambda: got.append(waiter(request_id="w1")))
    w.start()
    go.set()
    w.join()
    t.join()
    other.close()
    assert got == ["done"]
    assert lines(marker) == [b"ran"]


def test_async_gather_runs_each_key_once(client, marker):
    @carmy.idempotent(client, tool="async", wait=30)
    async def work(n, *, request_id):
        append(marker, request_id)
        await asyncio.sleep(0)
        return n * 2

    async def main():
        return await asyncio.gather(*(work(i % 10, request_id="a-%d" % (i % 10))
                                      for i in range(100)))
    assert asyncio.run(main()) == [(i % 10) * 2 for i in range(100)]
    assert sorted(lines(marker)) == sorted(b"a-%d" % k for k in range(10))


def test_daemon_down_is_unavailable_and_the_body_does_not_run(marker):
    d = Carmyd().start()
    try:
        c = carmy.connect(d.socket, principal="u", session="s")
        d.stop()
        f = counted(c, marker)
        with pytest.raises(carmy.DaemonUnavailable) as e:
            f("KB-01", 1, request_id="down")
        assert e.value.code in ("DAEMON_UNAVAILABLE", "DISCONNECTED")
        assert lines(marker) == []
        c.close()
        with pytest.raises(carmy.DaemonUnavailable) as e:
            carmy.connect(d.socket, principal="u", session="s")
        assert e.value.code == "DAEMON_UNAVAILABLE"
    finally:
        d.cleanup()


def test_closed_client_refuses(client):
    @carmy.idempotent(client, tool="x")
    def f(*, request_id):
        return 1
    client.close()
    assert client.closed
    with pytest.raises(ValueError):
        f(request_id="x")


def test_version():
    assert carmy.version() == carmy.__version__


def test_stubs_and_docstrings_cover_the_public_names():
    import ast
    import os
    stub = os.path.join(os.path.dirname(carmy.__file__), "__init__.pyi")
    with open(stub) as f:
        tree = ast.parse(f.read())
    stubbed = {n.name for n in tree.body
               if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert set(carmy.__all__) <= stubbed
    for name in carmy.__all__:
        assert getattr(carmy, name).__doc__, name


def test_json_results_read_back_whatever_their_spacing():
    assert carmy._json_loads(b'{"a":[1,2]}') == {"a": [1, 2]}
    assert carmy._json_loads(b' {"a": 1}\n') == {"a": 1}
    with pytest.raises(ValueError):
        carmy._json_loads(b'[1] x')
    with pytest.raises(ValueError):
        carmy._json_loads(b'')


def test_result_too_large_is_recorded_and_replayed(marker):
    d = Carmyd("--max-result", "64").start()
    try:
        c = carmy.connect(d.socket, principal="u", session="s")
        assert c.max_result == 64

        @carmy.idempotent(c, tool="big")
        def big(*, request_id):
            append(marker, "ran")
            return "x" * 100
        for _ in range(2):
            with pytest.raises(carmy.ResultTooLarge) as e:
                big(request_id="big-1")
            assert e.value.code == "RESULT_TOO_LARGE"
        assert lines(marker) == [b"ran"]
        c.close()
    finally:
        d.cleanup()


def test_any_signature_binds_and_the_wrapper_keeps_the_functions_face(
        client, marker):
    @carmy.idempotent(client, tool="v")
    def v(a, /, *items, request_id, **opts):
        "Doc of v."
        append(marker, "ran")
        return [a, list(items), opts]
    assert v(1, 2, 3, request_id="v1", x=1) == [1, [2, 3], {"x": 1}]
    assert v(1, 2, 3, x=1, request_id="v1") == [1, [2, 3], {"x": 1}]
    with pytest.raises(carmy.IdempotencyConflict):
        v(1, 2, request_id="v1", x=1)
    with pytest.raises(TypeError):
        v(request_id="v2")
    assert lines(marker) == [b"ran"]
    assert v.__name__ == "v" and v.__doc__ == "Doc of v."
    assert v.__wrapped__.__name__ == "v"
    import inspect
    assert list(inspect.signature(v).parameters) == ["a", "items",
                                                     "request_id", "opts"]


def test_a_replay_after_many_calls_keeps_no_reference(client):
    import sys

    @carmy.idempotent(client, tool="refs")
    def f(x, *, request_id):
        return [x]
    arg, rid = "x" * 3, "refs-%d" % len(client.session)
    f(arg, request_id=rid)
    before = [sys.getrefcount(o) for o in (arg, rid, f)]
    for _ in range(1000):
        assert f(arg, request_id=rid) == ["xxx"]
        assert f(arg, request_id=rid) == ["xxx"]
    assert [sys.getrefcount(o) for o in (arg, rid, f)] == before


def test_a_decorated_function_pickles_by_name(client):
    import pickle
    import sys
    import types
    mod = types.ModuleType("carmy_pickled")
    sys.modules[mod.__name__] = mod
    try:
        def tool(x, *, request_id):
            return x
        tool.__module__, tool.__qualname__ = mod.__name__, "tool"
        mod.tool = carmy.idempotent(client)(tool)
        assert pickle.loads(pickle.dumps(mod.tool)) is mod.tool
    finally:
        del sys.modules[mod.__name__]


def test_a_replay_reads_any_json_and_refuses_what_is_not(client):
    """The extension reads a compact JSON result itself; anything else
    (spaces around it, not JSON at all) goes to json.loads()."""
    for rid, raw in (("sp", b' {"a": [1, 2]}\n'), ("bad", b"{not json")):
        with client.call("raw", {"x": 1}, request_id=rid) as call:
            call._r.complete(carmy._carmy.STATUS_COMPLETED, raw)
            call._done = True

    @carmy.idempotent(client, tool="raw")
    def raw(x, *, request_id):
        raise AssertionError("must replay")
    assert raw(1, request_id="sp") == {"a": [1, 2]}
    with pytest.raises(ValueError):
        raw(1, request_id="bad")


def test_a_keyword_named_like_a_positional_only_parameter_is_refused(
        client, marker):
    """Bound by name, f(2, a=1) (a positional-only, the keyword going to
    **kw) would be f(1)'s arguments: refused, and nothing reserved."""
    @carmy.idempotent(client, tool="po")
    def f(a, /, *, request_id, **kw):
        append(marker, "f %r %r" % (a, kw))
        return [a, kw]

    @carmy.idempotent(client, tool="va")
    def g(*a, request_id, **kw):
        append(marker, "g %r %r" % (a, kw))
        return [list(a), kw]
    assert f(1, request_id="po") == [1, {}]
    with pytest.raises(TypeError, match="keyword argument 'a'"):
        f(2, request_id="po", a=1)
    assert g(1, request_id="va") == [[1], {}]
    with pytest.raises(TypeError, match="keyword argument 'a'"):
        g(request_id="va", a=[1])
    # Nothing was reserved for them: fresh ids run.
    with pytest.raises(TypeError):
        f(2, request_id="po-2", a=1)
    assert f(2, request_id="po-2", b=1) == [2, {"b": 1}]
    assert lines(marker) == [b"f 1 {}", b"g (1,) {}", b"f 2 {'b': 1}"]


def test_an_interrupt_while_the_result_is_serialised_records_cancelled(
        client, marker, monkeypatch):
    """The function ran and returned; a KeyboardInterrupt in the
    serializer is recorded as one the function raised (cancelled), not
    left running."""
    dumps, loads = carmy._SERIALIZERS["json"]

    def interrupted(value):
        if value == "interrupt me":
            raise KeyboardInterrupt
        return dumps(value)
    monkeypatch.setitem(carmy._SERIALIZERS, "json", (interrupted, loads))

    @carmy.idempotent(client, tool="ki")
    def f(*, request_id):
        append(marker, "ran")
        return "interrupt me"
    with pytest.raises(KeyboardInterrupt):
        f(request_id="ki")
    with pytest.raises(carmy.ToolFailed) as e:
        f(request_id="ki")
    assert e.value.status == "cancelled"
    assert e.value.type == "KeyboardInterrupt"
    assert lines(marker) == [b"ran"]


def test_a_completion_that_fails_for_good_leaves_the_call_uncertain(
        client, marker, monkeypatch):
    """A completion refused after its retries (here every one is, as a
    store that stays down would): the call is abandoned at once, so its
    retries answer interrupted, not running, and the function never runs
    again."""
    def refused(r, status, data):
        raise carmy.CarmyError("store failed", "STORE_FAILED",
                               r.execution_id)
    monkeypatch.setattr(carmy, "_complete", refused)

    @carmy.idempotent(client, tool="lost")
    def f(*, request_id):
        append(marker, "ran")
        return 1
    with pytest.raises(carmy.CarmyError) as e:
        f(request_id="lost")
    assert e.value.code == "STORE_FAILED"
    with pytest.raises(carmy.ExecutionUncertain) as u:
        f(request_id="lost")
    assert u.value.state == "interrupted"
    assert u.value.execution_id == e.value.execution_id
    assert lines(marker) == [b"ran"]


def test_wait_is_at_most_a_day_and_not_nan(client):
    @carmy.idempotent(client, tool="w", wait=1e20)
    def f(*, request_id):
        return 1
    assert f(request_id="w") == 1
    with pytest.raises(ValueError, match="wait must be"):
        carmy.idempotent(client, tool="w", wait=float("nan"))
    with pytest.raises(ValueError, match="wait must be"):
        carmy.idempotent(client, tool="w", wait=-1)
