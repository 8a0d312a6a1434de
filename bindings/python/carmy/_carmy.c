/*
 * _carmy.c - the CPython extension under the carmy package: libcarmy's
 * handle (Client), one call's reservation (Reservation), and the callable
 * @carmy.idempotent makes of a plain function (Idempotent).
 *
 * The Python layer (carmy/__init__.py) works out how a decorated
 * function's parameters bind, chooses the serialisers and runs the tools;
 * this module moves bytes to and from libcarmy, packs arguments as msgpack,
 * and answers a decorated function's replays (bind, pack, begin, loads)
 * without a Python frame. Every call that may block (connect, begin, wait,
 * complete, release, abandon, resolve) runs without the GIL. Errors are
 * raised as the exception the Python layer's factory builds from the
 * code's stable name (see _set_error_factory).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <string.h>
#include <time.h>

#include "carmy.h"

/* Python 3.8 names these differently, or lacks them. */
#if PY_VERSION_HEX < 0x03090000
#define Py_TPFLAGS_HAVE_VECTORCALL _Py_TPFLAGS_HAVE_VECTORCALL
#define PyObject_CallOneArg(f, a) PyObject_CallFunctionObjArgs(f, a, NULL)
#define PyObject_Vectorcall _PyObject_Vectorcall
#endif

/* Whether the interpreter is exiting: public from 3.13. */
#if PY_VERSION_HEX >= 0x030d0000
#define is_finalizing() Py_IsFinalizing()
#else
#define is_finalizing() _Py_IsFinalizing()
#endif

PyMODINIT_FUNC PyInit__carmy(void);

/* Builds a CarmyError subclass instance: (name, message, execution_id,
 * state). Set by the Python layer at import. */
static PyObject *error_factory;

typedef struct {
	PyObject_HEAD
	carmy_t *c;
	PyObject *principal;	/* bytes */
	PyObject *session;	/* bytes */
	long users;		/* calls running without the GIL */
	int closing;
} ClientObject;

typedef struct {
	PyObject_HEAD
	ClientObject *client;
	struct carmy_reservation r;
	int outcome;		/* CARMY_RESERVED or CARMY_REPLAY */
	int live;		/* reserved, not yet finished or given up */
	int busy;		/* a complete/release/abandon is running */
} ReservationObject;

static PyTypeObject ClientType;
static PyTypeObject ReservationType;

/* Raise the exception for code; r (may be NULL) gives the entry's
 * execution id and state for CONFLICT and UNCERTAIN. */
static PyObject *raise_code(int code, const struct carmy_reservation *r)
{
	const char *eid = NULL, *state = NULL;
	PyObject *msg, *exc;

	if (r != NULL && (code == CARMY_ECONFLICT || code == CARMY_EUNCERTAIN)) {
		eid = r->execution_id;
		state = carmy_state_name(r->state);
	}
	if (code == CARMY_EUNTRUSTED)
		msg = PyUnicode_FromFormat("%s %s", carmy_strerror(code),
					   carmy_trust_detail());
	else
		msg = PyUnicode_FromString(carmy_strerror(code));
	if (msg == NULL)
		return NULL;
	if (error_factory == NULL) {
		PyErr_SetObject(PyExc_RuntimeError, msg);
		Py_DECREF(msg);
		return NULL;
	}
	exc = PyObject_CallFunction(error_factory, "sOzz", carmy_errname(code),
				    msg, eid, state);
	Py_DECREF(msg);
	if (exc == NULL)
		return NULL;
	PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
	Py_DECREF(exc);
	return NULL;
}

/* The bytes of a str (UTF-8) or bytes object, borrowed from it. */
static int as_bytes(PyObject *o, const char *what, const char **p,
		    Py_ssize_t *n)
{
	if (PyUnicode_Check(o)) {
		*p = PyUnicode_AsUTF8AndSize(o, n);
		return *p == NULL ? -1 : 0;
	}
	if (PyBytes_Check(o)) {
		*p = PyBytes_AS_STRING(o);
		*n = PyBytes_GET_SIZE(o);
		return 0;
	}
	PyErr_Format(PyExc_TypeError, "%s must be str or bytes, not %.100s",
		     what, Py_TYPE(o)->tp_name);
	return -1;
}

/* Like as_bytes(), but None gives NULL, 0 (no args, no meta). */
static int as_opt_bytes(PyObject *o, const char *what, const char **p,
			Py_ssize_t *n)
{
	if (o == Py_None) {
		*p = NULL;
		*n = 0;
		return 0;
	}
	if (!PyBytes_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s must be bytes or None", what);
		return -1;
	}
	*p = PyBytes_AS_STRING(o);
	*n = PyBytes_GET_SIZE(o);
	return 0;
}

/* An int argument: its value, or -1 with an exception set. */
static int as_int(PyObject *o)
{
	long v = PyLong_AsLong(o);

	if (v == -1 && PyErr_Occurred())
		return -1;
	if (v < -2147483647L || v > 2147483647L) {
		PyErr_SetString(PyExc_OverflowError, "out of range for an int");
		return -1;
	}
	return (int)v;
}

static int check_nargs(const char *fn, Py_ssize_t got, Py_ssize_t want)
{
	if (got == want)
		return 0;
	PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)",
		     fn, want, got);
	return -1;
}

/* 0 if the client is open, else -1 with ValueError. */
static int client_open(const ClientObject *self)
{
	if (self->c == NULL || self->closing) {
		PyErr_SetString(PyExc_ValueError, "the carmy client is closed");
		return -1;
	}
	return 0;
}

/* Take the handle for a call that runs without the GIL: 0, or -1 with
 * ValueError when the client is closed. */
static int client_enter(ClientObject *self)
{
	if (client_open(self) != 0)
		return -1;
	self->users++;
	return 0;
}

/* Give it back (with the GIL); the last user of a closing client closes
 * the handle. */
static void client_leave(ClientObject *self)
{
	if (--self->users == 0 && self->closing && self->c != NULL) {
		carmy_close(self->c);
		self->c = NULL;
	}
}

/* Fill call from (tool, request_id, args, meta) and the client's parts. */
static int fill_call(ClientObject *self, PyObject *const *a,
		     struct carmy_call *call)
{
	const char *p;
	Py_ssize_t n;

	memset(call, 0, sizeof(*call));
	call->principal = PyBytes_AS_STRING(self->principal);
	call->principal_len = (size_t)PyBytes_GET_SIZE(self->principal);
	call->session = PyBytes_AS_STRING(self->session);
	call->session_len = (size_t)PyBytes_GET_SIZE(self->session);
	if (as_bytes(a[0], "tool", &p, &n) != 0)
		return -1;
	call->tool = p;
	call->tool_len = (size_t)n;
	if (as_bytes(a[1], "request_id", &p, &n) != 0)
		return -1;
	call->request_id = p;
	call->request_id_len = (size_t)n;
	if (as_opt_bytes(a[2], "args", &p, &n) != 0)
		return -1;
	call->args = p;
	call->args_len = (size_t)n;
	if (as_opt_bytes(a[3], "meta", &p, &n) != 0)
		return -1;
	call->meta = p;
	call->meta_len = (size_t)n;
	return 0;
}

/* wait_ms from a Python int, at most a day: 0, or -1 with an exception. */
static int as_wait_ms(PyObject *o, long *wait_ms)
{
	*wait_ms = PyLong_AsLong(o);
	if (*wait_ms == -1 && PyErr_Occurred())
		return -1;
	if (*wait_ms > 24L * 3600 * 1000)
		*wait_ms = 24L * 3600 * 1000;
	return 0;
}

/* On the main thread, where Python runs signal handlers, a wait= is
 * waited out in slices of this many milliseconds, between which they run:
 * ^C ends a wait of a day at once. (Each slice begins again, so carmyd
 * counts an uncertain answer a slice.) */
#define WAIT_SLICE_MS 500

/* The main thread's ident (threading.main_thread()), where Python runs
 * signal handlers; 0 if it could not be learnt. Set at import. */
static unsigned long main_ident;

static long long mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Begin call on self without the GIL (carmy_wait() for wait_ms > 0),
 * into *r: CARMY_RESERVED or CARMY_REPLAY, or -1 with the exception set
 * (r then cleared). A wait ends early, with nothing reserved, when a
 * signal handler raises between its slices (KeyboardInterrupt). */
static int begin_into(ClientObject *self, const struct carmy_call *call,
		      long wait_ms, struct carmy_reservation *r)
{
	long long end = wait_ms > 0 ? mono_ms() + wait_ms : 0, slice;
	int sliced = main_ident != 0 &&
		     PyThread_get_thread_ident() == main_ident;
	int rc;

	if (client_enter(self) != 0)
		return -1;
	for (;;) {
		slice = wait_ms > 0 ? end - mono_ms() : 0;
		if (sliced && slice > WAIT_SLICE_MS)
			slice = WAIT_SLICE_MS;
		Py_BEGIN_ALLOW_THREADS
		if (wait_ms > 0)
			rc = carmy_wait(self->c, call, r,
					slice > 0 ? (int)slice : 1);
		else
			rc = carmy_begin(self->c, call, r);
		Py_END_ALLOW_THREADS
		/* Still running elsewhere, and time left: the next slice,
		 * once the handlers have run. */
		if (wait_ms <= 0 || rc != CARMY_EUNCERTAIN ||
		    r->state != CARMY_STATE_RUNNING || mono_ms() >= end)
			break;
		carmy_reservation_clear(r);
		if (PyErr_CheckSignals() != 0) {
			client_leave(self);
			return -1;
		}
		/* Closed meanwhile (by another thread): the wait ends. */
		if (self->closing) {
			client_leave(self);
			return client_open(self);
		}
	}
	/* The client was closed meanwhile (by another thread): no tool may
	 * run on a handle about to close, so what was reserved goes back
	 * (nothing ran) before the handle does, and the call is refused as
	 * on a closed client. */
	if (rc == CARMY_RESERVED && self->closing) {
		Py_BEGIN_ALLOW_THREADS
		(void)carmy_release(self->c, r);
		Py_END_ALLOW_THREADS
		carmy_reservation_clear(r);
		client_leave(self);
		return client_open(self);
	}
	client_leave(self);
	if (rc != CARMY_RESERVED && rc != CARMY_REPLAY) {
		raise_code(rc, r);
		carmy_reservation_clear(r);
		return -1;
	}
	return rc;
}

/* A Reservation for what begin_into() put in *r (moved out of it). With
 * no memory for it, a reservation made is given back first. */
static PyObject *reservation_new(ClientObject *self,
				 struct carmy_reservation *r, int outcome)
{
	ReservationObject *res = PyObject_New(ReservationObject,
					      &ReservationType);

	if (res == NULL) {
		if (outcome == CARMY_RESERVED && client_enter(self) == 0) {
			Py_BEGIN_ALLOW_THREADS
			carmy_release(self->c, r);
			Py_END_ALLOW_THREADS
			client_leave(self);
		}
		carmy_reservation_clear(r);
		return NULL;
	}
	res->r = *r;
	memset(r, 0, sizeof(*r));
	Py_INCREF(self);
	res->client = self;
	res->outcome = outcome;
	res->live = outcome == CARMY_RESERVED;
	res->busy = 0;
	return (PyObject *)res;
}

/* Client.begin(tool, request_id, args, meta, wait_ms) -> Reservation */
static PyObject *client_begin(ClientObject *self, PyObject *const *a,
			      Py_ssize_t na)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call;
	long wait_ms;
	int rc;

	if (check_nargs("begin", na, 5) != 0 ||
	    fill_call(self, a, &call) != 0 || as_wait_ms(a[4], &wait_ms) != 0)
		return NULL;
	rc = begin_into(self, &call, wait_ms, &r);
	if (rc < 0)
		return NULL;
	return reservation_new(self, &r, rc);
}

/* Client.try_begin(tool, request_id, args, meta) -> Reservation, or None
 * where carmy_begin() would wait for carmyd (carmy_try_begin()): nothing
 * was reserved then. Holds the GIL: it never waits. */
static PyObject *client_try_begin(ClientObject *self, PyObject *const *a,
				  Py_ssize_t na)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call;
	int rc;

	if (check_nargs("try_begin", na, 4) != 0 ||
	    fill_call(self, a, &call) != 0 || client_enter(self) != 0)
		return NULL;
	rc = carmy_try_begin(self->c, &call, &r);
	client_leave(self);
	if (rc == -EAGAIN)
		Py_RETURN_NONE;
	if (rc != CARMY_RESERVED && rc != CARMY_REPLAY) {
		raise_code(rc, &r);
		carmy_reservation_clear(&r);
		return NULL;
	}
	return reservation_new(self, &r, rc);
}

/* Client.resolve(tool, request_id, args, meta, execution_id, committed,
 * status, result) -> None */
static PyObject *client_resolve(ClientObject *self, PyObject *const *a,
				Py_ssize_t na)
{
	struct carmy_call call;
	const char *eid, *res;
	Py_ssize_t eid_len, res_len;
	int committed, status, rc;

	if (check_nargs("resolve", na, 8) != 0 ||
	    fill_call(self, a, &call) != 0)
		return NULL;
	if (!PyUnicode_Check(a[4])) {
		PyErr_SetString(PyExc_TypeError, "execution_id must be str");
		return NULL;
	}
	eid = PyUnicode_AsUTF8AndSize(a[4], &eid_len);
	if (eid == NULL || (committed = PyObject_IsTrue(a[5])) < 0)
		return NULL;
	status = as_int(a[6]);
	if (status == -1 && PyErr_Occurred())
		return NULL;
	if (as_opt_bytes(a[7], "result", &res, &res_len) != 0)
		return NULL;
	if (client_enter(self) != 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = carmy_resolve(self->c, &call, eid, committed, status, res,
			   (size_t)res_len);
	Py_END_ALLOW_THREADS
	client_leave(self);
	if (rc != 0)
		return raise_code(rc, NULL);
	Py_RETURN_NONE;
}

static PyObject *client_close(ClientObject *self, PyObject *unused)
{
	(void)unused;
	if (self->c != NULL && !self->closing) {
		self->closing = 1;
		if (self->users == 0) {
			carmy_close(self->c);
			self->c = NULL;
		}
	}
	Py_RETURN_NONE;
}

static PyObject *client_max_result(ClientObject *self, void *unused)
{
	(void)unused;
	if (client_open(self) != 0)
		return NULL;
	return PyLong_FromSize_t(carmy_max_result(self->c));
}

/* Whether carmyd's store is durable: a begin of a new call then waits for
 * carmyd (carmy_durable()). */
static PyObject *client_durable(ClientObject *self, void *unused)
{
	(void)unused;
	if (client_open(self) != 0)
		return NULL;
	return PyBool_FromLong(carmy_durable(self->c));
}

static PyObject *client_closed(ClientObject *self, void *unused)
{
	(void)unused;
	return PyBool_FromLong(self->c == NULL || self->closing);
}

static void client_dealloc(ClientObject *self)
{
	if (self->c != NULL)
		carmy_close(self->c);
	Py_XDECREF(self->principal);
	Py_XDECREF(self->session);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

/* One identity part: str or bytes of 1..CARMY_ID_MAX bytes, as bytes. */
static PyObject *id_part(PyObject *o, const char *what)
{
	const char *p;
	Py_ssize_t n;

	if (as_bytes(o, what, &p, &n) != 0)
		return NULL;
	if (n < 1 || n > CARMY_ID_MAX)
		return raise_code(CARMY_EINVALID_ID, NULL);
	return PyBytes_FromStringAndSize(p, n);
}

/* connect(socket, principal, session) -> Client */
static PyObject *mod_connect(PyObject *mod, PyObject *const *a, Py_ssize_t na)
{
	PyObject *sock_bytes = NULL;
	const char *path = NULL;
	ClientObject *self;
	carmy_t *c;
	int rc;

	(void)mod;
	if (check_nargs("connect", na, 3) != 0)
		return NULL;
	if (a[0] != Py_None) {
		if (!PyUnicode_FSConverter(a[0], &sock_bytes))
			return NULL;
		path = PyBytes_AS_STRING(sock_bytes);
	}
	self = PyObject_New(ClientObject, &ClientType);
	if (self == NULL) {
		Py_XDECREF(sock_bytes);
		return NULL;
	}
	self->c = NULL;
	self->users = 0;
	self->closing = 0;
	self->session = NULL;
	self->principal = id_part(a[1], "principal");
	if (self->principal != NULL)
		self->session = id_part(a[2], "session");
	if (self->session == NULL) {
		Py_XDECREF(sock_bytes);
		Py_DECREF(self);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	rc = carmy_connect(&c, path);
	Py_END_ALLOW_THREADS
	Py_XDECREF(sock_bytes);
	if (rc != 0) {
		Py_DECREF(self);
		return raise_code(rc, NULL);
	}
	self->c = c;
	return (PyObject *)self;
}

/* Reservation.complete(status, result) -> None */
static PyObject *res_complete(ReservationObject *self, PyObject *const *a,
			      Py_ssize_t na)
{
	ClientObject *cl = self->client;
	const char *p;
	Py_ssize_t n;
	int status, rc;

	if (check_nargs("complete", na, 2) != 0)
		return NULL;
	status = as_int(a[0]);
	if (status == -1 && PyErr_Occurred())
		return NULL;
	if (as_opt_bytes(a[1], "result", &p, &n) != 0)
		return NULL;
	if (!self->live || self->busy)
		return raise_code(CARMY_ENOT_RESERVED, NULL);
	if (client_enter(cl) != 0)
		return NULL;
	self->busy = 1;
	Py_BEGIN_ALLOW_THREADS
	rc = carmy_complete(cl->c, &self->r, status, p, (size_t)n);
	Py_END_ALLOW_THREADS
	self->busy = 0;
	client_leave(cl);
	if (rc == 0 || rc == CARMY_ERESULT_TOO_LARGE)
		self->live = 0;
	if (rc != 0)
		return raise_code(rc, NULL);
	Py_RETURN_NONE;
}

/*
 * Give the reservation up with fn (carmy_release(), carmy_abandon()). It
 * stays live here unless fn returned 0: on DISCONNECTED libcarmy let r go
 * (carmyd came back under a new owner id), on DAEMON_UNAVAILABLE it kept
 * it (carmyd is not back yet), as after a complete that failed, so it can
 * be given up again: libcarmy answers NOT_RESERVED then if it had let it
 * go.
 */
static PyObject *res_give_up(ReservationObject *self,
			     int (*fn)(carmy_t *, struct carmy_reservation *))
{
	ClientObject *cl = self->client;
	int rc;

	if (!self->live || self->busy)
		return raise_code(CARMY_ENOT_RESERVED, NULL);
	if (client_enter(cl) != 0)
		return NULL;
	self->busy = 1;
	Py_BEGIN_ALLOW_THREADS
	rc = fn(cl->c, &self->r);
	Py_END_ALLOW_THREADS
	self->busy = 0;
	client_leave(cl);
	if (rc != 0)
		return raise_code(rc, NULL);
	self->live = 0;
	Py_RETURN_NONE;
}

/* Reservation.release() -> None */
static PyObject *res_release(ReservationObject *self, PyObject *unused)
{
	(void)unused;
	return res_give_up(self, carmy_release);
}

/* Reservation.abandon() -> None: the call made uncertain now
 * (carmy_abandon()). */
static PyObject *res_abandon(ReservationObject *self, PyObject *unused)
{
	(void)unused;
	return res_give_up(self, carmy_abandon);
}

static PyObject *res_replayed(ReservationObject *self, void *unused)
{
	(void)unused;
	return PyBool_FromLong(self->outcome == CARMY_REPLAY);
}

/* A replay of a call recorded completed, with its result. */
static PyObject *res_ok(ReservationObject *self, void *unused)
{
	(void)unused;
	return PyBool_FromLong(self->outcome == CARMY_REPLAY &&
			       self->r.status == CARMY_STATUS_COMPLETED &&
			       self->r.result_code == 0);
}

static PyObject *res_live(ReservationObject *self, void *unused)
{
	(void)unused;
	return PyBool_FromLong(self->live);
}

static PyObject *res_execution_id(ReservationObject *self, void *unused)
{
	(void)unused;
	return PyUnicode_FromString(self->r.execution_id);
}

/* The recorded status of a replay ("completed", "failed", ...), or None. */
static PyObject *res_status(ReservationObject *self, void *unused)
{
	(void)unused;
	if (self->outcome != CARMY_REPLAY)
		Py_RETURN_NONE;
	return PyUnicode_FromString(carmy_status_name(self->r.status));
}

/* The stable name of a replay's recorded code ("OK" or
 * "RESULT_TOO_LARGE"). */
static PyObject *res_result_code(ReservationObject *self, void *unused)
{
	(void)unused;
	return PyUnicode_FromString(carmy_errname(self->r.result_code));
}

/* A replay's recorded bytes, or None. */
static PyObject *res_result(ReservationObject *self, void *unused)
{
	(void)unused;
	if (self->outcome != CARMY_REPLAY)
		Py_RETURN_NONE;
	return PyBytes_FromStringAndSize(self->r.result,
					 (Py_ssize_t)self->r.result_len);
}

/*
 * Abandon res if it is still live when its caller lets go of it: whatever
 * was to finish it failed (a completion its store or an absent carmyd kept
 * refusing) or never came (an interrupt before the tool ran, or while its
 * outcome was recorded; a Reservation dropped unfinished). The tool may or
 * may not have run, so the call turns uncertain now, for an operator to
 * settle, instead of staying running until the client closes. Best
 * effort, and the exception being raised is kept: a carmyd that is away,
 * or too old to abandon, leaves it to the client's close as before; so
 * does the interpreter's exit.
 */
static void res_lost(ReservationObject *res)
{
	ClientObject *cl = res->client;
	PyObject *et, *ev, *tb;
	int rc;

	if (!res->live || res->busy || cl == NULL || cl->c == NULL ||
	    cl->closing || is_finalizing())
		return;
	PyErr_Fetch(&et, &ev, &tb);
	cl->users++;
	res->busy = 1;
	Py_BEGIN_ALLOW_THREADS
	rc = carmy_abandon(cl->c, &res->r);
	Py_END_ALLOW_THREADS
	res->busy = 0;
	client_leave(cl);
	if (rc == 0)
		res->live = 0;
	PyErr_Restore(et, ev, tb);
}

static void res_dealloc(ReservationObject *self)
{
	res_lost(self);
	carmy_reservation_clear(&self->r);
	Py_XDECREF(self->client);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

/*
 * msgpack, written here for the values a tool's arguments usually are:
 * None, bool, int, float, str, bytes, and lists, tuples and dicts of them
 * (exact types only). The bytes are the ones msgpack.packb() writes with
 * its defaults (the smallest integer form, float 64, str 8, bin), so
 * either packs a call the same. Anything else (a subclass, a set, a value
 * out of msgpack's range, nesting past PACK_DEPTH) is PACK_OTHER: the
 * whole value then goes to msgpack.packb(), which packs it or raises.
 */
#define PACK_OTHER 1
#define PACK_DEPTH 500
#define PACK_LOCAL 512

struct pack_buf {
	unsigned char *p;
	size_t len, cap;
	unsigned char local[PACK_LOCAL];
};

static int pack_room(struct pack_buf *b, size_t n)
{
	unsigned char *p;
	size_t cap;

	if (b->cap - b->len >= n)
		return 0;
	if (n > PY_SSIZE_T_MAX / 2 - b->len) {
		PyErr_NoMemory();
		return -1;
	}
	cap = (b->len + n) * 2;
	p = PyMem_Malloc(cap);
	if (p == NULL) {
		PyErr_NoMemory();
		return -1;
	}
	memcpy(p, b->p, b->len);
	if (b->p != b->local)
		PyMem_Free(b->p);
	b->p = p;
	b->cap = cap;
	return 0;
}

static int pack_bytes(struct pack_buf *b, const void *src, size_t n)
{
	if (pack_room(b, n) != 0)
		return -1;
	memcpy(b->p + b->len, src, n);
	b->len += n;
	return 0;
}

/* tag, then v in width bytes, big-endian. */
static int pack_head(struct pack_buf *b, unsigned tag, uint64_t v,
		     unsigned width)
{
	unsigned char h[9];

	h[0] = (unsigned char)tag;
	for (unsigned i = 0; i < width; i++)
		h[1 + i] = (unsigned char)(v >> (8 * (width - 1 - i)));
	return pack_bytes(b, h, 1 + width);
}

/* A length for str, bin, array or map: fixed form (fix, up to fix_max)
 * or the 8-, 16- or 32-bit one (tag8 0: none). */
static int pack_len(struct pack_buf *b, size_t n, unsigned fix,
		    size_t fix_max, unsigned tag8, unsigned tag16,
		    unsigned tag32)
{
	if (n <= fix_max && fix != 0)
		return pack_head(b, fix | (unsigned)n, 0, 0);
	if (n <= 0xff && tag8 != 0)
		return pack_head(b, tag8, n, 1);
	if (n <= 0xffff)
		return pack_head(b, tag16, n, 2);
	if (n <= 0xffffffffu)
		return pack_head(b, tag32, n, 4);
	return PACK_OTHER;
}

static int pack_int(struct pack_buf *b, PyObject *o)
{
	int overflow;
	long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
	unsigned long long u;

	if (v == -1 && PyErr_Occurred())
		return -1;
	if (overflow < 0)
		return PACK_OTHER;
	if (overflow > 0) {
		u = PyLong_AsUnsignedLongLong(o);
		if (u == (unsigned long long)-1 && PyErr_Occurred()) {
			PyErr_Clear();
			return PACK_OTHER;
		}
		return pack_head(b, 0xcf, u, 8);
	}
	if (v >= 0) {
		if (v < 0x80)
			return pack_head(b, (unsigned)v, 0, 0);
		if (v <= 0xff)
			return pack_head(b, 0xcc, (uint64_t)v, 1);
		if (v <= 0xffff)
			return pack_head(b, 0xcd, (uint64_t)v, 2);
		if (v <= 0xffffffffLL)
			return pack_head(b, 0xce, (uint64_t)v, 4);
		return pack_head(b, 0xcf, (uint64_t)v, 8);
	}
	if (v >= -32)
		return pack_head(b, (unsigned)(v & 0xff), 0, 0);
	if (v >= -128)
		return pack_head(b, 0xd0, (uint64_t)v, 1);
	if (v >= -32768)
		return pack_head(b, 0xd1, (uint64_t)v, 2);
	if (v >= -2147483648LL)
		return pack_head(b, 0xd2, (uint64_t)v, 4);
	return pack_head(b, 0xd3, (uint64_t)v, 8);
}

static int pack_float(struct pack_buf *b, PyObject *o)
{
	double d = PyFloat_AS_DOUBLE(o);
	uint64_t bits;

	memcpy(&bits, &d, sizeof(bits));
	return pack_head(b, 0xcb, bits, 8);
}

static int pack_str(struct pack_buf *b, PyObject *o)
{
	Py_ssize_t n;
	const char *s = PyUnicode_AsUTF8AndSize(o, &n);
	int rc;

	if (s == NULL) {
		/* Lone surrogates: msgpack.packb() says what it makes of them. */
		PyErr_Clear();
		return PACK_OTHER;
	}
	rc = pack_len(b, (size_t)n, 0xa0, 31, 0xd9, 0xda, 0xdb);
	return rc != 0 ? rc : pack_bytes(b, s, (size_t)n);
}

static int pack_bin(struct pack_buf *b, PyObject *o)
{
	size_t n = (size_t)PyBytes_GET_SIZE(o);
	int rc = pack_len(b, n, 0, 0, 0xc4, 0xc5, 0xc6);

	return rc != 0 ? rc : pack_bytes(b, PyBytes_AS_STRING(o), n);
}

static int pack_value(struct pack_buf *b, PyObject *o, int depth);

static int pack_items(struct pack_buf *b, PyObject *const *items,
		      Py_ssize_t n, int depth)
{
	int rc = pack_len(b, (size_t)n, 0x90, 15, 0, 0xdc, 0xdd);

	for (Py_ssize_t i = 0; rc == 0 && i < n; i++)
		rc = pack_value(b, items[i], depth + 1);
	return rc;
}

static int pack_map(struct pack_buf *b, PyObject *o, int depth)
{
	Py_ssize_t pos = 0;
	PyObject *k, *v;
	int rc = pack_len(b, (size_t)PyDict_GET_SIZE(o), 0x80, 15, 0, 0xde,
			  0xdf);

	while (rc == 0 && PyDict_Next(o, &pos, &k, &v)) {
		rc = pack_value(b, k, depth + 1);
		if (rc == 0)
			rc = pack_value(b, v, depth + 1);
	}
	return rc;
}

/* 0, PACK_OTHER, or -1 with an exception set. */
static int pack_value(struct pack_buf *b, PyObject *o, int depth)
{
	if (depth > PACK_DEPTH)
		return PACK_OTHER;
	if (o == Py_None)
		return pack_head(b, 0xc0, 0, 0);
	if (o == Py_True || o == Py_False)
		return pack_head(b, o == Py_True ? 0xc3 : 0xc2, 0, 0);
	if (PyLong_CheckExact(o))
		return pack_int(b, o);
	if (PyFloat_CheckExact(o))
		return pack_float(b, o);
	if (PyUnicode_CheckExact(o))
		return pack_str(b, o);
	if (PyBytes_CheckExact(o))
		return pack_bin(b, o);
	if (PyDict_CheckExact(o))
		return pack_map(b, o, depth);
	if (PyList_CheckExact(o))
		return pack_items(b, PySequence_Fast_ITEMS(o),
				  PyList_GET_SIZE(o), depth);
	if (PyTuple_CheckExact(o))
		return pack_items(b, PySequence_Fast_ITEMS(o),
				  PyTuple_GET_SIZE(o), depth);
	return PACK_OTHER;
}

/* o as msgpack bytes: packed here, or by fallback (msgpack.packb). */
static PyObject *pack_object(PyObject *o, PyObject *fallback)
{
	struct pack_buf b = { .cap = PACK_LOCAL };
	PyObject *out = NULL;
	int rc;

	b.p = b.local;
	rc = pack_value(&b, o, 0);
	if (rc == 0)
		out = PyBytes_FromStringAndSize((const char *)b.p,
						(Py_ssize_t)b.len);
	if (b.p != b.local)
		PyMem_Free(b.p);
	if (rc == PACK_OTHER)
		out = PyObject_CallOneArg(fallback, o);
	return out;
}

/* _pack(value, fallback) -> bytes */
static PyObject *mod_pack(PyObject *mod, PyObject *const *a, Py_ssize_t na)
{
	(void)mod;
	if (check_nargs("_pack", na, 2) != 0)
		return NULL;
	return pack_object(a[0], a[1]);
}

/*
 * Idempotent: what @carmy.idempotent makes of a plain (not async)
 * function. A call binds the arguments by name, packs them (the key's
 * value apart) and begins; a replay of a completed call is answered here,
 * loads(recorded bytes), without a Python frame. Anything else (a
 * reservation to run the tool, a recorded failure) goes to run(r, args,
 * kwargs), the Python layer's.
 *
 * Binding by hand, as the Python layer's _Binder does: for a call with n
 * positional arguments and keywords all in allowed[n] (allowed is empty
 * for a signature with *args, **kwargs or positional-only parameters),
 * the defaults, then the positional arguments by name, then the keywords;
 * if that gives every parameter, done. Otherwise slow_bind(args, kwargs)
 * binds through inspect.Signature, which raises the TypeError a bad call
 * deserves.
 */
typedef struct {
	PyObject_HEAD
	vectorcallfunc vectorcall;
	PyObject *dict;		/* functools.update_wrapper()'s attributes */
	ClientObject *client;
	PyObject *tool;		/* bytes */
	long wait_ms;
	PyObject *positional;	/* tuple of names */
	PyObject *allowed;	/* tuple of frozensets: by positionals given */
	PyObject *defaults;	/* dict */
	Py_ssize_t count;	/* parameters */
	PyObject *key;		/* str */
	PyObject *pack;		/* msgpack.packb, for what pack_object() leaves */
	PyObject *loads, *slow_bind, *run;
	PyObject *scan;		/* the json scanner for a JSON result, or None */
} IdempotentObject;

static PyTypeObject IdempotentType;

static PyObject *new_ref(PyObject *o)
{
	Py_INCREF(o);
	return o;
}

/* The arguments of a vectorcall as a tuple and a dict (NULL: none). */
static int as_args(PyObject *const *args, Py_ssize_t n, PyObject *kwnames,
		   PyObject **tuple, PyObject **kwargs)
{
	Py_ssize_t nk = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;

	*kwargs = NULL;
	*tuple = PyTuple_New(n);
	if (*tuple == NULL)
		return -1;
	for (Py_ssize_t i = 0; i < n; i++) {
		Py_INCREF(args[i]);
		PyTuple_SET_ITEM(*tuple, i, args[i]);
	}
	if (nk == 0)
		return 0;
	*kwargs = PyDict_New();
	for (Py_ssize_t j = 0; *kwargs != NULL && j < nk; j++) {
		if (PyDict_SetItem(*kwargs, PyTuple_GET_ITEM(kwnames, j),
				   args[n + j]) != 0)
			Py_CLEAR(*kwargs);
	}
	if (*kwargs == NULL) {
		Py_CLEAR(*tuple);
		return -1;
	}
	return 0;
}

/* The by-hand binding: a new dict, NULL with no exception when the call
 * needs slow_bind, NULL with one on failure. */
static PyObject *bind_fast(IdempotentObject *self, PyObject *const *args,
			   Py_ssize_t n, PyObject *kwnames)
{
	Py_ssize_t nk = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
	PyObject *allowed, *values;

	if (n >= PyTuple_GET_SIZE(self->allowed))
		return NULL;
	allowed = PyTuple_GET_ITEM(self->allowed, n);
	values = PyDict_Copy(self->defaults);
	if (values == NULL)
		return NULL;
	for (Py_ssize_t i = 0; i < n; i++)
		if (PyDict_SetItem(values, PyTuple_GET_ITEM(self->positional,
							    i), args[i]) != 0)
			goto fail;
	for (Py_ssize_t j = 0; j < nk; j++) {
		PyObject *name = PyTuple_GET_ITEM(kwnames, j);
		int in = PySet_Contains(allowed, name);

		if (in < 0)
			goto fail;
		if (in == 0 || PyDict_SetItem(values, name, args[n + j]) != 0)
			goto fail;
	}
	if (PyDict_GET_SIZE(values) == self->count)
		return values;
fail:
	Py_DECREF(values);
	return NULL;
}

/* The arguments by name, the key's included. */
static PyObject *bind_call(IdempotentObject *self, PyObject *const *args,
			   Py_ssize_t n, PyObject *kwnames)
{
	PyObject *values = bind_fast(self, args, n, kwnames), *t, *kw;

	if (values != NULL || PyErr_Occurred())
		return values;
	if (as_args(args, n, kwnames, &t, &kw) != 0)
		return NULL;
	values = PyObject_CallFunctionObjArgs(self->slow_bind, t,
					      kw != NULL ? kw : Py_None, NULL);
	Py_DECREF(t);
	Py_XDECREF(kw);
	if (values != NULL && !PyDict_CheckExact(values)) {
		Py_DECREF(values);
		PyErr_SetString(PyExc_TypeError, "slow_bind must give a dict");
		return NULL;
	}
	return values;
}

/* Take the key's value out of values: a new reference, or NULL. */
static PyObject *pop_key(IdempotentObject *self, PyObject *values)
{
	PyObject *rid = PyDict_GetItemWithError(values, self->key);

	if (rid == NULL) {
		if (!PyErr_Occurred())
			PyErr_SetObject(PyExc_KeyError, self->key);
		return NULL;
	}
	Py_INCREF(rid);
	if (PyDict_DelItem(values, self->key) != 0) {
		Py_DECREF(rid);
		return NULL;
	}
	return rid;
}

/* Hand a begin's outcome that is not a completed replay to run(). */
static PyObject *run_call(IdempotentObject *self, struct carmy_reservation *r,
			  int outcome, PyObject *const *args, Py_ssize_t n,
			  PyObject *kwnames)
{
	PyObject *res = reservation_new(self->client, r, outcome), *t, *kw;
	PyObject *out;

	if (res == NULL)
		return NULL;
	if (as_args(args, n, kwnames, &t, &kw) != 0) {
		/* The tool did not run: give the reservation back. */
		PyObject *et, *ev, *tb;

		PyErr_Fetch(&et, &ev, &tb);
		if (outcome == CARMY_RESERVED)
			Py_XDECREF(PyObject_CallMethod(res, "release", NULL));
		PyErr_Restore(et, ev, tb);
		Py_DECREF(res);
		return NULL;
	}
	out = PyObject_CallFunctionObjArgs(self->run, res, t,
					   kw != NULL ? kw : Py_None, NULL);
	if (out == NULL)
		res_lost((ReservationObject *)res);
	Py_DECREF(res);
	Py_DECREF(t);
	Py_XDECREF(kw);
	return out;
}

/*
 * A replay's recorded bytes as a value: loads(bytes), or for a JSON result
 * the json module's scanner straight away (what the decorator recorded is
 * one compact value; anything else, such as an operator's result with
 * spaces around it, goes to loads). The Python layer's _json_loads does
 * the same.
 */
static PyObject *replay_value(IdempotentObject *self, const char *p,
			      Py_ssize_t n)
{
	PyObject *text, *got, *value = NULL, *bytes, *a[2];

	if (self->scan == Py_None)
		goto slow;
	text = PyUnicode_DecodeUTF8(p, n, NULL);
	if (text == NULL)
		return NULL;
	a[0] = text;
	a[1] = PyLong_FromLong(0);
	got = a[1] != NULL ? PyObject_Vectorcall(self->scan, a, 2, NULL) :
			     NULL;
	Py_XDECREF(a[1]);
	if (got != NULL && PyTuple_Check(got) && PyTuple_GET_SIZE(got) == 2 &&
	    PyLong_Check(PyTuple_GET_ITEM(got, 1)) &&
	    PyLong_AsSsize_t(PyTuple_GET_ITEM(got, 1)) ==
		    PyUnicode_GET_LENGTH(text)) {
		value = PyTuple_GET_ITEM(got, 0);
		Py_INCREF(value);
	}
	Py_DECREF(text);
	Py_XDECREF(got);
	if (value != NULL)
		return value;
	/* Not a whole value: loads() says what it is. */
	PyErr_Clear();
slow:
	bytes = PyBytes_FromStringAndSize(p, n);
	if (bytes == NULL)
		return NULL;
	value = PyObject_CallOneArg(self->loads, bytes);
	Py_DECREF(bytes);
	return value;
}

static PyObject *idem_vectorcall(PyObject *obj, PyObject *const *args,
				 size_t nargsf, PyObject *kwnames)
{
	IdempotentObject *self = (IdempotentObject *)obj;
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	Py_ssize_t n = PyVectorcall_NARGS(nargsf);
	PyObject *values, *a[4], *out;
	struct carmy_call call;
	int rc;

	values = bind_call(self, args, n, kwnames);
	if (values == NULL)
		return NULL;
	a[0] = self->tool;
	a[1] = pop_key(self, values);
	a[2] = a[1] != NULL ? pack_object(values, self->pack) : NULL;
	a[3] = Py_None;
	Py_DECREF(values);
	if (a[2] == NULL) {
		Py_XDECREF(a[1]);
		return NULL;
	}
	rc = fill_call(self->client, a, &call);
	if (rc == 0)
		rc = begin_into(self->client, &call, self->wait_ms, &r);
	Py_DECREF(a[1]);
	Py_DECREF(a[2]);
	if (rc < 0)
		return NULL;
	if (rc != CARMY_REPLAY || r.status != CARMY_STATUS_COMPLETED ||
	    r.result_code != 0)
		return run_call(self, &r, rc, args, n, kwnames);
	out = replay_value(self, r.result, (Py_ssize_t)r.result_len);
	carmy_reservation_clear(&r);
	return out;
}

/* As a method: bound to its instance, as a function would be. */
static PyObject *idem_get(PyObject *self, PyObject *obj, PyObject *type)
{
	(void)type;
	if (obj == NULL || obj == Py_None) {
		Py_INCREF(self);
		return self;
	}
	return PyMethod_New(self, obj);
}

/* pickle: by name, as a function is (its module's attribute). */
static PyObject *idem_reduce(PyObject *self, PyObject *unused)
{
	(void)unused;
	return PyObject_GetAttrString(self, "__qualname__");
}

static int idem_traverse(IdempotentObject *self, visitproc visit, void *arg)
{
	Py_VISIT(self->dict);
	Py_VISIT(self->client);
	Py_VISIT(self->tool);
	Py_VISIT(self->positional);
	Py_VISIT(self->allowed);
	Py_VISIT(self->defaults);
	Py_VISIT(self->key);
	Py_VISIT(self->pack);
	Py_VISIT(self->loads);
	Py_VISIT(self->slow_bind);
	Py_VISIT(self->run);
	Py_VISIT(self->scan);
	return 0;
}

static int idem_clear(IdempotentObject *self)
{
	Py_CLEAR(self->dict);
	Py_CLEAR(self->client);
	Py_CLEAR(self->tool);
	Py_CLEAR(self->positional);
	Py_CLEAR(self->allowed);
	Py_CLEAR(self->defaults);
	Py_CLEAR(self->key);
	Py_CLEAR(self->pack);
	Py_CLEAR(self->loads);
	Py_CLEAR(self->slow_bind);
	Py_CLEAR(self->run);
	Py_CLEAR(self->scan);
	return 0;
}

static void idem_dealloc(IdempotentObject *self)
{
	PyObject_GC_UnTrack(self);
	idem_clear(self);
	PyObject_GC_Del(self);
}

/* _idempotent(client, tool, wait_ms, positional, allowed, defaults, count,
 * key, pack, loads, slow_bind, run, scan) -> Idempotent */
static PyObject *mod_idempotent(PyObject *mod, PyObject *const *a,
				Py_ssize_t na)
{
	IdempotentObject *self;
	const char *p;
	Py_ssize_t n, count;
	long wait_ms;

	(void)mod;
	if (check_nargs("_idempotent", na, 13) != 0)
		return NULL;
	if (!PyObject_TypeCheck(a[0], &ClientType) ||
	    !PyTuple_Check(a[3]) || !PyTuple_Check(a[4]) ||
	    !PyDict_Check(a[5]) || !PyUnicode_Check(a[7]) ||
	    !PyCallable_Check(a[8]) || !PyCallable_Check(a[9]) ||
	    !PyCallable_Check(a[10]) || !PyCallable_Check(a[11]) ||
	    (a[12] != Py_None && !PyCallable_Check(a[12]))) {
		PyErr_SetString(PyExc_TypeError, "_idempotent: bad arguments");
		return NULL;
	}
	for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(a[4]); i++)
		if (!PyAnySet_Check(PyTuple_GET_ITEM(a[4], i)) ||
		    i >= PyTuple_GET_SIZE(a[3]) + 1) {
			PyErr_SetString(PyExc_TypeError,
					"_idempotent: allowed must hold sets");
			return NULL;
		}
	count = PyLong_AsSsize_t(a[6]);
	if ((count == -1 && PyErr_Occurred()) ||
	    as_bytes(a[1], "tool", &p, &n) != 0 || as_wait_ms(a[2], &wait_ms))
		return NULL;
	self = PyObject_GC_New(IdempotentObject, &IdempotentType);
	if (self == NULL)
		return NULL;
	self->vectorcall = idem_vectorcall;
	self->dict = NULL;
	self->tool = PyBytes_FromStringAndSize(p, n);
	self->wait_ms = wait_ms;
	self->count = count;
	self->client = (ClientObject *)new_ref(a[0]);
	self->positional = new_ref(a[3]);
	self->allowed = new_ref(a[4]);
	self->defaults = new_ref(a[5]);
	self->key = new_ref(a[7]);
	self->pack = new_ref(a[8]);
	self->loads = new_ref(a[9]);
	self->slow_bind = new_ref(a[10]);
	self->run = new_ref(a[11]);
	self->scan = new_ref(a[12]);
	PyObject_GC_Track(self);
	if (self->tool == NULL) {
		Py_DECREF(self);
		return NULL;
	}
	return (PyObject *)self;
}

/* _set_error_factory(callable) */
static PyObject *mod_set_error_factory(PyObject *mod, PyObject *f)
{
	(void)mod;
	if (!PyCallable_Check(f)) {
		PyErr_SetString(PyExc_TypeError, "the factory must be callable");
		return NULL;
	}
	Py_INCREF(f);
	Py_XSETREF(error_factory, f);
	Py_RETURN_NONE;
}

static PyObject *mod_version(PyObject *mod, PyObject *unused)
{
	(void)mod;
	(void)unused;
	return PyUnicode_FromString(carmy_version(NULL, NULL, NULL));
}

static PyObject *mod_default_socket(PyObject *mod, PyObject *unused)
{
	char buf[4096];
	int n;

	(void)mod;
	(void)unused;
	n = carmy_default_socket(buf, sizeof(buf));
	if (n < 0)
		return raise_code(n, NULL);
	return PyUnicode_DecodeFSDefaultAndSize(buf, n);
}

/* METH_FASTCALL functions are called through PyCFunction's type. */
#define FASTCALL(f) ((PyCFunction)(void (*)(void))(f))

static PyMethodDef client_methods[] = {
	{ "begin", FASTCALL(client_begin), METH_FASTCALL,
	  "begin(tool, request_id, args, meta, wait_ms) -> Reservation" },
	{ "try_begin", FASTCALL(client_try_begin), METH_FASTCALL,
	  "try_begin(tool, request_id, args, meta) -> Reservation or None:"
	  " begin() where shared memory alone answers, else None (nothing"
	  " reserved): never waits for carmyd" },
	{ "resolve", FASTCALL(client_resolve), METH_FASTCALL,
	  "resolve(tool, request_id, args, meta, execution_id, committed, "
	  "status, result) -> None" },
	{ "close", (PyCFunction)client_close, METH_NOARGS,
	  "close() -> None: close the connection (once calls running on "
	  "other threads return)" },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef client_getset[] = {
	{ "max_result", (getter)client_max_result, NULL,
	  "carmyd's --max-result, in bytes", NULL },
	{ "durable", (getter)client_durable, NULL,
	  "whether carmyd's store is durable (a begin may wait on it)", NULL },
	{ "closed", (getter)client_closed, NULL, "whether close() ran", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject ClientType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "carmy._carmy.Client",
	.tp_basicsize = sizeof(ClientObject),
	.tp_dealloc = (destructor)client_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A libcarmy handle; made by connect().",
	.tp_methods = client_methods,
	.tp_getset = client_getset,
};

static PyMethodDef res_methods[] = {
	{ "complete", FASTCALL(res_complete), METH_FASTCALL,
	  "complete(status, result) -> None" },
	{ "release", (PyCFunction)res_release, METH_NOARGS,
	  "release() -> None" },
	{ "abandon", (PyCFunction)res_abandon, METH_NOARGS,
	  "abandon() -> None: give the call up as uncertain now" },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef res_getset[] = {
	{ "replayed", (getter)res_replayed, NULL, "a recorded result", NULL },
	{ "ok", (getter)res_ok, NULL, "a replay recorded completed", NULL },
	{ "live", (getter)res_live, NULL, "reserved, not yet finished", NULL },
	{ "execution_id", (getter)res_execution_id, NULL, "the execution",
	  NULL },
	{ "status", (getter)res_status, NULL, "a replay's status", NULL },
	{ "result_code", (getter)res_result_code, NULL, "a replay's code",
	  NULL },
	{ "result", (getter)res_result, NULL, "a replay's bytes", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject ReservationType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "carmy._carmy.Reservation",
	.tp_basicsize = sizeof(ReservationObject),
	.tp_dealloc = (destructor)res_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "One call's reservation or replay; made by Client.begin().",
	.tp_methods = res_methods,
	.tp_getset = res_getset,
};

static PyMethodDef idem_methods[] = {
	{ "__reduce__", idem_reduce, METH_NOARGS,
	  "pickled by name, as the function it wraps" },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef idem_getset[] = {
	{ "__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL,
	  NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject IdempotentType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "carmy._carmy.Idempotent",
	.tp_basicsize = sizeof(IdempotentObject),
	.tp_dealloc = (destructor)idem_dealloc,
	.tp_vectorcall_offset = offsetof(IdempotentObject, vectorcall),
	.tp_call = PyVectorcall_Call,
	.tp_getattro = PyObject_GenericGetAttr,
	.tp_setattro = PyObject_GenericSetAttr,
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
		    Py_TPFLAGS_HAVE_VECTORCALL,
	.tp_doc = "A function made idempotent by carmy.idempotent().",
	.tp_traverse = (traverseproc)idem_traverse,
	.tp_clear = (inquiry)idem_clear,
	.tp_methods = idem_methods,
	.tp_getset = idem_getset,
	.tp_descr_get = idem_get,
	.tp_dictoffset = offsetof(IdempotentObject, dict),
};

static PyMethodDef mod_methods[] = {
	{ "_pack", FASTCALL(mod_pack), METH_FASTCALL,
	  "_pack(value, fallback) -> bytes: value as msgpack.packb(value) "
	  "writes it (fallback(value) for what is not packed here)" },
	{ "_idempotent", FASTCALL(mod_idempotent), METH_FASTCALL,
	  "_idempotent(client, tool, wait_ms, positional, allowed, defaults, "
	  "count, key, pack, loads, slow_bind, run, scan) -> Idempotent: the "
	  "decorator's callable (see carmy.idempotent)" },
	{ "connect", FASTCALL(mod_connect), METH_FASTCALL,
	  "connect(socket, principal, session) -> Client" },
	{ "_set_error_factory", mod_set_error_factory, METH_O,
	  "_set_error_factory(f): f(name, message, execution_id, state) "
	  "builds the exception to raise" },
	{ "version", mod_version, METH_NOARGS, "libcarmy's version" },
	{ "default_socket", mod_default_socket, METH_NOARGS,
	  "the socket connect(None, ...) uses" },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef carmy_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "carmy._carmy",
	.m_doc = "libcarmy for the carmy package (use carmy, not this).",
	.m_size = -1,
	.m_methods = mod_methods,
};

static int add_int(PyObject *m, const char *name, long v)
{
	return PyModule_AddIntConstant(m, name, v);
}

/* threading.main_thread().ident, or 0 (and no exception left). */
static unsigned long learn_main_ident(void)
{
	PyObject *th = PyImport_ImportModule("threading"), *mt = NULL;
	PyObject *id = NULL;
	unsigned long ident = 0;

	if (th != NULL)
		mt = PyObject_CallMethod(th, "main_thread", NULL);
	if (mt != NULL)
		id = PyObject_GetAttrString(mt, "ident");
	if (id != NULL && PyLong_Check(id))
		ident = PyLong_AsUnsignedLong(id);
	if (PyErr_Occurred()) {
		PyErr_Clear();
		ident = 0;
	}
	Py_XDECREF(id);
	Py_XDECREF(mt);
	Py_XDECREF(th);
	return ident;
}

PyMODINIT_FUNC PyInit__carmy(void)
{
	PyObject *m;

	if (PyType_Ready(&ClientType) < 0 ||
	    PyType_Ready(&ReservationType) < 0 ||
	    PyType_Ready(&IdempotentType) < 0)
		return NULL;
	m = PyModule_Create(&carmy_module);
	if (m == NULL)
		return NULL;
	main_ident = learn_main_ident();
	if (add_int(m, "STATUS_COMPLETED", CARMY_STATUS_COMPLETED) ||
	    add_int(m, "STATUS_FAILED", CARMY_STATUS_FAILED) ||
	    add_int(m, "STATUS_TIMED_OUT", CARMY_STATUS_TIMED_OUT) ||
	    add_int(m, "STATUS_CANCELLED", CARMY_STATUS_CANCELLED) ||
	    add_int(m, "ID_MAX", CARMY_ID_MAX) ||
	    PyModule_AddStringConstant(m, "VERSION", CARMY_VERSION_STRING)) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
