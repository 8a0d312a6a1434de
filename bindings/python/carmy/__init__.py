"""carmy - safe retries for AI agents' tool calls, from Python.

A thin layer over libcarmy (the C extension carmy._carmy): connect() gives a
client; @idempotent(client) makes a function run once per request id and
replay its recorded result to every retry; client.call() is the same as a
``with`` block for runners that are not one function.

    c = carmy.connect(principal="user-42", session="sess-1")

    @carmy.idempotent(c, tool="create_order", key="request_id")
    def create_order(sku, qty, *, request_id):
        return {"order_id": make_order(sku, qty)}

Arguments are sent to libcarmy as msgpack (python3-msgpack) and
fingerprinted there; results are recorded as JSON (the default) or msgpack.
"""
import asyncio
import concurrent.futures
import functools
import inspect
import json
import json.decoder
import os
import threading
import time

import msgpack

from . import _carmy, _ctl

__all__ = [
    "connect", "Client", "Call", "idempotent", "version", "default_socket",
    "CarmyError", "IdempotencyConflict", "ExecutionUncertain",
    "IdempotencyCapacity", "DaemonUnavailable", "InvalidId",
    "ResultTooLarge", "ToolFailed", "Forked",
    "status", "show", "resolve", "release", "forget", "purge",
]

__version__ = _carmy.VERSION


class CarmyError(Exception):
    """An error from Carmy.

    ``code`` is the stable UPPER_SNAKE name of the error (as carmy.h's
    carmy_errname() gives it); ``execution_id`` and ``state`` name the
    existing entry where there is one (a conflict, an uncertain call),
    else None.
    """

    code = "CARMY_ERROR"

    def __init__(self, message, code=None, execution_id=None, state=None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.execution_id = execution_id
        self.state = state


class IdempotencyConflict(CarmyError):
    """The request id was used before with other arguments (or another
    tool): this call is not a retry of that one. Nothing ran."""

    code = "IDEMPOTENCY_CONFLICT"


class ExecutionUncertain(CarmyError):
    """The request id's execution is running elsewhere, or its owner died
    while running it (``state`` says which: "running" or "interrupted").

    It is not safe to retry blindly: the tool may have had its effect. Wait
    for it (``wait=``), or reconcile: find out whether the effect happened
    and settle the execution (``carmyctl resolve``, Client.resolve()).
    """

    code = "EXECUTION_UNCERTAIN"


class IdempotencyCapacity(CarmyError):
    """carmyd's table is full: nothing was reserved; try again later."""

    code = "IDEMPOTENCY_CAPACITY"


class DaemonUnavailable(CarmyError):
    """No carmyd answers (code DAEMON_UNAVAILABLE), or the connection to it
    was lost and not given back (code DISCONNECTED).

    Raised when a call starts (execution_id None): nothing was reserved
    and the tool did not run. Raised about a reservation (by a completion,
    a release or abandon(); execution_id set), after it was sent again for
    about 10 s: with code DISCONNECTED the execution is uncertain (see
    ExecutionUncertain); with code DAEMON_UNAVAILABLE carmyd is not back
    from a restart yet and the reservation stays live until the client
    closes, then it is uncertain too.
    """

    code = "DAEMON_UNAVAILABLE"


class InvalidId(CarmyError):
    """A principal, session or request id is empty or longer than 256
    bytes."""

    code = "INVALID_ID"


class ResultTooLarge(CarmyError):
    """The result exceeded carmyd's --max-result. The tool ran; the call is
    recorded as failed with this code, and every retry raises this."""

    code = "RESULT_TOO_LARGE"


class Forked(CarmyError):
    """This client was connected by the parent of this forked process:
    nothing was sent. Connect a client of the child's own."""

    code = "FORKED"


class ToolFailed(CarmyError):
    """A replay of a call whose tool raised: ``type`` and ``message`` are
    the recorded exception's class name and text, ``status`` the recorded
    status ("failed", "cancelled", "timed_out")."""

    code = "TOOL_FAILED"

    def __init__(self, message, type=None, status="failed",
                 execution_id=None):
        super().__init__(message, "TOOL_FAILED", execution_id, "completed")
        self.type = type
        self.message = message
        self.status = status


_BY_CODE = {cls.code: cls for cls in (
    IdempotencyConflict, ExecutionUncertain, IdempotencyCapacity,
    DaemonUnavailable, InvalidId, ResultTooLarge, Forked)}


_BY_CODE["DISCONNECTED"] = DaemonUnavailable


def _make_error(name, message, execution_id, state):
    return _BY_CODE.get(name, CarmyError)(message, name, execution_id, state)


_carmy._set_error_factory(_make_error)

_STATUS = {
    "completed": _carmy.STATUS_COMPLETED,
    "failed": _carmy.STATUS_FAILED,
    "timed_out": _carmy.STATUS_TIMED_OUT,
    "cancelled": _carmy.STATUS_CANCELLED,
}


def _json_dumps(value):
    return json.dumps(value, separators=(",", ":")).encode()


_json_scan = json.decoder.JSONDecoder().scan_once


def _json_loads(data):
    # The decoder's scanner straight away: a fifth of json.loads()'s time
    # for what _json_dumps wrote; anything else (an operator's resolve
    # with spaces around it) through json.loads().
    text = data.decode()
    try:
        value, end = _json_scan(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def _msgpack_loads(data):
    return msgpack.unpackb(data, raw=False)


_SERIALIZERS = {
    "json": (_json_dumps, _json_loads),
    "msgpack": (msgpack.packb, _msgpack_loads),
}


def _pack(value, _c=_carmy._pack, _fallback=msgpack.packb):
    """value as msgpack, the bytes msgpack.packb() writes (the extension
    packs the usual types itself)."""
    return _c(value, _fallback)


_CANCELS = (KeyboardInterrupt, asyncio.CancelledError)


def _serializer(name):
    try:
        return _SERIALIZERS[name]
    except KeyError:
        raise ValueError("serializer must be 'json' or 'msgpack', not %r"
                         % (name,)) from None


_WAIT_MAX_S = 24 * 3600  # libcarmy's carmy_wait() waits a day at most


def _wait_ms(wait):
    if wait is None:
        return 0
    if not wait >= 0:  # negative, or NaN
        raise ValueError("wait must be >= 0 seconds, not %r" % (wait,))
    wait = min(wait, _WAIT_MAX_S)
    return max(1, int(wait * 1000)) if wait > 0 else 0


# The recorded message of an exception whose text cannot be serialised
# (its __str__ raises, or the serializer refuses the text: a lone
# surrogate for msgpack), and the start of the one recorded for a result
# that cannot be.
_UNSERIALISABLE_MESSAGE = "the exception's message could not be serialised"
_UNSERIALISABLE_RESULT = "the tool's result could not be serialised"


def _failure(exc, dumps, message=None):
    """The bytes recorded for a call whose tool raised exc: its type's
    name and message (``message``, a result's, if given, instead of
    str(exc)). They cannot fail to serialise: a message the serializer
    refuses gives way to a fixed one, then the type's name to
    "Exception"."""
    name = type(exc).__qualname__
    fixed = _UNSERIALISABLE_MESSAGE
    try:
        if message is None:
            return dumps({"type": name, "message": str(exc)})
        fixed = _UNSERIALISABLE_RESULT
        return dumps({"type": name, "message": message})
    except Exception:  # noqa: BLE001 - anything: fall back
        pass
    try:
        return dumps({"type": name, "message": fixed})
    except Exception:  # noqa: BLE001 - a type name it refuses
        return dumps({"type": "Exception", "message": fixed})


def _error_outcome(exc, dumps, message=None):
    """The status and bytes recorded for a call whose tool raised exc:
    cancelled for KeyboardInterrupt and asyncio.CancelledError, else
    failed."""
    status = (_carmy.STATUS_CANCELLED if isinstance(exc, _CANCELS)
              else _carmy.STATUS_FAILED)
    return status, _failure(exc, dumps, message)


def _serialising_failure(exc):
    """The recorded message for exc, raised while the tool's result was
    serialised: _result_failure()'s, or None for an interrupt
    (KeyboardInterrupt, SystemExit...), recorded as if the tool had
    raised it (a KeyboardInterrupt: cancelled)."""
    return _result_failure(exc) if isinstance(exc, Exception) else None


def _result_failure(exc):
    """The recorded message of a result whose serialising raised exc."""
    try:
        return "%s: %s" % (_UNSERIALISABLE_RESULT, exc)
    except Exception:  # noqa: BLE001 - a __str__ that raises
        return _UNSERIALISABLE_RESULT


# A completion that carmyd's durable store could not record (STORE_FAILED),
# or any request about a reservation that found carmyd away for longer than
# libcarmy waits for it (DAEMON_UNAVAILABLE: a restart; CARMY_RECONNECT_MS,
# 10 s), leaves the reservation live, and the same request answers once
# carmyd has it. It is sent again after each of these pauses, in seconds,
# for about 10 s from the first answer (a try that waits for carmyd takes
# 10 s itself).
_RETRY_PAUSES_S = (0.01, 0.03, 0.1, 0.3, 1.0, 2.0, 2.0, 2.0, 2.0)
_RETRY_FOR_S = 10.0
_AWAY = ("DAEMON_UNAVAILABLE",)
_NOT_YET = ("STORE_FAILED", "DAEMON_UNAVAILABLE")


def _again(r, fn, *args, codes=_AWAY):
    """fn(*args), a request about reservation r, sent again while it fails
    with one of codes and r stays live. What still fails is raised, with
    the execution id; r may still be live then (see _lost())."""
    end = None
    for pause in _RETRY_PAUSES_S + (None,):
        try:
            return fn(*args)
        except CarmyError as e:
            if end is None:
                end = time.monotonic() + _RETRY_FOR_S
            if (e.code not in codes or pause is None or not r.live or
                    time.monotonic() >= end):
                if e.execution_id is None:
                    e.execution_id = r.execution_id
                raise
        time.sleep(pause)


def _complete(r, status, data):
    """r.complete(status, data), sent again while the store fails or
    carmyd is away (see _again)."""
    _again(r, r.complete, status, data, codes=_NOT_YET)


def _finish_error(r, exc, dumps, message=None):
    """Record exc (raised by the tool, or by serialising its result: then
    with message) as the call's outcome."""
    _complete(r, *_error_outcome(exc, dumps, message))


def _lost(r):
    """Abandon r if it is still live once its call is over: what was to
    finish it failed for good (a completion the store or an absent carmyd
    kept refusing), so the call turns uncertain now, for an operator to
    settle, rather than running until the client closes. Best effort: if
    carmyd is away still, or the client closed already (ValueError), the
    client's close does it."""
    if r.live:
        try:
            r.abandon()
        except (CarmyError, ValueError):
            pass


def _complete_or_lose(r, status, data):
    """_complete(), then _lost() if it failed for good, as one job on a
    carmy thread: shielded, it runs to its end though the task awaiting it
    is cancelled, so a call is never abandoned while its result is still
    being sent."""
    try:
        _complete(r, status, data)
    finally:
        _lost(r)


def _replay(r, loads):
    """The recorded outcome of a replayed reservation: a value, or a raise."""
    if r.result_code == "RESULT_TOO_LARGE":
        raise ResultTooLarge("the tool's result exceeded carmyd's "
                             "--max-result", "RESULT_TOO_LARGE",
                             r.execution_id, "completed")
    value = loads(r.result)
    if r.status == "completed":
        return value
    kind, text = "Exception", ""
    if isinstance(value, dict):
        kind = value.get("type", kind)
        text = value.get("message", text)
    raise ToolFailed(text, kind, r.status, r.execution_id)


class Call:
    """One call of Client.call(), used as a ``with`` block.

    Entering it reserves the request id, or finds what is recorded:
    ``replayed`` is then True and ``result`` the recorded value (``status``
    its status). Otherwise run the tool and call complete(); leaving the
    block with an exception records it as failed (cancelled for
    KeyboardInterrupt); leaving without completing releases the
    reservation (the tool provably did not run). A call whose outcome
    cannot be known is given up with abandon() instead: leaving the block
    then records and releases nothing. Raises what Client.begin does:
    IdempotencyConflict, ExecutionUncertain, ...
    """

    __slots__ = ("_client", "_tool", "_args", "_rid", "_meta", "_dumps",
                 "_loads", "_wait_ms", "_r", "_done", "result", "status")

    def __init__(self, client, tool, args, request_id, meta, serializer,
                 wait):
        self._dumps, self._loads = _serializer(serializer)
        self._client = client
        self._tool = tool
        self._args = args
        self._rid = request_id
        self._meta = meta
        self._wait_ms = _wait_ms(wait)
        self._r = None
        self._done = False
        self.result = None
        self.status = None

    def __enter__(self):
        if self._r is not None:
            raise RuntimeError("a Call is entered once: make another "
                               "with Client.call()")
        args = None if self._args is None else _pack(self._args)
        meta = None if self._meta is None else _pack(self._meta)
        self._r = self._client._handle.begin(self._tool, self._rid, args,
                                             meta, self._wait_ms)
        if self._r.replayed:
            self._done = True
            self.status = self._r.status
            if self._r.result_code != "RESULT_TOO_LARGE":
                self.result = self._loads(self._r.result)
        return self

    @property
    def replayed(self):
        """True when the call finished before: do not run the tool."""
        return self._r is not None and self._r.replayed

    @property
    def execution_id(self):
        """The execution this request id belongs to ("exec_" + 32 hex)."""
        return None if self._r is None else self._r.execution_id

    def complete(self, result, status="completed"):
        """Record result (serialised now: what the serializer raises
        leaves the reservation live) with status "completed", "failed",
        "timed_out" or "cancelled". A store that fails (STORE_FAILED), or
        a carmyd not back from a restart (DAEMON_UNAVAILABLE), is tried
        again as the decorator does."""
        if self._r is None or self._done:
            raise CarmyError("the call is not reserved", "NOT_RESERVED")
        if status not in _STATUS:
            raise ValueError("unknown status %r" % (status,))
        data = self._dumps(result)
        self._done = True
        _complete(self._r, _STATUS[status], data)
        self.result = result
        self.status = status

    def abandon(self):
        """Give the call up as uncertain, now: for a tool whose outcome
        cannot be known (a subprocess or remote call it lost track of, its
        effect may or may not have happened), which must be neither
        completed with a made-up result nor released (it could run
        twice). The execution is interrupted at once, as if this process
        had died: every call with its request id raises
        ExecutionUncertain (state "interrupted") until an operator
        settles it (carmy.resolve(), ``carmyctl resolve``). Leaving the
        block afterwards records and releases nothing, even if abandon()
        raised.

        Raises CarmyError NOT_RESERVED for a call that is not reserved
        (a replay, completed or abandoned already); DaemonUnavailable
        when carmyd went away: code DISCONNECTED, the call is uncertain
        already; code DAEMON_UNAVAILABLE, carmyd was not back within about
        20 s and the call will be uncertain once the client closes (or
        abandon() is called again once carmyd is back); CarmyError
        EOPNOTSUPP (libcarmy's -ENOTSUP) when carmyd is too old for it:
        nothing was done, and the call turns uncertain when the client
        closes. The error carries the execution id.
        """
        if self._r is None:
            raise CarmyError("the call is not reserved", "NOT_RESERVED")
        self._done = True
        _again(self._r, self._r.abandon)

    def __exit__(self, et, ev, tb):
        if self._r is None:
            return False
        try:
            if not self._done:
                self._done = True
                if ev is None:
                    _again(self._r, self._r.release)
                else:
                    _finish_error(self._r, ev, self._dumps)
        finally:
            _lost(self._r)
        return False


class Client:
    """A connection to carmyd for one principal and session.

    Usable from many threads at once. It belongs to the process that
    connected it: in a child of os.fork(), every call raises Forked
    (nothing is sent; the parent's reservations are untouched) and the
    child connects a client of its own.
    """

    def __init__(self, handle, socket, principal, session):
        self._handle = handle
        self.socket = socket
        self.principal = principal
        self.session = session

    def call(self, tool, args=None, *, request_id, meta=None,
             serializer="json", wait=None):
        """A Call for ``with``: tool (str), args (anything msgpack packs,
        fingerprinted with the tool), request_id (str or bytes), meta
        (fingerprinted too, or None)."""
        return Call(self, tool, args, request_id, meta, serializer, wait)

    def resolve(self, tool, args=None, *, request_id, execution_id,
                committed, result=None, status="completed", meta=None,
                serializer="json"):
        """Settle an interrupted execution (carmyctl resolve): committed
        True records result with status and replays it from now on; False
        frees the request id so that the next call runs. Only carmyd's
        user, root or its --admin-group may."""
        if status not in _STATUS:
            raise ValueError("unknown status %r" % (status,))
        dumps = _serializer(serializer)[0]
        data = dumps(result) if committed else None
        self._handle.resolve(
            tool, request_id, None if args is None else _pack(args),
            None if meta is None else _pack(meta), execution_id,
            committed, _STATUS[status], data)

    @property
    def max_result(self):
        """carmyd's --max-result, in bytes."""
        return self._handle.max_result

    @property
    def durable(self):
        """Whether carmyd's store is durable (a journal, PostgreSQL): a
        begin of a new call then waits for carmyd to record it, and an
        ``async def`` tool's begins run on a carmy thread."""
        return self._handle.durable

    @property
    def closed(self):
        """Whether close() ran."""
        return self._handle.closed

    def close(self):
        """Close the connection. Reservations still held turn uncertain."""
        self._handle.close()

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        self.close()
        return False


def connect(socket=None, *, principal, session):
    """Connect to carmyd: socket is its path (None: $CARMY_SOCKET or the
    default, see default_socket()); principal and session (str or bytes,
    1..256 bytes) are the identity's first two parts, for every call made
    through the client. Raises DaemonUnavailable when no carmyd answers,
    InvalidId for a bad principal or session."""
    handle = _carmy.connect(socket, principal, session)
    return Client(handle, socket, principal, session)


def version():
    """libcarmy's version, as the library that is loaded says."""
    return _carmy.version()


def default_socket():
    """The socket connect() uses when given none."""
    return _carmy.default_socket()


# ------------------------------------------------------------ operators
#
# carmyctl's commands (see carmy/_ctl.py): for the operator who settles an
# interrupted execution by its id, and for status checks. Each runs
# carmyctl once; none is on a tool call's path.


def status(socket=None):
    """carmyd's table, as ``carmyctl --json status`` gives it: a dict with
    ``capacity``, ``used`` and ``fill``, entries by state (``running``,
    ``uncertain``, ``completed``), ``result_bytes``, the oldest completed
    entry's age, ``retain``, and the answers clients were given
    (``reserves``, ``replays``, ``conflicts``, ``uncertain_answers``,
    ``capacity_refusals``). socket: carmyd's (None: $CARMY_SOCKET or the
    default). Raises DaemonUnavailable when no carmyd answers."""
    return _ctl.run(_make_error, socket, ["status"])


def show(execution_id, *, socket=None):
    """One execution, as ``carmyctl --json show`` gives it: a dict with
    ``state`` ("running", "uncertain", "completed"), the identity
    (``principal``, ``session``, ``request_id``), the call (``tool``,
    ``args``, ``result_format``), and once completed its
    ``status`` and ``result``. ``args`` are the call's arguments as
    values (``args_prefix``, text, when carmyd kept only their first
    bytes). Raises CarmyError with code NOT_FOUND for an execution the
    table does not hold."""
    return _ctl.run(_make_error, socket, ["show", execution_id],
                    execution_id)


def _verdict(committed, result, status, exit_code, stdout, serializer):
    """carmyctl resolve's options for a verdict, and its standard input."""
    if not committed:
        if (result is not None or status is not None or
                exit_code is not None or stdout is not None):
            raise ValueError("result, status, exit_code and stdout go with "
                             "committed=True")
        return ["--not-committed"], None
    args = ["--committed"]
    if status is not None:
        if status not in _STATUS:
            raise ValueError("unknown status %r" % (status,))
        args += ["--status", status]
    if exit_code is not None:
        if result is not None:
            raise ValueError("result (a value) or exit_code (a carmy-run "
                             "call's), not both")
        if stdout is not None and not isinstance(stdout, bytes):
            stdout = str(stdout).encode()
        return args + ["--exit-code", str(int(exit_code)), "--stdout-file",
                       "-"], stdout
    if stdout is not None:
        raise ValueError("stdout goes with exit_code")
    data = _serializer(serializer)[0](result)
    if b"\0" in data:
        raise ValueError("a result with a NUL byte cannot be given to "
                         "carmyctl: use Client.resolve() with the call")
    return args + [b"--result", data], None


def resolve(execution_id, *, committed, result=None, status=None,
            exit_code=None, stdout=None, socket=None, serializer="json"):
    """Settle an interrupted execution by its id, as ``carmyctl resolve``.

    committed=True: its effect happened; ``result`` (serialised with
    ``serializer``, as the decorator records it) is recorded with
    ``status`` (default "completed") and every retry replays it. For a
    call of carmy-run give ``exit_code`` (0-255; non-zero records "failed"
    unless ``status`` says otherwise) and ``stdout`` (str or bytes)
    instead. committed=False: it did not happen; the identity is free and
    the next call runs (as release()). Raises CarmyError with the code
    carmyctl gives: NOT_FOUND, NOT_INTERRUPTED (running or completed),
    INVALID_RESULT (not in the format the execution's client records),
    NOT_PERMITTED (only carmyd's user, root or its --admin-group may);
    DaemonUnavailable when no carmyd answers."""
    args, stdin = _verdict(committed, result, status, exit_code, stdout,
                           serializer)
    _ctl.run(_make_error, socket, ["resolve", execution_id] + args,
             execution_id, stdin)


def release(execution_id, *, socket=None):
    """Settle an interrupted execution as not run (``carmyctl
    release``): the identity is free and the next call with it runs.
    Raises as resolve()."""
    _ctl.run(_make_error, socket, ["release", execution_id], execution_id)


def forget(execution_id, *, socket=None):
    """Forget one completed execution (``carmyctl forget``): the next call
    with its identity runs anew. Raises CarmyError NOT_FOUND, or
    NOT_COMPLETED for one running or interrupted (settle it first)."""
    _ctl.run(_make_error, socket, ["forget", execution_id], execution_id)


def purge(older_than, *, socket=None):
    """Forget the completed entries that finished longer ago than
    older_than (seconds, or carmyctl's AGE text: "90s", "15m", "7d"), as
    ``carmyctl purge``; never running or interrupted ones. Returns how
    many were forgotten."""
    if not isinstance(older_than, str):
        older_than = "%dms" % int(older_than * 1000)
    return _ctl.run(_make_error, socket,
                    ["purge", "--older-than", older_than])["purged"]


class _Binder:
    """Binds a function's arguments by name, the key's value apart.

    A function with only plain and keyword-only parameters is bound by
    hand (dict of the defaults, then the positional arguments by name, then
    the keywords), after one check that the keywords are parameters not
    already given by position; anything else goes through
    inspect.Signature.bind, which also raises the TypeError a bad call
    deserves.
    """

    def __init__(self, fn, key):
        self.sig = inspect.signature(fn)
        params = self.sig.parameters
        if key not in params:
            raise TypeError("%s has no parameter %r (the key)"
                            % (fn.__qualname__, key))
        self.key = key
        self.name = fn.__qualname__
        P = inspect.Parameter
        simple = all(p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)
                     for p in params.values())
        self.positional = tuple(n for n, p in params.items()
                                if p.kind == P.POSITIONAL_OR_KEYWORD)
        self.defaults = {n: p.default for n, p in params.items()
                         if p.default is not P.empty}
        self.count = len(params)
        # allowed[n]: the keywords a call with n positional arguments may
        # pass. Empty for a function bound the slow way.
        self.allowed = tuple(frozenset(params) - set(self.positional[:n])
                             for n in range(len(self.positional) + 1)) \
            if simple else ()

    def slow_args(self, args, kwargs):
        """slow(), for the C extension: kwargs None for none."""
        return self.slow(args, kwargs or {})

    def slow(self, args, kwargs):
        bound = self.sig.bind(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        extra = {}
        for n, p in self.sig.parameters.items():
            if p.kind == p.VAR_KEYWORD:
                extra = values.pop(n)
            elif p.kind == p.VAR_POSITIONAL:
                values[n] = list(values[n])
        # **kwargs go in beside the parameters, by name. A keyword that
        # Python binds to **kwargs although a positional-only or *args
        # parameter has its name would take that parameter's place, and
        # f(1, a=2) and f(2, a=1) would be one call: refused instead.
        same = extra.keys() & values.keys()
        if same:
            raise TypeError(
                "%s() got keyword argument %r, the name of one of its "
                "positional-only or *args parameters: carmy binds "
                "arguments by name and could not tell the two apart "
                "(nothing was reserved)" % (self.name, min(same)))
        values.update(extra)
        return values

    def __call__(self, args, kwargs):
        """The arguments by name, the key's included."""
        n = len(args)
        if n < len(self.allowed) and kwargs.keys() <= self.allowed[n]:
            values = self.defaults.copy()
            values.update(zip(self.positional, args))
            values.update(kwargs)
            if len(values) == self.count:
                return values
        return self.slow(args, kwargs)


def idempotent(client, tool=None, key="request_id", serializer="json",
               wait=None):
    """Make a function run once per request id (its ``key`` parameter).

    The fingerprint covers the tool name (default: the function's
    qualified name) and every other argument, bound by name, defaults
    applied (so f(1, 2) and f(a=1, b=2) are one call). The first call with
    a request id runs the function and records its return value (with
    ``serializer``: "json" or "msgpack"); a retry replays it without
    running it; a retry with other arguments raises IdempotencyConflict. An
    exception is recorded as failed and a retry raises ToolFailed with its
    type and message; KeyboardInterrupt and asyncio.CancelledError record
    "cancelled" and propagate. An argument msgpack cannot pack raises what
    msgpack raises (TypeError; OverflowError for an int beyond 64 bits;
    ValueError for a container that holds itself, or a lone surrogate)
    before anything is reserved, and so does a keyword argument that
    **kwargs takes although a positional-only or *args parameter has its
    name (TypeError: bound by name, the two could not be told apart).
    With ``wait=SECONDS`` (at most a day), a call running elsewhere is
    waited for (its result replayed) instead of raising
    ExecutionUncertain; on the main thread, signal handlers run while it
    waits (^C ends it, nothing reserved). Works on ``async def``
    functions too.

    Once the function has run, its outcome is recorded whatever the
    serializer refuses. A return value that cannot be serialised (whatever
    the serializer raises: TypeError, OverflowError, RecursionError...)
    is recorded as failed, with that exception's type and the message
    "the tool's result could not be serialised: " and its text; the
    exception propagates, and a retry raises ToolFailed. An interrupt
    while the value is serialised is recorded as if the tool had raised
    it (KeyboardInterrupt: cancelled). An exception
    whose text cannot be serialised (its __str__ raises, msgpack refuses
    a lone surrogate) is recorded with its type and the fixed message
    "the exception's message could not be serialised". A completion
    carmyd's durable store fails (CarmyError STORE_FAILED), or that finds
    carmyd restarting for longer than 10 s (DaemonUnavailable), is sent
    again for about 10 s more; if it still fails, that CarmyError, with the
    execution id, is raised instead of the value or the tool's exception
    (which is its __context__), and the execution is made uncertain at
    once (interrupted, as Call.abandon() does; if carmyd is away still,
    once the client closes): reconcile it. So is a call interrupted before
    its function started.
    """
    dumps, loads = _serializer(serializer)
    wait_ms = _wait_ms(wait)

    def decorate(fn):
        bind = _Binder(fn, key)
        name = tool if tool is not None else fn.__qualname__
        handle = client._handle

        if inspect.iscoroutinefunction(fn):
            return _async_wrapper(fn, bind, name, handle, dumps, loads,
                                  wait_ms)

        def run(r, args, kwargs):
            # A begin that is not a completed call's replay: a reservation
            # to run the tool under, or a recorded failure to raise.
            if r.replayed:
                return _replay(r, loads)
            try:
                value = fn(*args, **(kwargs or {}))
            except BaseException as e:
                _finish_error(r, e, dumps)
                raise
            return _record(r, value, dumps)

        scan = _json_scan if loads is _json_loads else None
        wrapper = _carmy._idempotent(
            handle, name, wait_ms, bind.positional, bind.allowed,
            bind.defaults, bind.count, bind.key, msgpack.packb, loads,
            bind.slow_args, run, scan)
        return functools.update_wrapper(wrapper, fn)

    return decorate


def _record(r, value, dumps):
    """Record value as the call's result, and return it. A value that
    cannot be serialised (whatever dumps raises) is recorded as failed,
    and what dumps raised propagates."""
    try:
        data = dumps(value)
    except BaseException as e:  # noqa: BLE001 - whatever dumps raises
        _finish_error(r, e, dumps, _serialising_failure(e))
        raise
    _complete(r, _carmy.STATUS_COMPLETED, data)
    return value


# Threads for the async wrapper's calls into libcarmy, of this process (a
# forked child makes its own). "io": begins and completions, which wait on
# carmyd only (requests on one client go one at a time: a few threads are
# enough); "wait": wait= for a call running elsewhere, apart, so that
# waits never hold up the completions they wait for.
_POOL_THREADS = {"io": 4, "wait": 32}
_pools = {}
_pools_lock = threading.Lock()


def _submit(kind, fn, *args):
    """fn(*args) on a thread of pool kind: its concurrent future."""
    pid = os.getpid()
    got = _pools.get(kind)
    if got is None or got[0] != pid:
        with _pools_lock:
            got = _pools.get(kind)
            if got is None or got[0] != pid:
                got = (pid, concurrent.futures.ThreadPoolExecutor(
                    _POOL_THREADS[kind], thread_name_prefix="carmy-" + kind))
                _pools[kind] = got
    return got[1].submit(fn, *args)


def _release_abandoned(cfut):
    """The begin of a task cancelled while it ran: give back what it
    reserved (the tool never ran)."""
    if cfut.cancelled() or cfut.exception() is not None:
        return
    r = cfut.result()
    if r.live:
        _submit("io", _again, r, r.release)


async def _off_loop(kind, fn, *args, on_cancel=None):
    """fn(*args) on a carmy thread (libcarmy runs without the GIL),
    awaited without blocking the loop. If the caller is cancelled: without
    on_cancel fn runs to its end all the same; with it, fn is dropped if
    it has not started, else on_cancel(its future) is called once it
    returns."""
    cfut = _submit(kind, fn, *args)
    fut = asyncio.wrap_future(cfut)
    try:
        return await (fut if on_cancel is not None else asyncio.shield(fut))
    except asyncio.CancelledError:
        if on_cancel is not None:
            cfut.add_done_callback(on_cancel)
        raise


async def _async_begin(handle, name, rid, packed, wait_ms):
    # What shared memory answers alone (replays, conflicts, uncertain calls,
    # and with carmyd's memory store new reservations) is answered in
    # place: try_begin never waits. Where a begin would wait for carmyd (a
    # durable store recording a new call, a reconnect after a restart, a
    # reclaim), it runs on a carmy thread. A wait (wait=) for a call
    # running elsewhere is a second begin, on a thread of its own.
    try:
        r = handle.try_begin(name, rid, packed, None)
        if r is not None:
            return r
        return await _off_loop("io", handle.begin, name, rid, packed,
                               None, 0, on_cancel=_release_abandoned)
    except ExecutionUncertain as e:
        if not wait_ms or e.state != "running":
            raise
    return await _off_loop("wait", handle.begin, name, rid, packed, None,
                           wait_ms, on_cancel=_release_abandoned)


async def _async_finish(r, exc, dumps, message=None):
    """Record exc (raised by the tool, cancellations included, or by
    serialising its result: then with message) off the loop."""
    await _off_loop("io", _complete_or_lose, r,
                    *_error_outcome(exc, dumps, message))


def _async_wrapper(fn, bind, name, handle, dumps, loads, wait_ms):
    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        values = bind(args, kwargs)
        rid = values.pop(bind.key)
        r = await _async_begin(handle, name, rid, _pack(values), wait_ms)
        if r.replayed:
            return _replay(r, loads)
        try:
            value = await fn(*args, **kwargs)
        except BaseException as e:
            await _async_finish(r, e, dumps)
            raise
        try:
            data = dumps(value)
        except BaseException as e:  # noqa: BLE001 - whatever it raises
            await _async_finish(r, e, dumps, _serialising_failure(e))
            raise
        await _off_loop("io", _complete_or_lose, r, _carmy.STATUS_COMPLETED,
                        data)
        return value

    return wrapper
