/*
 * _carmy.c - the CPython extension under the carmy package: libcarmy's
 * handle (Client) and one call's reservation (Reservation).
 *
 * The Python layer (carmy/__init__.py) packs arguments, binds decorated
 * functions' parameters and (de)serialises results; this module only moves
 * bytes to and from libcarmy. Every call that may block (connect, begin,
 * wait, complete, release, resolve) runs without the GIL. Errors are
 * raised as the exception the Python layer's factory builds from the
 * code's stable name (see _set_error_factory).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "carmy.h"

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
	int live;		/* reserved, not yet completed or released */
	int busy;		/* a complete/release is running */
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

/* Take the handle for a call that runs without the GIL: 0, or -1 with
 * ValueError when the client is closed. */
static int client_enter(ClientObject *self)
{
	if (self->c == NULL || self->closing) {
		PyErr_SetString(PyExc_ValueError, "the carmy client is closed");
		return -1;
	}
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

/* Client.begin(tool, request_id, args, meta, wait_ms) -> Reservation */
static PyObject *client_begin(ClientObject *self, PyObject *const *a,
			      Py_ssize_t na)
{
	struct carmy_call call;
	ReservationObject *res;
	long wait_ms;
	int rc;

	if (check_nargs("begin", na, 5) != 0 || fill_call(self, a, &call) != 0)
		return NULL;
	wait_ms = PyLong_AsLong(a[4]);
	if (wait_ms == -1 && PyErr_Occurred())
		return NULL;
	if (wait_ms > 24L * 3600 * 1000)
		wait_ms = 24L * 3600 * 1000;
	res = PyObject_New(ReservationObject, &ReservationType);
	if (res == NULL)
		return NULL;
	memset(&res->r, 0, sizeof(res->r));
	res->client = NULL;
	res->live = res->busy = 0;
	if (client_enter(self) != 0) {
		Py_DECREF(res);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	if (wait_ms > 0)
		rc = carmy_wait(self->c, &call, &res->r, (int)wait_ms);
	else
		rc = carmy_begin(self->c, &call, &res->r);
	Py_END_ALLOW_THREADS
	client_leave(self);
	if (rc != CARMY_RESERVED && rc != CARMY_REPLAY) {
		raise_code(rc, &res->r);
		Py_DECREF(res);
		return NULL;
	}
	Py_INCREF(self);
	res->client = self;
	res->outcome = rc;
	res->live = rc == CARMY_RESERVED;
	return (PyObject *)res;
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
	if (self->c == NULL || self->closing) {
		PyErr_SetString(PyExc_ValueError, "the carmy client is closed");
		return NULL;
	}
	return PyLong_FromSize_t(carmy_max_result(self->c));
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

/* Reservation.release() -> None */
static PyObject *res_release(ReservationObject *self, PyObject *unused)
{
	ClientObject *cl = self->client;
	int rc;

	(void)unused;
	if (!self->live || self->busy)
		return raise_code(CARMY_ENOT_RESERVED, NULL);
	if (client_enter(cl) != 0)
		return NULL;
	self->busy = 1;
	Py_BEGIN_ALLOW_THREADS
	rc = carmy_release(cl->c, &self->r);
	Py_END_ALLOW_THREADS
	self->busy = 0;
	client_leave(cl);
	if (rc == 0)
		self->live = 0;
	if (rc != 0)
		return raise_code(rc, NULL);
	Py_RETURN_NONE;
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

static void res_dealloc(ReservationObject *self)
{
	carmy_reservation_clear(&self->r);
	Py_XDECREF(self->client);
	Py_TYPE(self)->tp_free((PyObject *)self);
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

static PyMethodDef mod_methods[] = {
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

PyMODINIT_FUNC PyInit__carmy(void)
{
	PyObject *m;

	if (PyType_Ready(&ClientType) < 0 ||
	    PyType_Ready(&ReservationType) < 0)
		return NULL;
	m = PyModule_Create(&carmy_module);
	if (m == NULL)
		return NULL;
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
