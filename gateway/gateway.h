/*
 * gateway.h - carmy-gateway, the HTTP front end: an HTTP server
 * (libmicrohttpd) that is a libcarmy client like any worker, speaking the
 * "carmy/1" contract (POST /agent/execute) so that an agent in any language
 * gets safe retries with curl.
 *
 * The parts:
 *   main.c     options, listening sockets, signals, start and stop
 *   config.c   the --tools and --tokens files (jansson)
 *   handle.c   the connection to carmyd, shared by every request
 *   http.c     libmicrohttpd's callbacks: bodies, identity, routing
 *   execute.c  POST /agent/execute: validation, fingerprint, reservation,
 *              and the thread of a call
 *   run.c      what runs (requests, calls, --max-running slots) and the
 *              stop the gateway waits on
 *   flight.c   GET /healthz and /metrics: one thread each, shared by the
 *              requests that come while it works
 *   answer.c   every body the gateway sends, and its status code
 *   record.c   an execution's answer recorded, or its reservation released
 *   command.c  a command tool run under tools/supervise.c's watcher
 *   upstream.c a url tool: a POST to its upstream (libcurl)
 *   metrics.c  GET /metrics
 */
#ifndef CARMY_GATEWAY_H
#define CARMY_GATEWAY_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>
#include <microhttpd.h>

#include "carmy.h"

/* The largest request body taken (413 PAYLOAD_TOO_LARGE above it). */
#define GW_BODY_MAX (1024 * 1024)
/* How deep "arguments" may nest: libcarmy's fingerprint takes as deep. */
#define GW_ARGS_DEPTH_MAX 32
/* A tool's timeout when its entry gives none, and the longest allowed. */
#define GW_TIMEOUT_DEFAULT_MS 30000u
#define GW_TIMEOUT_MAX_MS (24u * 3600 * 1000)
/* A tool name: 1..GW_TOOL_NAME_MAX of [A-Za-z0-9_.-]. */
#define GW_TOOL_NAME_MAX 128
/* Retry-After, in seconds, on 503. */
#define GW_RETRY_AFTER_S 1
/* The longest Prefer: wait=N honoured, in seconds (more waits this). */
#define GW_WAIT_MAX_S 600
/* --max-running: calls given a thread of their own at once (their tool
 * runs, their begin waits for carmyd, or they wait with Prefer: wait),
 * by default and at most. */
#define GW_MAX_RUNNING_DEFAULT 128u
#define GW_MAX_RUNNING_MAX 4096u
/* The descriptors one such call may hold (a command's pipes and its
 * watcher's, or an upstream's socket), kept free of connections. */
#define GW_FDS_PER_RUN 8u
/* A result the durable store could not record (CARMY_ESTORE), or that
 * found carmyd away (CARMY_EUNAVAILABLE), is sent again, the wait doubling
 * from GW_RECORD_RETRY_MS to at most GW_RECORD_RETRY_MAX_MS, for
 * GW_RECORD_WAIT_MS before the call is answered (a try that waits for
 * carmyd may take CARMY_RECONNECT_MS more); then in the background until
 * recorded (record.c). */
#define GW_RECORD_RETRY_MS 50u
#define GW_RECORD_RETRY_MAX_MS 2000u
#define GW_RECORD_WAIT_MS 10000u

/* ------------------------------------------------------------ config.c */

struct gw_tool {
	char *name;
	char *description;	/* NULL: none */
	json_t *input_schema;	/* NULL: none */
	char **argv;		/* the command, NULL-terminated; or */
	char *url;		/* the upstream a url tool POSTs to */
	uint32_t timeout_ms;
	char **fp_headers;	/* lower-case header names */
	size_t n_fp_headers;
};

struct gw_tools {
	struct gw_tool *v;	/* sorted by name */
	size_t n;
};

struct gw_token {
	char *token;
	size_t len;
	char *principal;
};

struct gw_tokens {
	struct gw_token *v;
	size_t n;
};

/* Load and check a file; 0, or -1 with a sentence in err. */
int gw_tools_load(const char *path, struct gw_tools *t, char *err,
		  size_t err_len);
int gw_tokens_load(const char *path, struct gw_tokens *t, char *err,
		   size_t err_len);
void gw_tools_free(struct gw_tools *t);
void gw_tokens_free(struct gw_tokens *t);

/* The tool of that name (len bytes), or NULL. */
const struct gw_tool *gw_tool_find(const struct gw_tools *t, const char *name,
				   size_t len);

/* The principal whose token is tok (len bytes), or NULL. Looks at every
 * token whatever matches, each compared in time that does not depend on
 * where the bytes differ. */
const char *gw_token_principal(const struct gw_tokens *t, const char *tok,
			       size_t len);

/* ------------------------------------------------------------ handle.c */

/* One connection to carmyd, counted: a request holds it from its begin to
 * its complete. One that libcarmy declares done (DISCONNECTED) is retired:
 * the next request connects anew, and the old one closes when its last
 * holder lets it go. */
struct gw_handle {
	carmy_t *c;
	unsigned refs;
	bool retired;
};

/* A connect to carmyd, run on a thread of its own: a carmyd that accepts
 * but never answers holds that thread (libcarmy waits 10 s for its HELLO),
 * never a polling thread nor the lock. */
struct gw_connect {
	bool running;
	int rc;			/* the last one's result */
};

struct gw_carmyd {
	const char *socket;	/* NULL: libcarmy's default */
	pthread_mutex_t lock;
	pthread_cond_t done;	/* a connect (or probe) ended */
	struct gw_handle *cur;
	uint64_t last_fail_ns;	/* a failed connect is not retried sooner
				 * than GW_RECONNECT_MS after it */
	struct gw_connect conn;	/* to become cur */
	struct gw_connect probe;	/* GET /healthz's, closed at once */
};

#define GW_RECONNECT_MS 200
/* How long the request that starts a connect waits for it (any other
 * request meanwhile is answered DAEMON_UNAVAILABLE at once). */
#define GW_CONNECT_WAIT_MS 1000

void gw_carmyd_init(struct gw_carmyd *d, const char *socket);
/* The current handle, connecting if there is none (wait: else NULL with
 * *code -EAGAIN); NULL with *code (a libcarmy code) when carmyd cannot be
 * reached. */
struct gw_handle *gw_handle_get(struct gw_carmyd *d, bool wait, int *code);
void gw_handle_put(struct gw_carmyd *d, struct gw_handle *h);
/* h answered CARMY_EDISCONNECTED (or lost track of a tool while carmyd was
 * away): no new request gets it. */
void gw_handle_retire(struct gw_carmyd *d, struct gw_handle *h);
/* Whether a new connection to carmyd gets its HELLO answered now: 0, or a
 * libcarmy code (CARMY_EUNAVAILABLE also while an earlier probe waits). */
int gw_carmyd_probe(struct gw_carmyd *d);
/* Waits for a connect still running, then closes the handle. */
void gw_carmyd_close(struct gw_carmyd *d);

/* ------------------------------------------------------------ metrics.c */

enum gw_route {
	GW_R_EXECUTE, GW_R_HEALTHZ, GW_R_TOOLS, GW_R_WELL_KNOWN, GW_R_METRICS,
	GW_R_OTHER, GW_ROUTES
};
#define GW_CODES 12		/* the status codes counted, and "other" */
#define GW_BUCKETS 12		/* the latency histogram's, with +Inf */

struct gw_stats {
	uint64_t requests[GW_ROUTES][GW_CODES];
	uint64_t buckets[GW_BUCKETS];
	uint64_t ns_sum;
	uint64_t overloaded;	/* calls refused OVERLOADED */
};

struct gateway;

/* Count one answer: its route, status and time taken. Any thread. */
void gw_metrics_count(struct gw_stats *s, int route, unsigned status,
		      uint64_t ns);
/* The whole /metrics text, malloc'd, into *out; 0, or -1. */
int gw_metrics_text(struct gateway *gw, char **out, size_t *len);

/* ------------------------------------------------------------ flight.c */

/* A request waiting for a flight's answer: *answer is filled (a copy of
 * the flight's), then done(arg) is called, on the flight's thread. */
struct gw_waiter {
	struct gw_waiter *next;
	struct gw_answer *answer;
	void (*done)(void *arg);
	void *arg;
};

/*
 * A single-flight answer (GET /healthz, GET /metrics): one thread at a
 * time makes it, with fill(), and every request that joined before that
 * fill began gets a copy. Requests that join while a fill runs wait for
 * the next one, which starts as soon as it ends. So any number of such
 * requests costs one thread, and none is answered with what was made
 * before it came. The thread waits GW_FLIGHT_LINGER_MS for more before
 * it ends.
 */
struct gw_flight {
	struct gateway *gw;
	void (*fill)(struct gateway *gw, struct gw_answer *a);
	pthread_mutex_t lock;
	pthread_cond_t more;	/* a request joined */
	bool running;		/* its thread is there */
	bool stopping;		/* the gateway stops: no lingering */
	struct gw_waiter *head, **tail;
};

#define GW_FLIGHT_LINGER_MS 2000

void gw_flight_init(struct gw_flight *f, struct gateway *gw,
		    void (*fill)(struct gateway *gw, struct gw_answer *a));
/* Join f's next answer: 0, w is answered on f's thread; or -1, no thread
 * could be started and w was not taken. */
int gw_flight_join(struct gw_flight *f, struct gw_waiter *w);
/* The gateway stops: f's thread ends as soon as nobody waits. */
void gw_flight_stop(struct gw_flight *f);

/* ------------------------------------------------------------ the server */

struct gateway {
	struct gw_tools tools;
	struct gw_tokens tokens;
	bool have_tokens;
	struct gw_carmyd carmyd;
	char **env;		/* commands' environment, without CARMY_* */
	size_t n_env;
	/* Threads answering suspended connections (executions, health
	 * probes, scrapes), and requests routed whose answer is not sent
	 * yet (http.c); stop waits for both to be 0. */
	pthread_mutex_t run_lock;
	pthread_cond_t run_idle;
	unsigned running;
	unsigned executions;	/* ... of them, executions */
	unsigned requests;
	/* SIGTERM came: requests routed from now on are refused (http.c),
	 * and a result still being recorded in the background is given
	 * up. Set under run_lock, with stop_wake broadcast. */
	bool stopping;
	pthread_cond_t stop_wake;	/* CLOCK_MONOTONIC */
	/* The calls holding a thread of their own (gw_slot_take), and the
	 * most there may be (--max-running). */
	unsigned slots;
	unsigned max_running;
	struct gw_flight health;	/* GET /healthz */
	struct gw_flight scrape;	/* GET /metrics */
	struct gw_stats stats;
	/* What comes to the gateway, a child subreaper, from command tools'
	 * watchers (command.c): the pids of the watchers let go that stay
	 * as the reapers of what their command left running, and whether
	 * orphans may be left to kill. orphan_lock also makes one sweep of
	 * the orphans at a time. */
	pthread_mutex_t orphan_lock;
	pid_t *lingering;
	size_t n_lingering, cap_lingering;
	bool orphans;
};

/* One listening socket, served by a libmicrohttpd daemon of its own. */
struct gw_listener {
	struct gateway *gw;
	int fd;
	bool is_unix;		/* principal: SO_PEERCRED (no tokens) */
	bool owned;		/* a unix: path of ours, removed at exit */
	char name[160];		/* "127.0.0.1:8080", "unix:/path" */
	uint64_t body_deadline_ns;	/* --request-timeout */
	struct MHD_Daemon *mhd;
};

/* The most connections one listener keeps open (main.c lowers it to what
 * RLIMIT_NOFILE allows), and the descriptors kept for everything else. */
#define GW_CONNECTIONS_MAX 10000u
#define GW_FD_RESERVE 256u

/* http.c. The flights of GET /healthz and /metrics, before any listener
 * starts. */
void gw_http_init(struct gateway *gw);
/* limit: connections open at once, at most. */
int gw_listener_start(struct gw_listener *l, unsigned threads,
		      unsigned timeout_s, unsigned limit);
void gw_listener_quiesce(struct gw_listener *l);
void gw_listener_stop(struct gw_listener *l);

/* ------------------------------------------------------------ requests */

/* What a request is answered with. body is malloc'd (NUL-terminated, not
 * counted); NULL with a status: an empty body. */
struct gw_answer {
	unsigned status;
	char *body;
	size_t len;
	bool replayed;
	bool retry_after;
	const char *type;	/* Content-Type; NULL: application/json */
};

/* The identity and call of one POST /agent/execute, checked. */
struct gw_call {
	const struct gw_tool *tool;
	char principal[CARMY_ID_MAX + 1];
	char session[CARMY_ID_MAX + 1];
	char request_id[CARMY_ID_MAX + 1];	/* "" when none */
	size_t principal_len, session_len, request_id_len;
	json_t *args;		/* the arguments (a reference) */
	char *args_json;	/* ... as compact JSON, once the tool runs */
	size_t args_json_len;
	char *args_mp;		/* ... as msgpack */
	size_t args_mp_len;
	char *meta_mp;		/* fingerprint headers (msgpack) */
	size_t meta_mp_len;
};

void gw_call_free(struct gw_call *c);

/* A request whose tool runs on a thread of its own, or whose begin waits
 * for carmyd there. The connection is suspended meanwhile; done() resumes
 * it with the answer. Each holds one of the gateway's slots (execute.c),
 * given back just before done(). */
struct gw_exec {
	struct gateway *gw;
	struct gw_call call;
	bool begin_here;		/* begin on the thread (carmy_begin) */
	struct gw_handle *h;		/* NULL: no reservation */
	struct gw_handle *waiter;	/* Prefer: wait: to wait on, first */
	int wait_ms;
	struct carmy_reservation r;
	char execution_id[CARMY_EXECUTION_ID_LEN + 1];
	struct gw_answer *answer;	/* where the answer goes */
	void (*done)(void *arg);
	void *arg;
	/* A result still to record once the call is answered (record.c):
	 * its bytes (malloc'd), their length, CARMY_STATUS_* and the last
	 * answer to it (CARMY_ESTORE or CARMY_EUNAVAILABLE). */
	char *owed;
	size_t owed_len;
	int owed_status;
	int owed_rc;
};

/* execute.c. A POST /agent/execute, read whole: the principal
 * authenticated (NULL: none), the headers that name the call (NULL:
 * absent), and header() reads any other request header: its first value
 * (NULL: absent), and into *n (unless n is NULL) how many times the
 * request gives it. */
struct gw_request {
	struct gateway *gw;
	const char *principal;
	const char *session;	/* Carmy-Session */
	const char *key;	/* Idempotency-Key */
	const char *prefer;	/* Prefer */
	const char *(*header)(void *hcls, const char *name, unsigned *n);
	void *hcls;
	const char *body;
	size_t len;
};

/*
 * Answer rq: 0 with *a filled, or 1 with *xp, an execution whose tool is
 * to run: the caller suspends its connection, then gw_exec_start(*xp).
 * done(arg) is called, on another thread, once *a is filled; the caller
 * then sends it.
 */
int gw_execute(const struct gw_request *rq, struct gw_answer *a,
	       void (*done)(void *arg), void *arg, struct gw_exec **xp);
void gw_exec_start(struct gw_exec *x);
/* A header value as RFC 9110 5.5 has it, without leading and trailing
 * whitespace (SP, HTAB): where in v it starts, and into *len its length
 * (0 for blanks alone). Used wherever a value names a call. */
const char *gw_field_trim(const char *v, size_t *len);

/* run.c. The counters the gateway stops on, and its stopping flag. */
void gw_run_init(struct gateway *gw);
/* Count a thread that will answer a suspended connection (d 1), or one
 * that has (d -1): the gateway stops only once none runs. execution: one
 * of POST /agent/execute (counted in /metrics). */
void gw_running_add(struct gateway *gw, int d, bool execution);
/* Count a request routed (http.c) until its answer is sent (end): the
 * gateway stops only once none is counted. begin counts it whatever;
 * it returns false once the gateway stops, and the request is then to
 * be refused, at once. */
bool gw_request_begin(struct gateway *gw);
void gw_request_end(struct gateway *gw);
/* SIGTERM: no request routed from now on is served (gw_request_begin),
 * and a wait of gw_stop_sleep() ends. */
void gw_stop(struct gateway *gw);
/* Until every request counted is answered and every thread counted has
 * ended; after gw_stop(), that takes a bounded time. */
void gw_wait_idle(struct gateway *gw);
/* Sleep ms, or less if the gateway stops: true once it stops. */
bool gw_stop_sleep(struct gateway *gw, unsigned ms);
/* One of the --max-running slots: true if taken, false if all are (with
 * force, taken even then). Lock-free; any thread. */
bool gw_slot_take(struct gateway *gw, bool force);
void gw_slot_put(struct gateway *gw);

/* record.c. Record x's answer (when it has a reservation) as status. A
 * store that cannot record it now (CARMY_ESTORE), or a carmyd not back
 * from a restart yet (CARMY_EUNAVAILABLE), is asked again for
 * GW_RECORD_WAIT_MS; if it still has not recorded it, the answer becomes
 * EXECUTION_UNCERTAIN (running) and x->owed holds the result, for
 * gw_exec_record_owed() once that answer is sent. Any other failure
 * (carmyd back without our calls: DISCONNECTED) makes the answer
 * gw_exec_unrecorded()'s. */
void gw_exec_record(struct gw_exec *x, int status);
/* x's tool ran and its result is not recorded (why: a code's name, or
 * "out of memory"): answer 409 EXECUTION_UNCERTAIN, state interrupted
 * (not retryable: the agent is to reconcile), as its retries will be. */
void gw_exec_unrecorded(struct gw_exec *x, const char *why);
/* The gateway lost track of x's tool (what: how), whose effect may or
 * may not have happened: the call is made uncertain now
 * (carmy_abandon()), for an operator to resolve, and answered 409
 * EXECUTION_UNCERTAIN, interrupted, as its retries will be. */
void gw_exec_lost(struct gw_exec *x, const char *what);
/* x->owed, asked again until the store records it, carmyd gives up the
 * handle, or the gateway stops (the call then turns interrupted). Does
 * not touch x->answer. */
void gw_exec_record_owed(struct gw_exec *x);
/* The tool provably did not run (why): release the reservation, and
 * answer so. */
void gw_exec_not_started(struct gw_exec *x, const char *why);

/* command.c, upstream.c: run x's tool; fill *x->answer and record it (or
 * release the reservation when the tool provably did not run). */
void gw_command_run(struct gw_exec *x);
void gw_url_run(struct gw_exec *x);
/* command.c. Before any command runs, and before any thread: make the
 * gateway a child subreaper, to which what a dying watcher leaves comes,
 * to be killed. 0 or -errno. */
int gw_command_init(struct gateway *gw);
/* On SIGCHLD (main.c, the thread that reads the signals): reap the
 * watchers let go that have ended, and kill what came to the gateway. */
void gw_command_reap(struct gateway *gw);

/* ------------------------------------------------------------ answer.c */

/* An error body, {"error":{...}} with execution_id and state when
 * exec_id is not NULL. code names a row of answer.c's table. */
void gw_answer_error(struct gw_answer *a, const char *code,
		     const char *message, const char *exec_id,
		     const char *state);
/* o as compact JSON and a newline, malloc'd (NUL-terminated, not counted
 * in *len); NULL when out of memory. */
char *gw_json_line(const json_t *o, size_t *len);
/* Any other answer: o (taken) as the body. */
void gw_answer_json(struct gw_answer *a, unsigned status, json_t *o);
/* An execution's own answer: status CARMY_STATUS_*, data for completed
 * (borrowed), else the error code and message. Returns 0 or -ENOMEM. */
int gw_answer_execution(struct gw_answer *a, const char *exec_id,
			int status, json_t *data, const char *code,
			const char *message);
/* A tool's output (len bytes at buf): completed with it as data if it is
 * one JSON value, else failed (whose names it in the message). *status
 * gets the CARMY_STATUS_*. Returns 0 or -ENOMEM. */
int gw_answer_output(struct gw_answer *a, const char *exec_id,
		     const char *buf, size_t len, const char *whose,
		     int *status);
/* The answer of a result larger than carmyd's --max-result. */
void gw_answer_too_large(struct gw_answer *a, const char *exec_id);
/* The HTTP status of a recorded CARMY_STATUS_*. */
unsigned gw_status_http(int status);
/* A recorded result answered again (r holds a CARMY_REPLAY). Takes
 * r->result. */
void gw_answer_replay(struct gw_answer *a, struct carmy_reservation *r);
/* The answer for a libcarmy code from begin (r: the reservation). */
void gw_answer_code(struct gw_answer *a, int code,
		    const struct carmy_reservation *r);
void gw_answer_free(struct gw_answer *a);

/* Append n bytes at p to the malloc'd *buf (*len used, *cap allocated,
 * 256 bytes at first, doubled as needed: small buffers stay in malloc's
 * per-thread cache), NUL-terminated; 0 or -1 (out of memory, *buf
 * unchanged). */
int gw_append(char **buf, size_t *len, size_t *cap, const void *p,
	      size_t n);
/* Execution ids for calls without a reservation. */
int gw_random_execution_id(char out[CARMY_EXECUTION_ID_LEN + 1]);

#endif /* CARMY_GATEWAY_H */
