/*
 * http.c - libmicrohttpd's side: one daemon per listening socket, each with
 * its own pool of polling threads (--threads), epoll on Linux.
 *
 * A request's body is gathered (at most GW_BODY_MAX bytes, 413 above it),
 * its principal found (a bearer token of --tokens, or the peer's uid on a
 * unix: listener without --tokens), and it is routed. An execution whose
 * tool must run (or whose begin must wait for carmyd: execute.c) is
 * handed to a thread of its own and its connection suspended
 * (MHD_suspend_connection), so the polling threads go on serving everyone
 * else; the execution's thread fills the answer and resumes the
 * connection, and libmicrohttpd calls on_request() again to send it.
 * GET /healthz and /metrics, which wait for carmyd or carmyctl, are
 * answered the same way by a flight (flight.c): one thread each, whatever
 * the number of requests, so that no client, authenticated or not, makes
 * the gateway start a thread per request. Executions are given threads
 * up to --max-running only (execute.c).
 *
 * A connection is suspended before the execution's thread starts, so that
 * the resume can never come first.
 *
 * Stopping: libmicrohttpd must not be stopped with a connection suspended
 * (it aborts), and stopping it closes every connection, answers half sent
 * or not. So every request is counted from when it is routed until its
 * answer is sent (on_completed()), and once SIGTERM has come a request
 * routed is refused at once, 503 DAEMON_UNAVAILABLE with nothing reserved
 * and "Connection: close", never suspended: a keep-alive connection's
 * next request is its last, and new connections are no longer accepted
 * (gw_listener_quiesce()). The daemons are stopped once no request is
 * counted and no thread of ours runs (main.c), in a time bounded by the
 * tools' timeouts and --request-timeout.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "gateway/gateway.h"

/* Per connection: request line, headers and libmicrohttpd's buffers.
 * libmicrohttpd zeroes the whole of it after every request (0.9.75's
 * MHD_pool_reset), so its size is paid on each: 32 KiB, libmicrohttpd's
 * default, as the bench-http floor has. */
#define CONN_MEMORY (32u * 1024)
/* The request line and headers the gateway takes; over it, 431 with the
 * contract's error body. Requests whose headers do not fit CONN_MEMORY at
 * all are refused by libmicrohttpd itself, before any callback of ours
 * runs: 431 (or 400 for malformed HTTP) with its own small HTML body and
 * no Cache-Control. libmicrohttpd 0.9.75 has no option to supply the
 * bodies of the answers it makes on its own. */
#define HEADERS_MAX (16u * 1024)

struct req {
	struct gw_listener *l;
	struct MHD_Connection *conn;
	char *body;
	size_t len, cap;
	bool too_large;
	bool counted;		/* in gw->requests until on_completed() */
	bool refused;		/* ... after the gateway began to stop */
	bool started;		/* suspended while its tool runs */
	int route;		/* enum gw_route, for the metrics */
	uint64_t t0;		/* when its headers were in, ns */
	bool ready;		/* ans is filled */
	struct gw_answer ans;
	struct gw_waiter waiter;	/* in a flight */
};

/* ------------------------------------------------------------ answers */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static enum MHD_Result send_answer(struct req *q, const char *allow)
{
	struct gw_answer *a = &q->ans;
	struct MHD_Response *resp;
	enum MHD_Result ret;
	char retry[16];

	if (a->body != NULL)
		resp = MHD_create_response_from_buffer(a->len, a->body,
						       MHD_RESPMEM_MUST_FREE);
	else
		resp = MHD_create_response_from_buffer(0, (void *)"",
						       MHD_RESPMEM_PERSISTENT);
	if (resp == NULL)
		return MHD_NO;
	a->body = NULL;		/* the response's now */
	a->len = 0;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				a->type != NULL ? a->type : "application/json");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
				"no-store");
	if (a->replayed)
		MHD_add_response_header(resp, "Idempotent-Replayed", "true");
	if (a->retry_after) {
		snprintf(retry, sizeof(retry), "%d", GW_RETRY_AFTER_S);
		MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER,
					retry);
	}
	if (a->status == 401)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
					"Bearer");
	if (allow != NULL)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
	if (q->refused)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION,
					"close");
	ret = MHD_queue_response(q->conn, a->status, resp);
	MHD_destroy_response(resp);
	gw_metrics_count(&q->l->gw->stats, q->route, a->status,
			 now_ns() - q->t0);
	return ret;
}

static enum MHD_Result send_error(struct req *q, const char *code,
				  const char *message, const char *allow)
{
	gw_answer_error(&q->ans, code, message, NULL, NULL);
	return send_answer(q, allow);
}

/* Count q until its answer is sent (see the top): false once the gateway
 * stops, and q is then to be answered at once. */
static bool admit(struct req *q)
{
	if (!q->counted) {
		q->counted = true;
		q->refused = !gw_request_begin(q->l->gw);
	}
	return !q->refused;
}

static enum MHD_Result send_stopping(struct req *q)
{
	return send_error(q, "DAEMON_UNAVAILABLE", "The gateway is stopping; "
			  "nothing ran and nothing was reserved for this "
			  "request. Send it again after Retry-After (to "
			  "another gateway, or to this one once it is "
			  "back).", NULL);
}

/* ------------------------------------------------------------ identity */

/* One header looked for: its first value and how many it has. */
struct lookup {
	const char *name;
	size_t len;
	const char *v;
	unsigned n;
};

static enum MHD_Result look_one(void *cls, enum MHD_ValueKind kind,
				const char *key, size_t key_size,
				const char *value, size_t value_size)
{
	struct lookup *l = cls;

	(void)kind;
	(void)value_size;
	if (key_size == l->len && strcasecmp(key, l->name) == 0) {
		if (l->n == 0)
			l->v = value;
		l->n++;
	}
	return MHD_YES;
}

static const char *header(void *hcls, const char *name, unsigned *n)
{
	struct req *q = hcls;
	struct lookup l = { name, strlen(name), NULL, 0 };

	MHD_get_connection_values_n(q->conn, MHD_HEADER_KIND, look_one, &l);
	if (n != NULL)
		*n = l.n;
	return l.v;
}

/* The headers that name a call, each found (its first value) and counted
 * in one pass over the request's headers. */
enum { H_AUTHORIZATION, H_SESSION, H_KEY, H_PREFER, H_NAMED };

struct named {
	const char *v[H_NAMED];
	unsigned n[H_NAMED];
};

static const struct {
	const char *name;
	size_t len;
} named_headers[H_NAMED] = {
	[H_AUTHORIZATION] = { "Authorization", 13 },
	[H_SESSION] = { "Carmy-Session", 13 },
	[H_KEY] = { "Idempotency-Key", 15 },
	[H_PREFER] = { "Prefer", 6 },
};

static enum MHD_Result name_one(void *cls, enum MHD_ValueKind kind,
				const char *key, size_t key_size,
				const char *value, size_t value_size)
{
	struct named *h = cls;

	(void)kind;
	(void)value_size;
	for (size_t i = 0; i < H_NAMED; i++) {
		if (key_size == named_headers[i].len &&
		    strcasecmp(key, named_headers[i].name) == 0) {
			if (h->n[i]++ == 0)
				h->v[i] = value;
			break;
		}
	}
	return MHD_YES;
}

static void find_named(struct req *q, struct named *h)
{
	memset(h, 0, sizeof(*h));
	MHD_get_connection_values_n(q->conn, MHD_HEADER_KIND, name_one, h);
}

/* The principal, or NULL: not authenticated. buf holds "uid:N". */
static const char *principal(struct req *q, const struct named *h,
			     char *buf, size_t size)
{
	struct gateway *gw = q->l->gw;
	const union MHD_ConnectionInfo *ci;
	struct ucred cred;
	socklen_t len = sizeof(cred);
	const char *auth = h->v[H_AUTHORIZATION];

	if (gw->have_tokens) {
		size_t n;

		if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0 ||
		    h->n[H_AUTHORIZATION] != 1)
			return NULL;
		auth = gw_field_trim(auth + 7, &n);
		return gw_token_principal(&gw->tokens, auth, n);
	}
	if (!q->l->is_unix)
		return NULL;
	ci = MHD_get_connection_info(q->conn,
				     MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci == NULL ||
	    getsockopt(ci->connect_fd, SOL_SOCKET, SO_PEERCRED, &cred,
		       &len) != 0)
		return NULL;
	snprintf(buf, size, "uid:%u", (unsigned)cred.uid);
	return buf;
}

/* ------------------------------------------------------------ requests */

/* The execution's thread: the answer is filled; send it. */
static void resume(void *arg)
{
	struct req *q = arg;
	struct MHD_Connection *conn = q->conn;

	q->ready = true;
	MHD_resume_connection(conn);	/* q is not ours to touch after */
}

static enum MHD_Result execute(struct req *q)
{
	char buf[32];
	struct named h;
	struct gw_request rq = {
		.gw = q->l->gw,
		.header = header,
		.hcls = q,
		.body = q->body != NULL ? q->body : "",
		.len = q->len,
	};
	struct gw_exec *x;

	find_named(q, &h);
	if (h.n[H_SESSION] > 1 || h.n[H_KEY] > 1 || h.n[H_PREFER] > 1)
		return send_error(q, "INVALID_REQUEST", "A header that names "
				  "the call (Carmy-Session, Idempotency-Key, "
				  "Prefer) is given twice.", NULL);
	rq.principal = principal(q, &h, buf, sizeof(buf));
	rq.session = h.v[H_SESSION];
	rq.key = h.v[H_KEY];
	rq.prefer = h.v[H_PREFER];
	if (gw_execute(&rq, &q->ans, resume, q, &x) == 0)
		return send_answer(q, NULL);
	q->started = true;
	MHD_suspend_connection(q->conn);
	gw_exec_start(x);
	return MHD_YES;
}

/* Answer q with the flight's next answer: it may wait (for carmyd, for
 * carmyctl), and a polling thread must not. */
static enum MHD_Result join(struct req *q, struct gw_flight *f)
{
	q->started = true;
	q->waiter.answer = &q->ans;
	q->waiter.done = resume;
	q->waiter.arg = q;
	MHD_suspend_connection(q->conn);
	if (gw_flight_join(f, &q->waiter) != 0) {
		gw_answer_error(&q->ans, "INTERNAL", "The gateway could not "
				"start a thread to answer.", NULL, NULL);
		resume(q);
	}
	return MHD_YES;
}

/* GET /healthz: whether carmyd answers a new connection now (within
 * GW_CONNECT_WAIT_MS). */
static void healthz(struct gateway *gw, struct gw_answer *a)
{
	int rc = gw_carmyd_probe(&gw->carmyd);
	json_t *o;

	o = json_pack("{s:s,s:s}", "status", rc == 0 ? "ok" : "unavailable",
		      "carmyd", rc == 0 ? "reachable" : carmy_errname(rc));
	gw_answer_json(a, rc == 0 ? 200 : 503, o);
	a->retry_after = rc != 0;
}

/* GET /metrics: Prometheus text, with carmyctl's (given 5 s at most). */
static void metrics(struct gateway *gw, struct gw_answer *a)
{
	char *text;
	size_t len;

	if (gw_metrics_text(gw, &text, &len) != 0) {
		gw_answer_error(a, "INTERNAL", "Out of memory.", NULL, NULL);
		return;
	}
	gw_answer_free(a);
	a->status = 200;
	a->body = text;
	a->len = len;
	a->type = "text/plain; version=0.0.4";
}

void gw_http_init(struct gateway *gw)
{
	gw_flight_init(&gw->health, gw, healthz);
	gw_flight_init(&gw->scrape, gw, metrics);
}

/* GET /agent/tools: name, description and input schema of each. */
static enum MHD_Result tools(struct req *q)
{
	const struct gw_tools *t = &q->l->gw->tools;
	json_t *list = json_array();

	for (size_t i = 0; list != NULL && i < t->n; i++) {
		json_t *o = json_pack("{s:s}", "name", t->v[i].name);

		if (o != NULL && t->v[i].description != NULL)
			json_object_set_new(o, "description",
					    json_string(t->v[i].description));
		if (o != NULL && t->v[i].input_schema != NULL)
			json_object_set(o, "input_schema",
					t->v[i].input_schema);
		json_array_append_new(list, o);
	}
	gw_answer_json(&q->ans, 200, json_pack("{s:o}", "tools", list));
	return send_answer(q, NULL);
}

/* A Host header fit to build a URL of: host name or address and port. */
static bool host_ok(const char *h)
{
	size_t n = h != NULL ? strlen(h) : 0;

	if (n == 0 || n > 255)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((h[i] >= 'a' && h[i] <= 'z') ||
		      (h[i] >= 'A' && h[i] <= 'Z') ||
		      (h[i] >= '0' && h[i] <= '9') ||
		      strchr(".-:[]", h[i]) != NULL))
			return false;
	return true;
}

/* GET /.well-known/agent: where the contract is served. */
static enum MHD_Result well_known(struct req *q)
{
	const char *host = header(q, MHD_HTTP_HEADER_HOST, NULL);
	char exec[300] = "/agent/execute", list[300] = "/agent/tools";

	if (host_ok(host)) {
		snprintf(exec, sizeof(exec), "http://%s/agent/execute", host);
		snprintf(list, sizeof(list), "http://%s/agent/tools", host);
	}
	gw_answer_json(&q->ans, 200,
		       json_pack("{s:s,s:s,s:s}", "protocol", "carmy/1",
				 "execute_url", exec, "tools_url", list));
	return send_answer(q, NULL);
}

static bool is_get(const char *method)
{
	return strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
	       strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
}

static enum MHD_Result route(struct req *q, const char *url,
			     const char *method)
{
	char buf[32];
	struct named h;

	q->route = strcmp(url, "/agent/execute") == 0 ? GW_R_EXECUTE :
		   strcmp(url, "/healthz") == 0 ? GW_R_HEALTHZ :
		   strcmp(url, "/agent/tools") == 0 ? GW_R_TOOLS :
		   strcmp(url, "/.well-known/agent") == 0 ? GW_R_WELL_KNOWN :
		   strcmp(url, "/metrics") == 0 ? GW_R_METRICS : GW_R_OTHER;
	if (!admit(q))
		return send_stopping(q);
	if (q->route == GW_R_EXECUTE) {
		if (strcmp(method, MHD_HTTP_METHOD_POST) != 0)
			return send_error(q, "METHOD_NOT_ALLOWED",
					  "Use POST.", "POST");
		if (q->too_large)
			return send_error(q, "PAYLOAD_TOO_LARGE",
					  "The body is larger than 1 MiB.",
					  NULL);
		return execute(q);
	}
	if (q->route == GW_R_OTHER)
		return send_error(q, "NOT_FOUND", "No such path: POST "
				  "/agent/execute runs a tool.", NULL);
	if (!is_get(method))
		return send_error(q, "METHOD_NOT_ALLOWED", "Use GET.",
				  "GET, HEAD");
	if (q->route == GW_R_HEALTHZ)
		return join(q, &q->l->gw->health);
	if (q->route == GW_R_WELL_KNOWN)
		return well_known(q);
	if (q->route == GW_R_METRICS)
		return join(q, &q->l->gw->scrape);
	find_named(q, &h);
	if (principal(q, &h, buf, sizeof(buf)) == NULL)
		return send_error(q, "UNAUTHENTICATED", "Send Authorization: "
				  "Bearer TOKEN with a token of the "
				  "gateway's --tokens file.", NULL);
	return tools(q);
}

/* Append a piece of the body, or drop it past GW_BODY_MAX. */
static int gather(struct req *q, const char *data, size_t n)
{
	if (q->too_large || n > GW_BODY_MAX - q->len) {
		q->too_large = true;
		free(q->body);
		q->body = NULL;
		q->len = q->cap = 0;
		return 0;
	}
	return gw_append(&q->body, &q->len, &q->cap, data, n);
}

/* The request line and headers, as they came. */
static bool headers_too_large(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
		conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);

	return ci != NULL && ci->header_size > HEADERS_MAX;
}

/* What the fields of a request are checked for before anything else. */
struct fields {
	unsigned content_length;	/* Content-Length headers */
	bool control;		/* a control character in a name or value */
};

static bool has_control(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return true;
	}
	return false;
}

static enum MHD_Result check_one(void *cls, enum MHD_ValueKind kind,
				 const char *key, size_t key_size,
				 const char *value, size_t value_size)
{
	struct fields *f = cls;

	(void)kind;
	if ((key != NULL && has_control(key, key_size)) ||
	    (value != NULL && has_control(value, value_size))) {
		f->control = true;
		return MHD_NO;
	}
	if (key_size == 14 && strcasecmp(key, "Content-Length") == 0)
		f->content_length++;
	return MHD_YES;
}

/*
 * Why the request's header fields are refused, or NULL. A control
 * character other than HTAB (RFC 9110 5.5: invalid; libmicrohttpd passes
 * a NUL on), since the values are read as C strings: "s\0x" and "s\0y"
 * would be one session, one fingerprint header's value, one token. And
 * Content-Length given twice (RFC 9112 6.3), which a proxy in front may
 * read otherwise than libmicrohttpd does.
 */
static const char *fields_refused(struct MHD_Connection *conn)
{
	struct fields f = { 0, false };

	MHD_get_connection_values_n(conn, MHD_HEADER_KIND, check_one, &f);
	if (f.control)
		return "A header's name or value holds a control character "
		       "(a NUL, say), which RFC 9110 does not allow; nothing "
		       "ran and nothing was reserved.";
	if (f.content_length > 1)
		return "Content-Length is given more than once; nothing ran "
		       "and nothing was reserved.";
	return NULL;
}

static bool declared_too_large(struct MHD_Connection *conn)
{
	const char *cl = MHD_lookup_connection_value(
		conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	char *end;
	unsigned long long n;

	if (cl == NULL)
		return false;
	errno = 0;
	n = strtoull(cl, &end, 10);
	return errno == ERANGE || (end != cl && n > GW_BODY_MAX);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
				  const char *url, const char *method,
				  const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	struct req *q = *con_cls;
	const char *why;

	(void)version;
	if (q == NULL) {
		q = calloc(1, sizeof(*q));
		if (q == NULL)
			return MHD_NO;
		q->l = cls;
		q->conn = conn;
		q->route = GW_R_OTHER;
		q->t0 = now_ns();
		*con_cls = q;
		/* Answered here: counted too, whether the gateway stops
		 * or not (they are refused either way). */
		if (headers_too_large(conn)) {
			admit(q);
			return send_error(q, "HEADERS_TOO_LARGE", "The request "
					  "line and headers are larger than "
					  "16 KiB.", NULL);
		}
		if ((why = fields_refused(conn)) != NULL) {
			admit(q);
			return send_error(q, "INVALID_REQUEST", why, NULL);
		}
		if (declared_too_large(conn)) {
			admit(q);
			return send_error(q, "PAYLOAD_TOO_LARGE",
					  "The body is larger than 1 MiB.",
					  NULL);
		}
		return MHD_YES;
	}
	if (q->started)
		return q->ready ? send_answer(q, NULL) : MHD_YES;
	if (*upload_size != 0) {
		/* A body sent a byte at a time must not hold a connection
		 * (and its memory) for ever: the inactivity timeout alone
		 * would let it. Closing it is its answer. */
		if (now_ns() - q->t0 > q->l->body_deadline_ns) {
			log_debug("a request body took longer than the "
				  "request timeout: connection closed");
			return MHD_NO;
		}
		if (gather(q, upload, *upload_size) != 0)
			return MHD_NO;
		*upload_size = 0;
		return MHD_YES;
	}
	return route(q, url, method);
}

/* q's answer is sent, or its connection ended. */
static void on_completed(void *cls, struct MHD_Connection *conn,
			 void **con_cls, enum MHD_RequestTerminationCode toe)
{
	struct req *q = *con_cls;
	struct gateway *gw;
	bool counted;

	(void)cls;
	(void)conn;
	(void)toe;
	if (q == NULL)
		return;
	*con_cls = NULL;
	gw = q->l->gw;
	counted = q->counted;
	if (q->started && !q->ready) {
		/* Its execution's thread will still write here (and the
		 * gateway waits for that thread before it stops). */
		log_error("a connection ended while its tool ran");
	} else {
		free(q->body);
		gw_answer_free(&q->ans);
		free(q);
	}
	if (counted)
		gw_request_end(gw);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	size_t n;

	(void)cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n > 0 && line[n - 1] == '\n')
		line[--n] = '\0';
	log_debug("libmicrohttpd: %s", line);
}

int gw_listener_start(struct gw_listener *l, unsigned threads,
		      unsigned timeout_s, unsigned limit)
{
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
			 MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;

	l->body_deadline_ns = (uint64_t)timeout_s * 1000000000u;
	l->mhd = MHD_start_daemon(
		flags, 0, NULL, NULL, on_request, l,
		MHD_OPTION_LISTEN_SOCKET, (MHD_socket)l->fd,
		MHD_OPTION_THREAD_POOL_SIZE, threads,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, l,
		MHD_OPTION_CONNECTION_TIMEOUT, timeout_s,
		MHD_OPTION_CONNECTION_LIMIT, limit,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
		MHD_OPTION_END);
	return l->mhd != NULL ? 0 : -1;
}

void gw_listener_quiesce(struct gw_listener *l)
{
	MHD_socket fd;

	if (l->mhd == NULL)
		return;
	fd = MHD_quiesce_daemon(l->mhd);
	if (fd != MHD_INVALID_SOCKET) {
		close(fd);
		l->fd = -1;
	}
}

void gw_listener_stop(struct gw_listener *l)
{
	if (l->mhd != NULL) {
		MHD_stop_daemon(l->mhd);
		l->fd = -1;	/* libmicrohttpd closed it, if still open */
	}
	l->mhd = NULL;
}
