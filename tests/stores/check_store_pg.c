/*
 * check_store_pg.c - the PostgreSQL store (stores/pg/) on its own:
 * the built plugin, dlopen'ed as carmyd does, driven through its ops table
 * against a real throwaway cluster (tests/stores/store_pg.test starts one
 * and exports PG_CONNINFO; without it this program fails, it never skips).
 *
 * What must hold is the contract's (include/carmy_store.h, "Shared
 * stores"): a RESERVE is one atomic step against every other instance
 * (exactly one of N racing reservations is recorded, every other is told
 * the winner through taken()), a retried request is recognised, a result
 * is never overwritten, load() hands over this instance's executions only,
 * with every field, and refuses a row it would not have written. A request
 * is answered only after its transaction committed: a second connection
 * sees the row from inside done(). And what a store shared with others
 * owes them and itself: a wait on another session's lock is bounded and
 * fails only the request that waited; only the instance that made an
 * execution settles it, and an exec id a client borrowed from another row
 * fails that request alone; one carmyd per instance name; a reservation
 * reported failed whose commit may have happened is withdrawn before any
 * other request; an unreachable server costs a failed request no wait;
 * and batches reserving shared identities in opposite orders do not
 * deadlock.
 *
 * Every test starts from no table at all (the fixture drops it), so tests
 * are independent and each open creates the schema again. Every wait is on
 * a condition variable with a deadline, never a sleep.
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <check.h>
#include <libpq-fe.h>

#include "carmy.h"
#include "carmy_store.h"

#define WAIT_S 60		/* deadline for one answer */
#define BOUNDED_S 15		/* for an answer the store's own timeouts bound */
#define RESULT_CAP 1024		/* result bytes a waiter keeps */
#define SEEN_MAX 64		/* executions a test's load() may hand over */
#define RACE_THREADS 8
#define RACE_IDS 200
#define GROUP_N 500
#define OUTAGE_N 20		/* requests failed during one backoff */
#define DL_ROUNDS 8

static const struct carmy_store_ops *ops;
static const char *conninfo;	/* PG_CONNINFO */
static PGconn *db;		/* the test's own connection */

/* ------------------------------------------------------------ helpers */

/* Fault injection: the plugin's PQcmdTuples(), PQgetisnull() and
 * PQnfields() are these (the program exports them,
 * -Wl,--export-dynamic-symbol, and comes first in the lookup order).
 * While skewed_tags is above 0, a command tag's row count reads "2";
 * while skewed_nulls is, the column (skewed_row, skewed_col) of a result
 * reads NULL; while skewed_fields is, a result has one column more than
 * it has: answers no statement of the store gives, read after the server
 * ran the statement. Each skew is taken once; setup() clears them. Only
 * the store reads these while a skew is set: the test waits for its
 * answer meanwhile. */
static int skewed_tags, skewed_nulls, skewed_row, skewed_col, skewed_fields;

static bool take_skew(int *left)
{
	int n = __atomic_load_n(left, __ATOMIC_ACQUIRE);

	while (n > 0)
		if (__atomic_compare_exchange_n(left, &n, n - 1, false,
						__ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			return true;
	return false;
}

/* libpq's own f, found after this program, looked up once into *fn. */
static void *next_fn(void **fn, const char *f)
{
	void *p = __atomic_load_n(fn, __ATOMIC_ACQUIRE);

	if (p == NULL) {
		p = dlsym(RTLD_NEXT, f);
		ck_assert_msg(p != NULL, "dlsym(%s): %s", f, dlerror());
		__atomic_store_n(fn, p, __ATOMIC_RELEASE);
	}
	return p;
}

char *PQcmdTuples(PGresult *res)
{
	static char two[] = "2";
	static void *fn;
	char *(*real)(PGresult *);

	if (take_skew(&skewed_tags))
		return two;
	*(void **)&real = next_fn(&fn, "PQcmdTuples");
	return real(res);
}

int PQgetisnull(const PGresult *res, int row, int col)
{
	static void *fn;
	int (*real)(const PGresult *, int, int);

	if (row == __atomic_load_n(&skewed_row, __ATOMIC_ACQUIRE) &&
	    col == __atomic_load_n(&skewed_col, __ATOMIC_ACQUIRE) &&
	    take_skew(&skewed_nulls))
		return 1;
	*(void **)&real = next_fn(&fn, "PQgetisnull");
	return real(res, row, col);
}

int PQnfields(const PGresult *res)
{
	static void *fn;
	int (*real)(const PGresult *);

	*(void **)&real = next_fn(&fn, "PQnfields");
	return real(res) + take_skew(&skewed_fields);
}

/* The next read of column col of row row of a result is NULL. */
static void skew_null_at(int row, int col)
{
	__atomic_store_n(&skewed_row, row, __ATOMIC_RELEASE);
	__atomic_store_n(&skewed_col, col, __ATOMIC_RELEASE);
	__atomic_store_n(&skewed_nulls, 1, __ATOMIC_RELEASE);
}

static int skews_left(void)
{
	return __atomic_load_n(&skewed_tags, __ATOMIC_ACQUIRE) +
	       __atomic_load_n(&skewed_nulls, __ATOMIC_ACQUIRE) +
	       __atomic_load_n(&skewed_fields, __ATOMIC_ACQUIRE);
}

static PGconn *db_connect(const char *extra)
{
	char ci[1024];
	PGconn *c;

	snprintf(ci, sizeof(ci), "%s application_name=check_store_pg %s",
		 conninfo, extra);
	c = PQconnectdb(ci);
	ck_assert_msg(PQstatus(c) == CONNECTION_OK, "connect: %s",
		      PQerrorMessage(c));
	return c;
}

/* Run sql on c; it must succeed. */
static void sql(PGconn *c, const char *q)
{
	PGresult *r = PQexec(c, q);
	ExecStatusType st = PQresultStatus(r);

	ck_assert_msg(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK,
		      "%s: %s", q, PQerrorMessage(c));
	PQclear(r);
}

/* The one integer value sql yields. */
static long sql_long(PGconn *c, const char *q)
{
	PGresult *r = PQexec(c, q);
	long v;

	ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1
		      && !PQgetisnull(r, 0, 0), "%s: %s", q,
		      PQerrorMessage(c));
	v = atol(PQgetvalue(r, 0, 0));
	PQclear(r);
	return v;
}

static void setup(void)
{
	__atomic_store_n(&skewed_tags, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&skewed_nulls, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&skewed_fields, 0, __ATOMIC_RELEASE);
	conninfo = getenv("PG_CONNINFO");
	ck_assert_msg(conninfo != NULL && conninfo[0] != '\0',
		      "PG_CONNINFO is not set: run tests/stores/store_pg.test");
	db = db_connect("");
	sql(db, "SET client_min_messages = warning");
	/* A lost-commit test that failed half way leaves commits waiting
	 * for a standby: never the next test's. */
	if (sql_long(db, "SELECT count(*) FROM pg_file_settings WHERE name "
		     "= 'synchronous_standby_names'") > 0) {
		sql(db, "ALTER SYSTEM RESET synchronous_standby_names");
		sql(db, "SELECT pg_reload_conf()");
	}
	sql(db, "DROP TABLE IF EXISTS carmy_executions");
}

static void stop_or_go(int sig);

static void teardown(void)
{
	stop_or_go(SIGCONT);
	PQfinish(db);
	db = NULL;
}

/* Open a store with ARGS "instance=NAME [connections=N ]CONNINFO EXTRA"
 * (n 0: the store's default); it must work. */
static void *open_n(const char *name, unsigned n, const char *extra)
{
	char args[1024], conns[32] = "", err[512] = "";
	void *st = NULL;
	int rc;

	if (n > 0)
		snprintf(conns, sizeof(conns), "connections=%u ", n);
	snprintf(args, sizeof(args), "instance=%s %s%s %s", name, conns,
		 conninfo, extra);
	rc = ops->open(args, &st, err, sizeof(err));
	ck_assert_msg(rc == 0, "open %s: %d %s", name, rc, err);
	ck_assert_ptr_nonnull(st);
	return st;
}

/* With the store's default number of connections, or
 * CARMY_PG_CONNECTIONS's (to run the tests with another). */
static void *open_as(const char *name, const char *extra)
{
	const char *n = getenv("CARMY_PG_CONNECTIONS");

	return open_n(name, n != NULL ? (unsigned)atoi(n) : 0, extra);
}

/* With one connection: a test of one worker's batches (how it groups,
 * orders, holds and runs again what is queued behind a request it is
 * busy with), which several workers would share out between them. */
static void *open_one(const char *name, const char *extra)
{
	return open_n(name, 1, extra);
}

/* One execution the test makes. */
struct ex {
	char principal[16];
	char id[CARMY_STORE_ID_MAX + 1];
	uint8_t exec[16];
	uint8_t fp[16];
	uint8_t raw[16];
	uint32_t pid;
	uint64_t started_ns;
	int32_t status;
	int32_t result_code;
	uint8_t result[64];
	uint32_t result_len;
	/* The call: tool_kept of tool_len bytes, args_kept of args_len. */
	uint8_t tool[CARMY_STORE_TOOL_MAX];
	uint32_t tool_kept, tool_len;
	uint8_t args[CARMY_STORE_ARGS_MAX];
	uint32_t args_kept, args_len;
	uint8_t format;
};

static unsigned exec_seq;

/* Execution of identity (principal, "session", id), with a fresh exec id
 * and a result with every kind of byte in it. */
static void make_ex(struct ex *x, const char *principal, const char *id)
{
	unsigned seq = __atomic_add_fetch(&exec_seq, 1, __ATOMIC_SEQ_CST);

	memset(x, 0, sizeof(*x));
	snprintf(x->principal, sizeof(x->principal), "%s", principal);
	snprintf(x->id, sizeof(x->id), "%s", id);
	for (int k = 0; k < 16; k++) {
		x->exec[k] = (uint8_t)(0xe0 + k);
		x->fp[k] = (uint8_t)(seq * 7 + k);
		x->raw[k] = (uint8_t)(seq * 13 + k + 1);
	}
	memcpy(x->exec, &seq, sizeof(seq));
	x->pid = 4000000000u - seq;	/* above INT32_MAX: fits uint32 */
	x->started_ns = 1700000000000000000ull + seq;
	x->status = CARMY_STATUS_COMPLETED;
	x->result_len = 20;
	for (uint32_t i = 0; i < x->result_len; i++)
		x->result[i] = (uint8_t)(seq + i * 51);	/* NULs, 0xff... */
	x->result[3] = 0;
	/* Every other call cut where carmyd cuts it, the rest whole. */
	x->tool_kept = x->tool_len = (uint32_t)snprintf((char *)x->tool,
							sizeof(x->tool),
							"tool-%u", seq);
	x->args_kept = seq % 2 ? CARMY_STORE_ARGS_MAX : 7;
	x->args_len = seq % 2 ? 300 + seq : 7;
	for (uint32_t i = 0; i < x->args_kept; i++)
		x->args[i] = (uint8_t)(seq * 3 + i);
	x->format = (uint8_t)(seq % 2);
}

static void record_of(const struct ex *x, struct carmy_store_record *r)
{
	memset(r, 0, sizeof(*r));
	r->part[0] = (const uint8_t *)x->principal;
	r->len[0] = (uint16_t)strlen(x->principal);
	r->part[1] = (const uint8_t *)"session";
	r->len[1] = 7;
	r->part[2] = (const uint8_t *)x->id;
	r->len[2] = (uint16_t)strlen(x->id);
	memcpy(r->fingerprint, x->fp, 16);
	memcpy(r->rawprint, x->raw, 16);
	memcpy(r->exec, x->exec, 16);
	r->pid = x->pid;
	r->started_ns = x->started_ns;
	r->finished_ns = x->started_ns + 1000;
	r->status = x->status;
	r->result_code = x->result_code;
	r->result = x->result;
	r->result_len = x->result_len;
	r->tool = x->tool;
	r->tool_kept = x->tool_kept;
	r->tool_len = x->tool_len;
	r->args = x->args;
	r->args_kept = x->args_kept;
	r->args_len = x->args_len;
	r->result_format = x->format;
}

/* A request in flight and what the store said to it. Callbacks run on the
 * store's thread: they record, the test's thread asserts. */
struct waiter {
	struct carmy_store_req req;
	struct carmy_store_record rec;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int ndone;		/* done() calls */
	int rc;
	int ntaken;
	bool taken_after_done;
	/* done()'s CARMY_STORE_ANSWERS_FOLLOW, and its place among every
	 * answer of the test (from 1) */
	bool follow;
	unsigned seq;
	struct carmy_store_record standing;	/* points into the below */
	uint8_t part[3][CARMY_STORE_ID_MAX];
	uint8_t result[RESULT_CAP];
	uint8_t tool[CARMY_STORE_TOOL_MAX];
	uint8_t args[CARMY_STORE_ARGS_MAX];
	bool result_cut;
	/* Set: done() asks this connection whether req's exec is there,
	 * i.e. committed, into visible. */
	PGconn *check;
	long visible;
};

static long rows_of_exec(PGconn *c, const uint8_t exec[16])
{
	const char *v[1] = { (const char *)exec };
	int len[1] = { 16 }, fmt[1] = { 1 };
	PGresult *r = PQexecParams(c, "SELECT count(*) FROM carmy_executions "
				   "WHERE exec = $1", 1, NULL, v, len, fmt, 0);
	long n = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 ?
		 atol(PQgetvalue(r, 0, 0)) : -1;

	PQclear(r);
	return n;
}

static unsigned answers;	/* done() calls, as on_done() numbers them */

static void on_done(struct carmy_store_req *req, int rc)
{
	struct waiter *w = req->cookie;
	long visible = w->check ? rows_of_exec(w->check, w->rec.exec) : 0;

	pthread_mutex_lock(&w->lock);
	w->follow = req->flags & CARMY_STORE_ANSWERS_FOLLOW;
	w->seq = __atomic_add_fetch(&answers, 1, __ATOMIC_RELAXED);
	w->visible = visible;
	w->rc = rc;
	w->done = true;
	w->ndone++;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* r's call, borrowed, copied into tool and args (of the sizes the store
 * keeps at most), which r then points into. */
static void keep_call(struct carmy_store_record *r, uint8_t *tool,
		      uint8_t *args)
{
	ck_assert_uint_le(r->tool_kept, CARMY_STORE_TOOL_MAX);
	ck_assert_uint_le(r->args_kept, CARMY_STORE_ARGS_MAX);
	if (r->tool_kept > 0)
		memcpy(tool, r->tool, r->tool_kept);
	if (r->args_kept > 0)
		memcpy(args, r->args, r->args_kept);
	r->tool = tool;
	r->args = args;
}

static void on_taken(struct carmy_store_req *req,
		     const struct carmy_store_record *r)
{
	struct waiter *w = req->cookie;

	pthread_mutex_lock(&w->lock);
	w->ntaken++;
	w->taken_after_done |= w->done;
	w->standing = *r;
	for (int k = 0; k < 3; k++) {
		memcpy(w->part[k], r->part[k], r->len[k]);
		w->standing.part[k] = w->part[k];
	}
	w->result_cut = r->result_len > RESULT_CAP;
	if (!w->result_cut && r->result_len > 0)
		memcpy(w->result, r->result, r->result_len);
	w->standing.result = w->result;
	keep_call(&w->standing, w->tool, w->args);
	pthread_mutex_unlock(&w->lock);
}

static void waiter_init(struct waiter *w, enum carmy_store_op op,
			const struct ex *x)
{
	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	record_of(x, &w->rec);
	w->req.op = op;
	w->req.rec = &w->rec;
	w->req.done = on_done;
	w->req.cookie = w;
	w->req.taken = op == CARMY_STORE_RESERVE ? on_taken : NULL;
}

static void waiter_destroy(struct waiter *w)
{
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
}

/* Wait up to secs until w is answered; its rc. */
static int wait_within(struct waiter *w, int secs)
{
	struct timespec dl;
	int rc = 0, ans;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += secs;
	pthread_mutex_lock(&w->lock);
	while (!w->done && rc == 0)
		rc = pthread_cond_timedwait(&w->cond, &w->lock, &dl);
	ans = w->rc;
	pthread_mutex_unlock(&w->lock);
	ck_assert_msg(rc == 0, "no answer within %d s", secs);
	return ans;
}

static int wait_done(struct waiter *w)
{
	return wait_within(w, WAIT_S);
}

static bool is_done(struct waiter *w)
{
	bool d;

	pthread_mutex_lock(&w->lock);
	d = w->done;
	pthread_mutex_unlock(&w->lock);
	return d;
}

/* Submit op for x and wait for its answer; w (may be NULL) keeps what
 * the store said. */
static int op_wait(void *st, enum carmy_store_op op, const struct ex *x,
		   struct waiter *w)
{
	struct waiter mine;
	int rc;

	if (w == NULL)
		w = &mine;
	waiter_init(w, op, x);
	ops->submit(st, &w->req);
	rc = wait_done(w);
	ck_assert_msg(!w->taken_after_done, "taken() came after done()");
	if (w == &mine)
		ck_assert_int_eq(w->ntaken, 0);
	waiter_destroy(w);
	return rc;
}

static int reserve(void *st, const struct ex *x, struct waiter *w)
{
	return op_wait(st, CARMY_STORE_RESERVE, x, w);
}

/* A RESERVE of x, submitted again for as long as the store answers that
 * the database cannot take it (a backoff after a failed reconnect, the
 * instance's name held elsewhere), up to WAIT_S. */
static int reserve_when_back(void *st, const struct ex *x, struct waiter *w)
{
	time_t end = time(NULL) + WAIT_S;
	int rc;

	while ((rc = reserve(st, x, w)) == -ECONNREFUSED || rc == -EBUSY)
		ck_assert_msg(time(NULL) < end, "the store still answers %d "
			      "after %d s", rc, WAIT_S);
	return rc;
}

/* Poll q on c (outside a transaction, so each answer is fresh) until it
 * counts something, up to WAIT_S. */
static void wait_until(PGconn *c, const char *q)
{
	time_t end = time(NULL) + WAIT_S;

	while (sql_long(c, q) == 0)
		ck_assert_msg(time(NULL) < end, "not within %d s: %s", WAIT_S,
			      q);
}

/* Wait until the backend named app waits on a lock. */
static void wait_lock_wait(const char *app)
{
	char q[256];

	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_locks l JOIN "
		 "pg_stat_activity s USING (pid) WHERE NOT l.granted AND "
		 "s.application_name = '%s'", app);
	wait_until(db, q);
}

/* Insert on c (in whatever transaction it has open) a running row of
 * another instance for (principal, "session", id), with exec if not NULL,
 * else a random one. */
static void insert_row(PGconn *c, const char *principal, const char *id,
		       const uint8_t *exec)
{
	const char *v[3] = { principal, id, (const char *)exec };
	int len[3] = { 0, 0, 16 }, fmt[3] = { 0, 0, 1 };
	PGresult *r = PQexecParams(c, "INSERT INTO carmy_executions "
		"(principal, session, request_id, exec, instance, fingerprint, "
		"rawprint, pid, started_ns, state) VALUES (convert_to($1, "
		"'UTF8'), 'session', convert_to($2, 'UTF8'), coalesce($3, "
		"decode(md5(random()::text), 'hex')), 'other', "
		"decode(repeat('00', 16), 'hex'), decode(repeat('00', 16), "
		"'hex'), 1, 1, 1)", 3, NULL, v, len, fmt, 0);

	ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "insert %s: %s",
		      id, PQerrorMessage(c));
	PQclear(r);
}

/* The advisory lock key of gate_worker(). */
#define GATE_KEY "7217"

/* A trigger under which the insert of request_id "sleep-MS-..." sleeps MS
 * milliseconds, and that of "gate-..." waits, without a lock_timeout, for
 * the advisory lock GATE_KEY, in whichever session makes it. */
static void sleepy_inserts(void)
{
	sql(db, "CREATE OR REPLACE FUNCTION carmy_test_sleep() RETURNS "
	    "trigger LANGUAGE plpgsql AS $$ BEGIN IF convert_from("
	    "NEW.request_id, 'UTF8') LIKE 'sleep-%' THEN PERFORM pg_sleep("
	    "split_part(convert_from(NEW.request_id, 'UTF8'), '-', 2)::int "
	    "/ 1000.0); ELSIF convert_from(NEW.request_id, 'UTF8') LIKE "
	    "'gate-%' THEN PERFORM set_config('lock_timeout', '0', true); "
	    "PERFORM pg_advisory_xact_lock_shared(" GATE_KEY "); END IF; "
	    "RETURN NEW; END $$");
	sql(db, "CREATE TRIGGER carmy_test_sleep BEFORE INSERT ON "
	    "carmy_executions FOR EACH ROW EXECUTE FUNCTION "
	    "carmy_test_sleep()");
}

/* Hold st's worker (its backend named app) in a batch of its own, a
 * RESERVE whose insert sleeps (sleepy_inserts), so that what is submitted
 * next queues up into one batch. w, x: the sleeper's, to wait on later. */
static void hold_worker(void *st, const char *app, struct waiter *w,
			struct ex *x)
{
	char id[64], q[256];

	snprintf(id, sizeof(id), "sleep-500-%u", exec_seq);
	make_ex(x, "hold", id);
	waiter_init(w, CARMY_STORE_RESERVE, x);
	ops->submit(st, &w->req);
	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_stat_activity WHERE "
		 "application_name = '%s' AND wait_event = 'PgSleep'", app);
	wait_until(db, q);
}

/* A RESOLVE's record: as committed with its result, by uid 1001 pid 777,
 * or as not committed. */
static void as_resolved(struct carmy_store_record *rec, bool committed)
{
	rec->state = committed ? CARMY_STORE_COMPLETED : 0;
	rec->resolved_ns = 1700000000123456789ull;
	rec->resolved_uid = 1001;
	rec->resolved_pid = 777;
}

/* A RESOLVE of x (as_resolved()). */
static int resolve(void *st, const struct ex *x, bool committed)
{
	struct waiter w;
	int rc;

	waiter_init(&w, CARMY_STORE_RESOLVE, x);
	as_resolved(&w.rec, committed);
	ops->submit(st, &w.req);
	rc = wait_done(&w);
	waiter_destroy(&w);
	return rc;
}

/* What load() handed over. */
struct seen {
	int n;
	struct carmy_store_record rec[SEEN_MAX];
	uint8_t part[SEEN_MAX][3][CARMY_STORE_ID_MAX];
	uint8_t result[SEEN_MAX][RESULT_CAP];
	uint8_t tool[SEEN_MAX][CARMY_STORE_TOOL_MAX];
	uint8_t args[SEEN_MAX][CARMY_STORE_ARGS_MAX];
};

static int collect(void *arg, const struct carmy_store_record *r)
{
	struct seen *s = arg;
	int i = s->n;

	ck_assert_int_lt(i, SEEN_MAX);
	ck_assert_uint_le(r->result_len, RESULT_CAP);
	s->rec[i] = *r;
	for (int k = 0; k < 3; k++) {
		memcpy(s->part[i][k], r->part[k], r->len[k]);
		s->rec[i].part[k] = s->part[i][k];
	}
	if (r->result_len > 0)
		memcpy(s->result[i], r->result, r->result_len);
	s->rec[i].result = s->result[i];
	keep_call(&s->rec[i], s->tool[i], s->args[i]);
	s->n++;
	return 0;
}

static const struct carmy_store_record *seen_exec(const struct seen *s,
						  const struct ex *x)
{
	for (int i = 0; i < s->n; i++)
		if (memcmp(s->rec[i].exec, x->exec, 16) == 0)
			return &s->rec[i];
	return NULL;
}

/* r is x's execution, as reserved: identity, prints, pid, start, call. */
static void assert_reserved_as(const struct carmy_store_record *r,
			       const struct ex *x)
{
	ck_assert_uint_eq(r->len[0], strlen(x->principal));
	ck_assert_mem_eq(r->part[0], x->principal, r->len[0]);
	ck_assert_uint_eq(r->len[1], 7);
	ck_assert_mem_eq(r->part[1], "session", 7);
	ck_assert_uint_eq(r->len[2], strlen(x->id));
	ck_assert_mem_eq(r->part[2], x->id, r->len[2]);
	ck_assert_mem_eq(r->exec, x->exec, 16);
	ck_assert_mem_eq(r->fingerprint, x->fp, 16);
	ck_assert_mem_eq(r->rawprint, x->raw, 16);
	ck_assert_uint_eq(r->pid, x->pid);
	ck_assert_uint_eq(r->started_ns, x->started_ns);
	ck_assert_uint_eq(r->tool_kept, x->tool_kept);
	ck_assert_uint_eq(r->tool_len, x->tool_len);
	ck_assert_mem_eq(r->tool, x->tool, x->tool_kept);
	ck_assert_uint_eq(r->args_kept, x->args_kept);
	ck_assert_uint_eq(r->args_len, x->args_len);
	ck_assert_mem_eq(r->args, x->args, x->args_kept);
	ck_assert_uint_eq(r->result_format, x->format);
}

/* r is x's execution, completed with x's result. */
static void assert_completed_as(const struct carmy_store_record *r,
				const struct ex *x)
{
	assert_reserved_as(r, x);
	ck_assert_int_eq(r->state, CARMY_STORE_COMPLETED);
	ck_assert_uint_eq(r->finished_ns, x->started_ns + 1000);
	ck_assert_int_eq(r->status, x->status);
	ck_assert_int_eq(r->result_code, x->result_code);
	ck_assert_uint_eq(r->result_len, x->result_len);
	ck_assert_mem_eq(r->result, x->result, x->result_len);
}

/* ------------------------------------------------------------ tests */

struct opener {
	pthread_barrier_t *go;
	const char *name;
	void *st;
	int rc;
	char err[512];
};

static void *open_thread(void *arg)
{
	struct opener *o = arg;
	char args[1024];

	snprintf(args, sizeof(args), "instance=%s %s", o->name, conninfo);
	pthread_barrier_wait(o->go);
	o->rc = ops->open(args, &o->st, o->err, sizeof(o->err));
	return NULL;
}

START_TEST(test_open_creates_the_schema_even_when_two_instances_race)
{
	/* CREATE TABLE IF NOT EXISTS alone fails one of two racing
	 * creators now and then: a few rounds to catch it. */
	for (int round = 0; round < 8; round++) {
		pthread_barrier_t go;
		struct opener o[2] = { { .name = "a" }, { .name = "b" } };
		pthread_t t[2];

		sql(db, "DROP TABLE IF EXISTS carmy_executions");
		pthread_barrier_init(&go, NULL, 2);
		for (int i = 0; i < 2; i++) {
			o[i].go = &go;
			ck_assert_int_eq(pthread_create(&t[i], NULL,
							open_thread, &o[i]), 0);
		}
		for (int i = 0; i < 2; i++)
			pthread_join(t[i], NULL);
		pthread_barrier_destroy(&go);
		for (int i = 0; i < 2; i++) {
			ck_assert_msg(o[i].rc == 0, "round %d: open %s: %d %s",
				      round, o[i].name, o[i].rc, o[i].err);
			ops->close(o[i].st);
		}
	}
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM pg_indexes WHERE "
			 "tablename = 'carmy_executions' AND indexname = "
			 "'carmy_executions_instance'"), 1);
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM "
			 "information_schema.columns WHERE table_name = "
			 "'carmy_executions'"), 22);
}
END_TEST

START_TEST(test_reserve_of_a_vacant_identity_is_recorded_before_done)
{
	void *a = open_as("a", "");
	PGconn *check = db_connect("");
	struct waiter w;
	struct ex x;

	make_ex(&x, "p", "vacant");
	waiter_init(&w, CARMY_STORE_RESERVE, &x);
	w.check = check;
	ops->submit(a, &w.req);
	ck_assert_int_eq(wait_done(&w), 0);
	ck_assert_int_eq(w.ntaken, 0);
	/* Seen from another connection inside done(): committed first. */
	ck_assert_int_eq(w.visible, 1);
	waiter_destroy(&w);
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_executions "
			 "WHERE instance = 'a' AND state = 1 AND principal = "
			 "'p' AND request_id = 'vacant'"), 1);
	PQfinish(check);
	ops->close(a);
}
END_TEST

START_TEST(test_reserve_of_a_held_identity_is_taken_running_then_completed)
{
	void *a = open_as("a", ""), *b = open_as("b", "");
	struct ex x, y, z;
	struct waiter w;

	make_ex(&x, "p", "held");
	make_ex(&y, "p", "held");
	make_ex(&z, "p", "held");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);

	/* Running on a: b is told, and records nothing. */
	ck_assert_int_eq(reserve(b, &y, &w), 0);
	ck_assert_int_eq(w.ntaken, 1);
	assert_reserved_as(&w.standing, &x);
	ck_assert_int_eq(w.standing.state, CARMY_STORE_RUNNING);
	ck_assert_int_eq(rows_of_exec(db, y.exec), 0);

	/* Completed on a: b is told its result, to the byte. */
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &x, NULL), 0);
	ck_assert_int_eq(reserve(b, &z, &w), 0);
	ck_assert_int_eq(w.ntaken, 1);
	ck_assert(!w.result_cut);
	assert_completed_as(&w.standing, &x);
	ck_assert_int_eq(rows_of_exec(db, z.exec), 0);

	/* And a itself, reserving again with a new exec, likewise. */
	make_ex(&z, "p", "held");
	ck_assert_int_eq(reserve(a, &z, &w), 0);
	ck_assert_int_eq(w.ntaken, 1);
	assert_completed_as(&w.standing, &x);
	ops->close(b);
	ops->close(a);
}
END_TEST

START_TEST(test_reserve_retried_with_its_own_exec_is_recorded_not_taken)
{
	void *a = open_as("a", "");
	struct ex x;

	make_ex(&x, "p", "retried");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	/* The batch written again after a lost answer: its own row. */
	ck_assert_int_eq(reserve(a, &x, NULL), 0);	/* asserts no taken */
	ck_assert_int_eq(rows_of_exec(db, x.exec), 1);
	/* Completed in between, still its own. */
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &x, NULL), 0);
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	ops->close(a);
}
END_TEST

/* Rows of exec x, instance inst, in state st. */
static long rows_as(const struct ex *x, const char *inst, int st)
{
	const char *v[3] = { (const char *)x->exec, inst, NULL };
	char state[8];
	int len[3] = { 16, 0, 0 }, fmt[3] = { 1, 0, 0 };
	PGresult *r;
	long n;

	snprintf(state, sizeof(state), "%d", st);
	v[2] = state;
	r = PQexecParams(db, "SELECT count(*) FROM carmy_executions WHERE "
			 "exec = $1 AND instance = $2 AND state = $3::int", 3,
			 NULL, v, len, fmt, 0);
	ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
	n = atol(PQgetvalue(r, 0, 0));
	PQclear(r);
	return n;
}

/* Triggers that note, for every row inserted into the table (or stopped
 * by a conflict), its request_id and the statement that sent it, and for
 * every update statement (whether it updated a row or not) the statement,
 * request_id NULL, in the order sent, each with its transaction and its
 * backend: what the store asked of the database. */
static void note_statements(void)
{
	sql(db, "DROP TABLE IF EXISTS carmy_test_sent");
	sql(db, "CREATE TABLE carmy_test_sent (n serial, request_id bytea, "
	    "query text, xact bigint DEFAULT "
	    "pg_current_xact_id()::text::bigint, pid int DEFAULT "
	    "pg_backend_pid())");
	sql(db, "CREATE OR REPLACE FUNCTION carmy_test_sent() RETURNS trigger "
	    "LANGUAGE plpgsql AS $$ BEGIN INSERT INTO carmy_test_sent "
	    "(request_id, query) VALUES (NEW.request_id, current_query()); "
	    "RETURN NEW; END $$");
	sql(db, "CREATE TRIGGER carmy_test_sent BEFORE INSERT ON "
	    "carmy_executions FOR EACH ROW EXECUTE FUNCTION carmy_test_sent()");
	sql(db, "CREATE OR REPLACE FUNCTION carmy_test_sent_update() RETURNS "
	    "trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO carmy_test_sent "
	    "(query) VALUES (current_query()); RETURN NULL; END $$");
	sql(db, "CREATE TRIGGER carmy_test_sent_update AFTER UPDATE ON "
	    "carmy_executions FOR EACH STATEMENT EXECUTE FUNCTION "
	    "carmy_test_sent_update()");
}

/* What the statements noted that match where (an SQL condition on
 * carmy_test_sent) come to: what, an aggregate of them. */
static long noted(const char *what, const char *where)
{
	char q[512];

	snprintf(q, sizeof(q), "SELECT %s FROM carmy_test_sent WHERE %s", what,
		 where);
	return sql_long(db, q);
}

/* How many statements noted for request_id id were of the kind like
 * (a LIKE pattern): the bare insert, or the full statement. */
static long sent(const char *id, const char *like)
{
	char w[256];

	snprintf(w, sizeof(w), "request_id = '%s' AND query LIKE '%s'", id,
		 like);
	return noted("count(*)", w);
}

/* How many update statements noted were of the kind like. */
static long sent_updates(const char *like)
{
	char w[256];

	snprintf(w, sizeof(w), "request_id IS NULL AND query LIKE '%s'", like);
	return noted("count(*)", w);
}

/* In how many transactions the statements noted that match where ran. */
static long xacts(const char *where)
{
	return noted("count(DISTINCT xact)", where);
}

#define BARE "INSERT INTO carmy_executions %ON CONFLICT DO NOTHING"
#define FULL "WITH ins AS (INSERT INTO carmy_executions %"
#define BARE_UPDATE "UPDATE carmy_executions SET state = 2,%"
#define FULL_UPDATE "WITH upd AS (UPDATE carmy_executions %"
/* The set-based forms, reservations' and settles' alike. */
#define BARE_SET "WITH v AS (%) SELECT v_i FROM %"
#define FULL_SET "WITH v AS (%LEFT JOIN carmy_executions AS e%"

/* Whether every statement noted that matches later ran in a transaction
 * after every one that matches earlier (both SQL conditions). */
static bool xacts_after(const char *earlier, const char *later)
{
	char q[768];

	snprintf(q, sizeof(q), "SELECT ((SELECT min(xact) FROM carmy_test_sent "
		 "WHERE %s) > (SELECT max(xact) FROM carmy_test_sent WHERE %s))"
		 "::int", later, earlier);
	return sql_long(db, q) == 1;
}

/* A RESERVE of its own goes as the bare insert; only one that took
 * nothing is sent again as the full statement, which tells it what
 * stands. */
START_TEST(test_a_lone_reserve_is_a_bare_insert_unless_its_identity_is_held)
{
	void *a = open_as("a", ""), *b = open_as("b", "");
	struct ex x, y;
	struct waiter w;

	note_statements();
	make_ex(&x, "p", "lone");
	make_ex(&y, "p", "lone");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	ck_assert_int_eq(rows_of_exec(db, x.exec), 1);
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_test_sent"),
			 1);
	ck_assert_int_eq(sent("lone", BARE), 1);

	/* Held: the bare insert takes nothing, and the full statement, in
	 * the next transaction, finds x standing. */
	ck_assert_int_eq(reserve(b, &y, &w), 0);
	ck_assert_int_eq(w.ntaken, 1);
	assert_reserved_as(&w.standing, &x);
	ck_assert_int_eq(rows_of_exec(db, y.exec), 0);
	ck_assert_int_eq(sent("lone", BARE), 2);
	ck_assert_int_eq(sent("lone", FULL), 1);
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_test_sent"),
			 3);
	ck_assert_int_eq(sql_long(db, "SELECT max(n) FROM carmy_test_sent "
			 "WHERE query LIKE 'WITH ins AS%'"),
			 sql_long(db, "SELECT max(n) FROM carmy_test_sent"));
	ck_assert_int_eq(xacts("true"), 3);
	ck_assert(xacts_after("query LIKE '" BARE "'", "query LIKE '" FULL
			      "'"));
	ops->close(b);
	ops->close(a);
}
END_TEST

/* A COMPLETE of its own goes as the bare update; one that took nothing
 * (sent again after a lost answer, or with another result) is sent again
 * as the full statement, which tells those apart. */
START_TEST(test_a_lone_completion_is_a_bare_update_unless_it_took_nothing)
{
	void *a = open_as("a", ""), *b = open_as("b", "");
	struct ex x, other, z;
	struct waiter w;

	note_statements();
	make_ex(&x, "p", "settled");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &x, NULL), 0);
	ck_assert_int_eq(rows_as(&x, "a", CARMY_STORE_COMPLETED), 1);
	ck_assert_int_eq(sent_updates(BARE_UPDATE), 1);
	ck_assert_int_eq(sent_updates(FULL_UPDATE), 0);

	/* Its own result again, as after a lost answer: recorded. */
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &x, NULL), 0);
	ck_assert_int_eq(sent_updates(BARE_UPDATE), 2);
	ck_assert_int_eq(sent_updates(FULL_UPDATE), 1);
	ck_assert(xacts_after("query LIKE '" BARE_UPDATE "'",
			      "query LIKE '" FULL_UPDATE "'"));

	/* Another result: refused, the first kept. */
	other = x;
	other.result[0] ^= 1;
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &other, NULL),
			 -ESTALE);
	ck_assert_int_eq(sent_updates(BARE_UPDATE), 3);
	ck_assert_int_eq(sent_updates(FULL_UPDATE), 2);
	make_ex(&z, "p", "settled");
	ck_assert_int_eq(reserve(b, &z, &w), 0);
	ck_assert_int_eq(w.ntaken, 1);
	assert_completed_as(&w.standing, &x);
	ops->close(b);
	ops->close(a);
}
END_TEST

/* An answer of a shape no statement has (a bare statement's row count
 * neither 0 nor 1, a NULL where the full statement sends a boolean) comes
 * after the server ran the statement, which may commit: the run is taken
 * as one that may have committed, and each request runs again, on the
 * same connection (it is in step again at the sync), as its full
 * statement, which finds what the first run left. Answered as if nothing
 * had gone wrong, never failed while its row stands. */
START_TEST(test_answers_out_of_step_are_taken_as_may_have_committed)
{
	void *a = open_one("a", ""), *b = open_one("b", "");
	struct ex x, y;
	struct waiter w;

	note_statements();
	make_ex(&x, "p", "skewed");
	__atomic_store_n(&skewed_tags, 1, __ATOMIC_RELEASE);
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	ck_assert_int_eq(skews_left(), 0);
	ck_assert_int_eq(rows_as(&x, "a", CARMY_STORE_RUNNING), 1);
	ck_assert_int_eq(sent("skewed", BARE), 1);
	ck_assert_int_eq(sent("skewed", FULL), 1);
	ck_assert(xacts_after("query LIKE '" BARE "'",
			      "query LIKE '" FULL "'"));

	__atomic_store_n(&skewed_tags, 1, __ATOMIC_RELEASE);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &x, NULL), 0);
	ck_assert_int_eq(skews_left(), 0);
	ck_assert_int_eq(rows_as(&x, "a", CARMY_STORE_COMPLETED), 1);
	ck_assert_int_eq(sent_updates(BARE_UPDATE), 1);
	ck_assert_int_eq(sent_updates(FULL_UPDATE), 1);
	ck_assert(xacts_after("query LIKE '" BARE_UPDATE "'",
			      "query LIKE '" FULL_UPDATE "'"));

	/* Through another instance, its full statement's first flag read
	 * as NULL: the result stands, once. */
	make_ex(&y, "p", "skewed");
	skew_null_at(0, 0);
	ck_assert_int_eq(reserve(b, &y, &w), 0);
	ck_assert_int_eq(skews_left(), 0);
	ck_assert_int_eq(sent("skewed", FULL), 3);
	ck_assert_int_eq(w.ntaken, 1);
	assert_completed_as(&w.standing, &x);
	ck_assert_int_eq(rows_of_exec(db, y.exec), 0);
	/* Each instance's statements on its one backend: no reconnect. */
	ck_assert_int_eq(noted("count(DISTINCT pid)", "true"), 2);
	ops->close(b);
	ops->close(a);
}
END_TEST

/* Out of step run after run: the batch fails, as one the database
 * refused, after two runs; a reservation whose first run inserted its
 * row (committed, its answer out of step) is withdrawn at the head of the
 * next transaction, so that the identity is free again. */
START_TEST(test_answers_out_of_step_every_time_fail_the_batch)
{
	void *a = open_one("a", "");
	struct ex x, u, again;

	make_ex(&x, "p", "askew-twice");
	__atomic_store_n(&skewed_tags, 1, __ATOMIC_RELEASE);
	skew_null_at(0, 0);
	ck_assert_int_eq(reserve(a, &x, NULL), -EIO);
	ck_assert_int_eq(skews_left(), 0);
	ck_assert_int_eq(rows_of_exec(db, x.exec), 1);
	make_ex(&u, "p", "after-askew");
	ck_assert_int_eq(reserve(a, &u, NULL), 0);
	ck_assert_int_eq(rows_of_exec(db, x.exec), 0);
	make_ex(&again, "p", "askew-twice");
	ck_assert_int_eq(reserve(a, &again, NULL), 0);
	ck_assert_int_eq(rows_as(&again, "a", CARMY_STORE_RUNNING), 1);
	ops->close(a);
}
END_TEST

/* A reservation run again after a run that may have committed (its
 * answer out of step) finds its own row: recorded, told by its exec id
 * and instance before the rest of the row is read. A column of that row
 * read back damaged (NULL, here: its principal, after the statement's
 * four flags) does not answer it failed while its row stands. */
START_TEST(test_a_reservation_run_again_knows_its_own_row_whatever_else_it_reads)
{
	void *a = open_one("a", "");
	struct ex x;

	make_ex(&x, "p", "own-damaged");
	__atomic_store_n(&skewed_tags, 1, __ATOMIC_RELEASE);
	skew_null_at(0, 4);
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	ck_assert_int_eq(__atomic_load_n(&skewed_tags, __ATOMIC_ACQUIRE), 0);
	__atomic_store_n(&skewed_nulls, 0, __ATOMIC_RELEASE);
	ck_assert_int_eq(rows_as(&x, "a", CARMY_STORE_RUNNING), 1);
	ops->close(a);
}
END_TEST

/* A full statement's answer with a column more than the statement sends
 * is out of step, not a row to read: a reservation answered so on every
 * run fails as a batch out of step every time does, and its row, which
 * its first run committed, is withdrawn at the head of the next
 * transaction. (Two skews: as many reads of the width as the answer
 * gets.) */
START_TEST(test_an_answer_of_another_width_is_out_of_step)
{
	void *a = open_one("a", "");
	struct ex x, u;

	make_ex(&x, "p", "wide");
	__atomic_store_n(&skewed_tags, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&skewed_fields, 2, __ATOMIC_RELEASE);
	ck_assert_int_eq(reserve(a, &x, NULL), -EIO);
	ck_assert_int_eq(__atomic_load_n(&skewed_tags, __ATOMIC_ACQUIRE), 0);
	__atomic_store_n(&skewed_fields, 0, __ATOMIC_RELEASE);
	ck_assert_int_eq(rows_of_exec(db, x.exec), 1);
	make_ex(&u, "p", "after-wide");
	ck_assert_int_eq(reserve(a, &u, NULL), 0);
	ck_assert_int_eq(rows_of_exec(db, x.exec), 0);
	ops->close(a);
}
END_TEST

START_TEST(test_complete_is_idempotent_and_never_overwrites_a_result)
{
	void *a = open_as("a", "");
	struct ex x, other, never;

	make_ex(&x, "p", "complete");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &x, NULL), 0);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &x, NULL), 0);

	other = x;
	other.result[0] ^= 1;
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &other, NULL),
			 -ESTALE);
	other = x;
	other.status = CARMY_STATUS_FAILED;
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &other, NULL),
			 -ESTALE);
	other = x;
	other.result_len--;
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &other, NULL),
			 -ESTALE);
	/* Nothing reserved, or released: never resurrected. */
	make_ex(&never, "p", "never");
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &never, NULL),
			 -ESTALE);
	ck_assert_int_eq(rows_of_exec(db, never.exec), 0);
	ops->close(a);

	{
		struct seen s = { 0 };

		a = open_as("a", "");
		ck_assert_int_eq(ops->load(a, collect, &s), 0);
		ck_assert_int_eq(s.n, 1);
		assert_completed_as(&s.rec[0], &x);
		ops->close(a);
	}
}
END_TEST

/* How many of carmy_executions' storage options match pattern (LIKE). */
static long reloptions_like(const char *pattern)
{
	char q[256];

	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_class AS c,"
		 " unnest(c.reloptions) AS o WHERE c.oid ="
		 " 'carmy_executions'::regclass AND o LIKE '%s'", pattern);
	return sql_long(db, q);
}

/* Every page the store fills keeps room for its rows' settles: a row's
 * completed version lands on its page, without an entry in any index (a
 * heap-only update). Reserved all first, so that their pages are as full
 * as inserts leave them when the settles come. */
#define HOT_ROWS 400

START_TEST(test_settles_update_in_place_on_pages_left_half_free)
{
	struct ex *xs = calloc(HOT_ROWS, sizeof(*xs));
	void *a = open_as("a", "");
	char q[256];

	ck_assert_ptr_nonnull(xs);
	ck_assert_int_eq(reloptions_like("fillfactor=50"), 1);
	/* A settle finds room once the page's dead versions are pruned,
	 * which a snapshot held meanwhile (autovacuum's) would prevent. */
	sql(db, "ALTER TABLE carmy_executions SET (autovacuum_enabled = off)");
	for (int i = 0; i < HOT_ROWS; i++) {
		char id[32];

		snprintf(id, sizeof(id), "hot-%d", i);
		make_ex(&xs[i], "p", id);
		ck_assert_int_eq(reserve(a, &xs[i], NULL), 0);
	}
	for (int i = 0; i < HOT_ROWS; i++)
		ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &xs[i], NULL),
				 0);
	/* The store's backends report their counts by the time they exit,
	 * at the latest. */
	ops->close(a);
	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_stat_user_tables"
		 " WHERE relname = 'carmy_executions' AND n_tup_upd >= %d",
		 HOT_ROWS);
	wait_until(db, q);
	ck_assert_int_eq(sql_long(db, "SELECT n_tup_upd - n_tup_hot_upd FROM"
				  " pg_stat_user_tables WHERE relname ="
				  " 'carmy_executions'"), 0);
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_executions"
				  " WHERE state = 2"), HOT_ROWS);
	free(xs);
}
END_TEST

/* A table made before the store set a fillfactor gets one at the next
 * open; one an operator chose is left as it is. */
START_TEST(test_open_sets_a_fillfactor_only_where_none_was_chosen)
{
	void *a = open_as("a", "");

	ops->close(a);
	sql(db, "ALTER TABLE carmy_executions RESET (fillfactor)");
	a = open_as("a", "");
	ops->close(a);
	ck_assert_int_eq(reloptions_like("fillfactor=50"), 1);
	sql(db, "ALTER TABLE carmy_executions SET (fillfactor = 80)");
	a = open_as("a", "");
	ops->close(a);
	ck_assert_int_eq(reloptions_like("fillfactor=%"), 1);
	ck_assert_int_eq(reloptions_like("fillfactor=80"), 1);
}
END_TEST

START_TEST(test_release_frees_the_identity_and_may_name_nothing)
{
	void *a = open_as("a", ""), *b = open_as("b", "");
	struct ex x, y, done, nothing;
	struct waiter w;

	make_ex(&x, "p", "released");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_RELEASE, &x, NULL), 0);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_RELEASE, &x, NULL), 0);
	make_ex(&nothing, "p", "nothing");
	ck_assert_int_eq(op_wait(a, CARMY_STORE_RELEASE, &nothing, NULL), 0);
	ck_assert_int_eq(rows_of_exec(db, x.exec), 0);
	make_ex(&y, "p", "released");
	ck_assert_int_eq(reserve(b, &y, NULL), 0);	/* recorded */
	ck_assert_int_eq(rows_of_exec(db, y.exec), 1);

	/* A release never undoes a result. */
	make_ex(&done, "p", "done");
	ck_assert_int_eq(reserve(a, &done, NULL), 0);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &done, NULL), 0);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_RELEASE, &done, NULL), 0);
	make_ex(&y, "p", "done");
	ck_assert_int_eq(reserve(b, &y, &w), 0);
	ck_assert_int_eq(w.ntaken, 1);
	assert_completed_as(&w.standing, &done);
	ops->close(b);
	ops->close(a);
}
END_TEST

START_TEST(test_resolve_commits_a_result_or_frees_the_identity)
{
	void *a = open_as("a", ""), *b = open_as("b", "");
	struct ex x1, x2, y, other;
	struct seen s = { 0 };
	const struct carmy_store_record *r;

	make_ex(&x1, "p", "resolved-1");
	make_ex(&x2, "p", "resolved-2");
	x1.status = CARMY_STATUS_TIMED_OUT;
	ck_assert_int_eq(reserve(a, &x1, NULL), 0);
	ck_assert_int_eq(reserve(a, &x2, NULL), 0);
	note_statements();
	/* Sent alone: the bare update, and the full statement only for one
	 * that updated nothing. */
	ck_assert_int_eq(resolve(a, &x1, true), 0);
	ck_assert_int_eq(sent_updates(BARE_UPDATE), 1);
	ck_assert_int_eq(sent_updates(FULL_UPDATE), 0);
	ck_assert_int_eq(resolve(a, &x1, true), 0);	/* again: its own */
	ck_assert_int_eq(sent_updates(BARE_UPDATE), 2);
	ck_assert_int_eq(sent_updates(FULL_UPDATE), 1);
	other = x1;
	other.result[5] ^= 0x80;
	ck_assert_int_eq(resolve(a, &other, true), -ESTALE);
	ck_assert_int_eq(sent_updates(BARE_UPDATE), 3);
	ck_assert_int_eq(sent_updates(FULL_UPDATE), 2);
	ck_assert_int_eq(resolve(a, &x2, false), 0);
	ck_assert_int_eq(resolve(a, &x2, false), 0);

	make_ex(&y, "p", "resolved-2");
	ck_assert_int_eq(reserve(b, &y, NULL), 0);	/* x2 freed it */
	ops->close(a);

	a = open_as("a", "");
	ck_assert_int_eq(ops->load(a, collect, &s), 0);
	ck_assert_int_eq(s.n, 1);
	r = seen_exec(&s, &x1);
	ck_assert_ptr_nonnull(r);
	assert_completed_as(r, &x1);
	ck_assert_uint_eq(r->resolved_ns, 1700000000123456789ull);
	ck_assert_uint_eq(r->resolved_uid, 1001);
	ck_assert_uint_eq(r->resolved_pid, 777);
	ops->close(a);
	ops->close(b);
}
END_TEST

START_TEST(test_purge_forgets_a_completed_execution_only)
{
	void *a = open_as("a", ""), *b = open_as("b", "");
	struct ex x, y;

	make_ex(&x, "p", "purged");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_PURGE, &x, NULL), 0);
	ck_assert_int_eq(rows_of_exec(db, x.exec), 1);	/* running: kept */
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &x, NULL), 0);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_PURGE, &x, NULL), 0);
	ck_assert_int_eq(rows_of_exec(db, x.exec), 0);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_PURGE, &x, NULL), 0);
	make_ex(&y, "p", "purged");
	ck_assert_int_eq(reserve(b, &y, NULL), 0);	/* recorded */
	ops->close(b);
	ops->close(a);
}
END_TEST

static int stop_at_first(void *arg, const struct carmy_store_record *r)
{
	(void)r;
	(*(int *)arg)++;
	return 42;
}

START_TEST(test_load_hands_over_this_instances_executions_with_every_field)
{
	void *a = open_as("a", ""), *b = open_as("b", "");
	struct ex running, completed, resolved, theirs, released, after;
	struct seen s = { 0 }, sb = { 0 };
	const struct carmy_store_record *r;
	int calls = 0;

	make_ex(&running, "p", "running");
	make_ex(&completed, "p", "completed");
	make_ex(&resolved, "p", "resolved");
	make_ex(&released, "p", "released");
	make_ex(&theirs, "p", "theirs");
	completed.status = CARMY_STATUS_FAILED;
	completed.result_code = -7;
	completed.result_len = 0;	/* an empty result is a result */
	ck_assert_int_eq(reserve(a, &running, NULL), 0);
	ck_assert_int_eq(reserve(a, &completed, NULL), 0);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &completed, NULL), 0);
	ck_assert_int_eq(reserve(a, &resolved, NULL), 0);
	ck_assert_int_eq(resolve(a, &resolved, true), 0);
	ck_assert_int_eq(reserve(a, &released, NULL), 0);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_RELEASE, &released, NULL), 0);
	ck_assert_int_eq(reserve(b, &theirs, NULL), 0);
	ops->close(a);
	ops->close(b);

	a = open_as("a", "");
	ck_assert_int_eq(ops->load(a, collect, &s), 0);
	ck_assert_int_eq(s.n, 3);
	r = seen_exec(&s, &running);
	ck_assert_ptr_nonnull(r);
	assert_reserved_as(r, &running);
	ck_assert_int_eq(r->state, CARMY_STORE_RUNNING);
	ck_assert_uint_eq(r->resolved_ns, 0);
	r = seen_exec(&s, &completed);
	ck_assert_ptr_nonnull(r);
	assert_completed_as(r, &completed);
	ck_assert_uint_eq(r->resolved_ns, 0);
	ck_assert_uint_eq(r->resolved_pid, 0);
	r = seen_exec(&s, &resolved);
	ck_assert_ptr_nonnull(r);
	assert_completed_as(r, &resolved);
	ck_assert_uint_eq(r->resolved_uid, 1001);

	/* each() stops the load, whose return is load()'s; the store
	 * works on after it. */
	ck_assert_int_eq(ops->load(a, stop_at_first, &calls), 42);
	ck_assert_int_eq(calls, 1);
	make_ex(&after, "p", "after-load");
	ck_assert_int_eq(reserve(a, &after, NULL), 0);
	ops->close(a);

	b = open_as("b", "");
	ck_assert_int_eq(ops->load(b, collect, &sb), 0);
	ck_assert_int_eq(sb.n, 1);
	assert_reserved_as(&sb.rec[0], &theirs);
	ops->close(b);
}
END_TEST

/*
 * A table made by an earlier store, without the call's columns, with a row
 * in it: open adds the columns in place (the row kept, NULL there), load()
 * hands the row over with no call, and a new reservation's call is
 * written and read back.
 */
START_TEST(test_a_table_without_the_call_columns_is_upgraded_in_place)
{
	struct seen *s = calloc(1, sizeof(*s));
	const struct carmy_store_record *r;
	struct ex x;
	void *a;

	ck_assert_ptr_nonnull(s);
	sql(db, "CREATE TABLE carmy_executions (principal bytea NOT NULL,"
	    " session bytea NOT NULL, request_id bytea NOT NULL,"
	    " exec bytea NOT NULL UNIQUE, instance text NOT NULL,"
	    " fingerprint bytea NOT NULL, rawprint bytea NOT NULL,"
	    " pid bigint NOT NULL, started_ns bigint NOT NULL,"
	    " state smallint NOT NULL, finished_ns bigint, status integer,"
	    " result_code integer, result bytea, resolved_ns bigint,"
	    " resolved_uid bigint, resolved_pid bigint,"
	    " PRIMARY KEY (principal, session, request_id))");
	sql(db, "CREATE INDEX carmy_executions_instance ON carmy_executions"
	    " (instance)");
	sql(db, "INSERT INTO carmy_executions (principal, session, request_id,"
	    " exec, instance, fingerprint, rawprint, pid, started_ns, state)"
	    " VALUES ('\\x6f6c64', 'session', '\\x726f77',"
	    " decode(repeat('ab', 16), 'hex'), 'a',"
	    " decode(repeat('00', 16), 'hex'), decode(repeat('00', 16), 'hex'),"
	    " 7, 7, 1)");
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM information_schema"
				  ".columns WHERE table_name = "
				  "'carmy_executions'"), 17);

	a = open_as("a", "");
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM information_schema"
				  ".columns WHERE table_name = "
				  "'carmy_executions' AND column_name IN "
				  "('tool', 'tool_len', 'args', 'args_len', "
				  "'result_format')"), 5);
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_executions "
				  "WHERE tool IS NULL AND args IS NULL AND "
				  "result_format IS NULL"), 1);
	make_ex(&x, "p", "new");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_executions "
				  "WHERE tool IS NOT NULL AND args_len > 0"),
			 1);
	ops->close(a);

	a = open_as("a", "");
	ck_assert_int_eq(ops->load(a, collect, s), 0);
	ck_assert_int_eq(s->n, 2);
	r = seen_exec(s, &x);
	ck_assert_ptr_nonnull(r);
	assert_reserved_as(r, &x);
	r = &s->rec[r == &s->rec[0] ? 1 : 0];
	ck_assert_uint_eq(r->len[0], 3);
	ck_assert_mem_eq(r->part[0], "old", 3);
	ck_assert_uint_eq(r->tool_kept + r->tool_len + r->args_kept +
			  r->args_len, 0);
	ck_assert_uint_eq(r->result_format, CARMY_STORE_FORMAT_UNKNOWN);
	ops->close(a);
	free(s);
}
END_TEST

/* The race: RACE_THREADS threads on two instances reserve each identity
 * at once, each with its own exec id. */
struct racer {
	pthread_barrier_t *go;
	void *st;
	int t;
	struct {
		int rc, ntaken, state;
		uint8_t exec[16], taken_exec[16], taken_fp[16];
	} got[RACE_IDS];
};

static void *race_thread(void *arg)
{
	struct racer *r = arg;

	for (int i = 0; i < RACE_IDS; i++) {
		struct waiter w;
		struct ex x;
		char id[32];

		snprintf(id, sizeof(id), "race-%d", i);
		make_ex(&x, "race", id);
		memcpy(x.fp, &r->t, sizeof(r->t));
		waiter_init(&w, CARMY_STORE_RESERVE, &x);
		pthread_barrier_wait(r->go);
		ops->submit(r->st, &w.req);
		r->got[i].rc = wait_done(&w);
		r->got[i].ntaken = w.ntaken;
		r->got[i].state = w.standing.state;
		memcpy(r->got[i].exec, x.exec, 16);
		memcpy(r->got[i].taken_exec, w.standing.exec, 16);
		memcpy(r->got[i].taken_fp, w.standing.fingerprint, 16);
		waiter_destroy(&w);
	}
	return NULL;
}

START_TEST(test_racing_reservations_record_exactly_one_and_name_it)
{
	void *st[2] = { open_as("a", ""), open_as("b", "") };
	static struct racer r[RACE_THREADS];
	pthread_t t[RACE_THREADS];
	pthread_barrier_t go;

	pthread_barrier_init(&go, NULL, RACE_THREADS);
	for (int k = 0; k < RACE_THREADS; k++) {
		r[k].go = &go;
		r[k].st = st[k % 2];
		r[k].t = k;
		ck_assert_int_eq(pthread_create(&t[k], NULL, race_thread,
						&r[k]), 0);
	}
	for (int k = 0; k < RACE_THREADS; k++)
		pthread_join(t[k], NULL);
	pthread_barrier_destroy(&go);
	for (int i = 0; i < RACE_IDS; i++) {
		int winner = -1;

		for (int k = 0; k < RACE_THREADS; k++) {
			ck_assert_msg(r[k].got[i].rc == 0, "race-%d thread %d: "
				      "%d", i, k, r[k].got[i].rc);
			if (r[k].got[i].ntaken == 0) {
				ck_assert_msg(winner < 0, "race-%d: threads %d "
					      "and %d both recorded", i,
					      winner, k);
				winner = k;
			}
		}
		ck_assert_msg(winner >= 0, "race-%d: nobody recorded", i);
		for (int k = 0; k < RACE_THREADS; k++) {
			if (k == winner)
				continue;
			ck_assert_int_eq(r[k].got[i].ntaken, 1);
			ck_assert_int_eq(r[k].got[i].state,
					 CARMY_STORE_RUNNING);
			ck_assert_mem_eq(r[k].got[i].taken_exec,
					 r[winner].got[i].exec, 16);
			ck_assert_mem_eq(r[k].got[i].taken_fp, &winner,
					 sizeof(winner));
		}
		ck_assert_int_eq(rows_of_exec(db, r[winner].got[i].exec), 1);
	}
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_executions"),
			 RACE_IDS);
	ops->close(st[0]);
	ops->close(st[1]);
}
END_TEST

START_TEST(test_requests_submitted_together_commit_together)
{
	void *a = open_one("a", "");
	struct waiter *w = calloc(GROUP_N, sizeof(*w));
	struct ex *x = calloc(GROUP_N, sizeof(*x));	/* w[i] points in */
	char id[32];
	int ends = 0;	/* answers saying none follow */

	ck_assert_ptr_nonnull(w);
	ck_assert_ptr_nonnull(x);
	/* Hold the table: the first batch waits on the lock, and all the
	 * rest queue up behind it meanwhile. */
	sql(db, "BEGIN");
	sql(db, "LOCK TABLE carmy_executions IN EXCLUSIVE MODE");
	for (int i = 0; i < GROUP_N; i++) {
		snprintf(id, sizeof(id), "group-%d", i);
		make_ex(&x[i], "group", id);
		waiter_init(&w[i], CARMY_STORE_RESERVE, &x[i]);
		ops->submit(a, &w[i].req);
	}
	for (int i = 0; i < GROUP_N; i++)
		ck_assert_msg(!is_done(&w[i]), "request %d answered before "
			      "its transaction could commit", i);
	sql(db, "COMMIT");
	for (int i = 0; i < GROUP_N; i++) {
		ck_assert_int_eq(wait_done(&w[i]), 0);
		ck_assert_int_eq(w[i].ntaken, 0);
	}
	/* Answered a batch at a time (two at most: the first may have gone
	 * before the rest came), each answer but a batch's last saying more
	 * follow (carmyd then wakes a loop once for them all); the very
	 * last says none do. */
	for (int i = 0; i < GROUP_N; i++) {
		bool last = true;

		for (int k = 0; k < GROUP_N; k++)
			last &= w[k].seq <= w[i].seq;
		ck_assert_msg(!last || !w[i].follow, "the last answer says "
			      "more follow");
		ends += !w[i].follow;
		waiter_destroy(&w[i]);
	}
	ck_assert_int_le(ends, 2);
	free(x);
	free(w);
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_executions"),
			 GROUP_N);
	/* Rows written by one transaction share its xmin. */
	ck_assert_int_le(sql_long(db, "SELECT count(DISTINCT xmin::text) FROM "
			 "carmy_executions"), 2);
	ops->close(a);
}
END_TEST

/* Damage: x's row (completed, instance a) changed by set, after pre if
 * any. reserve: whether a RESERVE of the identity can still name it. */
static const struct damage {
	const char *set;
	bool reserve;
	const char *pre;
} damages[] = {
	{ "exec = '\\x010203'", true, NULL },
	{ "state = 7", true, NULL },
	{ "state = NULL", true,		/* had a DBA dropped NOT NULL */
	  "ALTER TABLE carmy_executions ALTER state DROP NOT NULL" },
	{ "result = NULL", true, NULL },
	{ "status = NULL", true, NULL },
	{ "finished_ns = -1", true, NULL },
	{ "pid = -1", true, NULL },
	{ "pid = 4294967296", true, NULL },
	{ "started_ns = -5", true, NULL },
	{ "fingerprint = '\\x00'", true, NULL },
	{ "rawprint = decode(repeat('00', 17), 'hex')", true, NULL },
	{ "resolved_ns = -1", true, NULL },
	{ "resolved_uid = 4294967296", true, NULL },
	{ "resolved_pid = -2", true, NULL },
	{ "tool_len = -1", true, NULL },
	{ "args_len = 4294967296", true, NULL },
	{ "result_format = 256", true, NULL },
	{ "tool = decode(repeat('61', 121), 'hex'), tool_len = 200", true,
	  NULL },
	{ "args = decode(repeat('61', 30), 'hex'), args_len = 10", true,
	  NULL },
	{ "request_id = ''::bytea", false, NULL },
	{ "principal = decode(repeat('61', 257), 'hex')", false, NULL },
};

START_TEST(test_a_damaged_row_is_refused_by_load_and_reserve)
{
	void *a = open_as("a", "");
	struct seen *s = calloc(1, sizeof(*s));
	struct ex x, y;
	struct waiter w;
	char q[256];

	ck_assert_ptr_nonnull(s);
	for (size_t i = 0; i < sizeof(damages) / sizeof(damages[0]); i++) {
		sql(db, "DELETE FROM carmy_executions");
		make_ex(&x, "p", "damaged");
		ck_assert_int_eq(reserve(a, &x, NULL), 0);
		ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &x, NULL),
				 0);
		s->n = 0;
		ck_assert_int_eq(ops->load(a, collect, s), 0);	/* sound */
		ck_assert_int_eq(s->n, 1);
		if (damages[i].pre != NULL)
			sql(db, damages[i].pre);
		snprintf(q, sizeof(q), "UPDATE carmy_executions SET %s",
			 damages[i].set);
		sql(db, q);
		s->n = 0;
		ck_assert_msg(ops->load(a, collect, s) == -EBADMSG,
			      "load() took a row with %s", damages[i].set);
		ck_assert_int_eq(s->n, 0);
		if (!damages[i].reserve)
			continue;
		make_ex(&y, "p", "damaged");
		ck_assert_msg(reserve(a, &y, &w) == -EBADMSG,
			      "RESERVE took a row with %s", damages[i].set);
		ck_assert_int_eq(w.ntaken, 0);
		ck_assert_int_eq(rows_of_exec(db, y.exec), 0);
	}
	free(s);
	ops->close(a);
}
END_TEST

/* ARGS must fail open with rc and a sentence containing want. */
static void refused(const char *args, int rc, const char *want)
{
	char err[512] = "";
	void *st = (void *)1;
	int got = ops->open(args, &st, err, sizeof(err));

	ck_assert_msg(got < 0, "open \"%s\" worked", args);
	if (rc != 0)
		ck_assert_int_eq(got, rc);
	ck_assert_ptr_null(st);
	ck_assert_msg(strstr(err, want) != NULL, "open \"%s\": \"%s\" does not "
		      "say \"%s\"", args, err, want);
	ck_assert_msg(strchr(err, '\n') == NULL, "a newline in \"%s\"", err);
}

/* ARGS with a timeout= the store must refuse, and what it says. */
static const char *const bad_timeouts[][2] = {
	{ "instance=x timeout=0", "timeout=\"0\" is not a number of seconds" },
	{ "timeout=3601 instance=x", "timeout=\"3601\"" },
	{ "timeout=1.5", "timeout=\"1.5\"" },
	{ "timeout= instance=x", "timeout=\"\"" },
};

/* ARGS with a connections= the store must refuse, and what it says. */
static const char *const bad_conns[][2] = {
	{ "instance=x connections=0", "connections=\"0\" is not a number of "
	  "connections from 1 to 16" },
	{ "connections=17 instance=x", "connections=\"17\"" },
	{ "instance=x connections=4x", "connections=\"4x\"" },
	{ "instance=x connections=-1", "connections=\"-1\"" },
	{ "connections= instance=x", "connections=\"\"" },
	{ "instance=x connections=0016", "connections=\"0016\"" },
};

START_TEST(test_bad_args_are_refused_with_a_sentence)
{
	char args[1024], name[80];
	void *st;

	memset(name, 'n', 65);
	name[65] = '\0';
	snprintf(args, sizeof(args), "instance=%s %s", name, conninfo);
	refused(args, -EINVAL, "instance name");
	snprintf(args, sizeof(args), "instance=\"a b\" %s", conninfo);
	refused(args, -EINVAL, "instance name");
	snprintf(args, sizeof(args), "instance= %s", conninfo);
	refused(args, -EINVAL, "instance name");
	snprintf(args, sizeof(args), "instance=a/b %s", conninfo);
	refused(args, -EINVAL, "instance name");
	/* The name ends at the space: "b" is then no keyword=value. */
	snprintf(args, sizeof(args), "instance=a b %s", conninfo);
	refused(args, 0, "\"b\"");
	refused("instance=x host=/nonexistent/carmy user=carmy",
		-ECONNREFUSED, "cannot connect to PostgreSQL");
	refused("instance=x nosuchkeyword=1", 0, "nosuchkeyword");
	/* timeout=: whole seconds, 1 to 3600, before or after the name. */
	for (size_t i = 0; i < sizeof(bad_timeouts) / sizeof(*bad_timeouts);
	     i++) {
		snprintf(args, sizeof(args), "%s %s", bad_timeouts[i][0],
			 conninfo);
		refused(args, -EINVAL, bad_timeouts[i][1]);
	}
	/* connections=: 1 to 16, anywhere before CONNINFO. */
	for (size_t i = 0; i < sizeof(bad_conns) / sizeof(*bad_conns); i++) {
		snprintf(args, sizeof(args), "%s %s", bad_conns[i][0],
			 conninfo);
		refused(args, -EINVAL, bad_conns[i][1]);
	}
	snprintf(args, sizeof(args), "timeout=7 instance=tmo %s", conninfo);
	{
		char err[256] = "";

		st = NULL;
		ck_assert_msg(ops->open(args, &st, err, sizeof(err)) == 0,
			      "open \"%s\": %s", args, err);
		ops->close(st);
	}

	memset(name, 'n', 64);
	name[64] = '\0';
	st = open_as(name, "");
	ops->close(st);
}
END_TEST

START_TEST(test_a_uri_is_a_connection_string_too)
{
	PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
	const char *host = NULL, *user = NULL, *dbname = NULL;
	char uri[768], err[512] = "";
	void *st = NULL;
	struct ex x;
	int rc;

	ck_assert_ptr_nonnull(opts);
	for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
		if (strcmp(o->keyword, "host") == 0)
			host = o->val;
		else if (strcmp(o->keyword, "user") == 0)
			user = o->val;
		else if (strcmp(o->keyword, "dbname") == 0)
			dbname = o->val;
	}
	ck_assert_ptr_nonnull(host);
	snprintf(uri, sizeof(uri), "instance=uri postgresql://%s@/%s?host=%s",
		 user ? user : "", dbname ? dbname : "", host);
	PQconninfoFree(opts);
	rc = ops->open(uri, &st, err, sizeof(err));
	ck_assert_msg(rc == 0, "open %s: %d %s", uri, rc, err);
	make_ex(&x, "p", "uri");
	ck_assert_int_eq(reserve(st, &x, NULL), 0);
	ops->close(st);
}
END_TEST

START_TEST(test_the_instance_is_the_host_name_by_default)
{
	char host[256] = "", err[512] = "", q[512];
	bool ok = true;
	void *st = NULL;
	struct ex x;
	int rc;

	ck_assert_int_eq(gethostname(host, sizeof(host) - 1), 0);
	for (const char *p = host; *p; p++)
		ok &= (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' ||
		      *p == '-';
	ok &= strlen(host) >= 1 && strlen(host) <= 64;
	rc = ops->open(conninfo, &st, err, sizeof(err));
	if (!ok) {
		ck_assert_int_eq(rc, -EINVAL);
		ck_assert_ptr_nonnull(strstr(err, "instance="));
		return;
	}
	ck_assert_msg(rc == 0, "open: %s", err);
	make_ex(&x, "p", "hosted");
	ck_assert_int_eq(reserve(st, &x, NULL), 0);
	snprintf(q, sizeof(q), "SELECT count(*) FROM carmy_executions WHERE "
		 "instance = '%s'", host);	/* checked above: no quote */
	ck_assert_int_eq(sql_long(db, q), 1);
	ops->close(st);
}
END_TEST

/* End the backends of every connection named app (a store's workers
 * each have one), and wait (5 s at most) until each is gone. Their pids
 * first: in one statement, nothing orders the name's test before the
 * termination. */
static void terminate(const char *app)
{
	char q[256];
	PGresult *r;

	snprintf(q, sizeof(q), "SELECT pid FROM pg_stat_activity WHERE "
		 "application_name = '%s'", app);
	r = PQexec(db, q);
	ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0,
		      "%s: %s", q, PQerrorMessage(db));
	for (int i = 0; i < PQntuples(r); i++) {
		snprintf(q, sizeof(q), "SELECT pg_terminate_backend(%s, "
			 "5000)::int", PQgetvalue(r, i, 0));
		ck_assert_int_eq(sql_long(db, q), 1);
	}
	PQclear(r);
}

START_TEST(test_a_lost_connection_is_reset_and_the_batch_run_again)
{
	void *a = open_as("a", "application_name=lost-test");
	struct ex x, y;

	make_ex(&x, "p", "before");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	terminate("lost-test");
	make_ex(&y, "p", "after");
	ck_assert_int_eq(reserve(a, &y, NULL), 0);
	ck_assert_int_eq(rows_of_exec(db, y.exec), 1);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &y, NULL), 0);
	ops->close(a);
}
END_TEST

START_TEST(test_an_unreachable_database_fails_requests_until_it_is_back)
{
	void *a;
	struct ex x;

	sql(db, "DROP DATABASE IF EXISTS carmy_outage WITH (FORCE)");
	sql(db, "CREATE DATABASE carmy_outage");
	a = open_as("a", "dbname=carmy_outage application_name=outage-test");
	sql(db, "ALTER DATABASE carmy_outage ALLOW_CONNECTIONS false");
	terminate("outage-test");
	for (int i = 0; i < 3; i++) {
		make_ex(&x, "p", "outage");
		ck_assert_int_eq(reserve(a, &x, NULL), -ECONNREFUSED);
	}
	sql(db, "ALTER DATABASE carmy_outage ALLOW_CONNECTIONS true");
	make_ex(&x, "p", "outage");
	ck_assert_int_eq(reserve_when_back(a, &x, NULL), 0);
	ops->close(a);
	sql(db, "DROP DATABASE carmy_outage WITH (FORCE)");
}
END_TEST

START_TEST(test_a_table_locked_throughout_fails_requests_until_it_is_free)
{
	void *a = open_as("a", "options='-c lock_timeout=10'");
	struct ex x;

	/* Held throughout: each request waits, times out and fails. */
	sql(db, "BEGIN");
	sql(db, "LOCK TABLE carmy_executions IN EXCLUSIVE MODE");
	make_ex(&x, "p", "locked");
	ck_assert_int_eq(reserve(a, &x, NULL), -EAGAIN);
	sql(db, "COMMIT");
	ck_assert_int_eq(rows_of_exec(db, x.exec), 0);
	make_ex(&x, "p", "locked");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	ops->close(a);
}
END_TEST

/* An open in a thread of its own, to be waited for with a deadline. */
struct opening {
	const char *args;
	void *st;
	int rc;
	char err[512];
};

static void *opening_thread(void *arg)
{
	struct opening *o = arg;

	o->rc = ops->open(o->args, &o->st, o->err, sizeof(o->err));
	return NULL;
}

/* A server that does not answer while a connection's statements are
 * prepared (here: each waits on a table locked throughout, the session
 * with no lock_timeout or statement_timeout to end the wait) costs the
 * open, or the reconnect, the store's timeout=, not the worker for ever:
 * the open fails, the request fails, and the store is back once the
 * server answers. */
START_TEST(test_prepares_without_an_answer_fail_open_and_reconnect_in_bounded_time)
{
	struct opening o = { 0 };
	char args[1024], err[512] = "";
	struct timespec dl;
	struct waiter w;
	void *a = NULL;
	time_t end;
	struct ex x;
	pthread_t t;
	int rc;

	snprintf(args, sizeof(args), "instance=a connections=1 timeout=1 %s "
		 "options='-c lock_timeout=0 -c statement_timeout=0' "
		 "application_name=prepare-test", conninfo);
	ck_assert_msg(ops->open(args, &a, err, sizeof(err)) == 0, "open: %s",
		      err);
	make_ex(&x, "p", "before-the-lock");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	sql(db, "BEGIN");
	sql(db, "LOCK TABLE carmy_executions IN ACCESS EXCLUSIVE MODE");

	/* The worker's reconnect: */
	terminate("prepare-test");
	make_ex(&x, "p", "under-the-lock");
	waiter_init(&w, CARMY_STORE_RESERVE, &x);
	ops->submit(a, &w.req);
	ck_assert_int_eq(wait_within(&w, BOUNDED_S), -EIO);
	waiter_destroy(&w);

	/* An open: */
	o.args = args;
	args[strlen("instance=")] = 'b';
	ck_assert_int_eq(pthread_create(&t, NULL, opening_thread, &o), 0);
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += BOUNDED_S;
	ck_assert_msg(pthread_timedjoin_np(t, NULL, &dl) == 0, "the open "
		      "did not return within %d s", BOUNDED_S);
	ck_assert_msg(o.rc == -EIO, "open: %d %s", o.rc, o.err);
	ck_assert_ptr_null(o.st);

	sql(db, "COMMIT");
	end = time(NULL) + WAIT_S;
	make_ex(&x, "p", "after-the-lock");
	while ((rc = reserve(a, &x, NULL)) == -EIO)
		ck_assert_msg(time(NULL) < end, "still -EIO after %d s",
			      WAIT_S);
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(rows_as(&x, "a", CARMY_STORE_RUNNING), 1);
	ops->close(a);
}
END_TEST

START_TEST(test_each_session_bounds_its_waits_unless_it_has_bounds_of_its_own)
{
	void *a = open_as("a", "application_name=bounds-a");
	void *b = open_as("b", "options='-c lock_timeout=10 "
			  "-c statement_timeout=1h -c idle_session_timeout=5s'");
	/* 0 chosen explicitly stays 0; only idle_session_timeout is the
	 * store's whatever it was (its session holds the name). */
	void *c = open_as("c", "options='-c lock_timeout=0'");
	struct ex x;

	/* What the store's sessions have set, seen from inside them. */
	sql(db, "DROP TABLE IF EXISTS carmy_test_seen");
	sql(db, "CREATE TABLE carmy_test_seen (instance text, lock text, "
	    "stmt text, idle text, session_idle text, plan text, "
	    "seqscan text)");
	sql(db, "CREATE OR REPLACE FUNCTION carmy_test_seen() RETURNS trigger "
	    "LANGUAGE plpgsql AS $$ BEGIN INSERT INTO carmy_test_seen VALUES "
	    "(NEW.instance, current_setting('lock_timeout'), "
	    "current_setting('statement_timeout'), "
	    "current_setting('idle_in_transaction_session_timeout'), "
	    "current_setting('idle_session_timeout'), "
	    "current_setting('plan_cache_mode'), "
	    "current_setting('enable_seqscan')); "
	    "RETURN NEW; END $$");
	sql(db, "CREATE TRIGGER carmy_test_seen BEFORE INSERT ON "
	    "carmy_executions FOR EACH ROW EXECUTE FUNCTION carmy_test_seen()");
	make_ex(&x, "p", "bounds-a");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	make_ex(&x, "p", "bounds-b");
	ck_assert_int_eq(reserve(b, &x, NULL), 0);
	make_ex(&x, "p", "bounds-c");
	ck_assert_int_eq(reserve(c, &x, NULL), 0);
	/* and again after a reconnect */
	terminate("bounds-a");
	make_ex(&x, "p", "bounds-a-again");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_test_seen "
			 "WHERE instance = 'a' AND lock = '2s' AND "
			 "stmt = '30s' AND idle = '1min' AND "
			 "plan = 'force_generic_plan' AND seqscan = 'off'"),
			 2);
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_test_seen "
			 "WHERE instance = 'b' AND lock = '10ms' AND "
			 "stmt = '1h' AND idle = '1min' AND session_idle = '0'"),
			 1);
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_test_seen "
			 "WHERE instance = 'c' AND lock = '0' AND "
			 "stmt = '30s'"), 1);
	sql(db, "DROP TABLE carmy_test_seen");
	ops->close(c);
	ops->close(b);
	ops->close(a);
}
END_TEST

START_TEST(test_a_reserve_waiting_on_an_uncommitted_insert_fails_alone)
{
	void *a = open_one("a", "application_name=uncommitted-test");
	PGconn *other = db_connect("");
	struct waiter hold, wx, wu;
	struct ex h, x, u;

	/* Another session inserted x's identity and neither commits nor
	 * rolls back: with the store's own lock_timeout, x fails, and u,
	 * in the same batch, is recorded all the same. */
	sleepy_inserts();
	sql(other, "BEGIN");
	insert_row(other, "p", "held-open", NULL);
	make_ex(&x, "p", "held-open");
	make_ex(&u, "p", "unrelated");
	hold_worker(a, "uncommitted-test", &hold, &h);
	waiter_init(&wx, CARMY_STORE_RESERVE, &x);
	waiter_init(&wu, CARMY_STORE_RESERVE, &u);
	ops->submit(a, &wx.req);
	ops->submit(a, &wu.req);
	ck_assert_int_eq(wait_done(&hold), 0);
	ck_assert_int_eq(wait_within(&wx, BOUNDED_S), -EAGAIN);
	ck_assert_int_eq(wait_within(&wu, BOUNDED_S), 0);
	ck_assert_int_eq(wx.ntaken + wu.ntaken, 0);
	ck_assert_int_eq(rows_of_exec(db, u.exec), 1);
	ck_assert_int_eq(rows_of_exec(db, x.exec), 0);
	waiter_destroy(&hold);
	waiter_destroy(&wx);
	waiter_destroy(&wu);
	sql(other, "ROLLBACK");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	PQfinish(other);
	ops->close(a);
}
END_TEST

START_TEST(test_a_request_waiting_on_a_row_lock_fails_alone)
{
	void *a = open_one("a", "options='-c lock_timeout=100' "
			  "application_name=row-lock-test");
	PGconn *other = db_connect("");
	struct waiter hold, wx, wu;
	struct ex h, x, u;

	sleepy_inserts();
	make_ex(&x, "p", "row-locked");
	make_ex(&u, "p", "unrelated");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	sql(other, "BEGIN");
	sql(other, "SELECT 1 FROM carmy_executions WHERE request_id = "
	    "'row-locked' FOR UPDATE");
	hold_worker(a, "row-lock-test", &hold, &h);
	waiter_init(&wx, CARMY_STORE_COMPLETE, &x);
	waiter_init(&wu, CARMY_STORE_RESERVE, &u);
	ops->submit(a, &wx.req);
	ops->submit(a, &wu.req);
	ck_assert_int_eq(wait_done(&hold), 0);
	ck_assert_int_eq(wait_done(&wx), -EAGAIN);
	ck_assert_int_eq(wait_done(&wu), 0);
	ck_assert_int_eq(rows_of_exec(db, u.exec), 1);
	waiter_destroy(&hold);
	waiter_destroy(&wx);
	waiter_destroy(&wu);
	sql(other, "COMMIT");
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &x, NULL), 0);
	PQfinish(other);
	ops->close(a);
}
END_TEST

START_TEST(test_a_statement_timeout_fails_its_request_alone)
{
	void *a = open_one("a", "options='-c statement_timeout=2000' "
			  "application_name=slow-test");
	struct waiter hold, wx, wu;
	struct ex h, x, u;

	sleepy_inserts();
	make_ex(&x, "p", "sleep-30000-slow");
	make_ex(&u, "p", "unrelated");
	hold_worker(a, "slow-test", &hold, &h);
	waiter_init(&wx, CARMY_STORE_RESERVE, &x);
	waiter_init(&wu, CARMY_STORE_RESERVE, &u);
	ops->submit(a, &wx.req);
	ops->submit(a, &wu.req);
	ck_assert_int_eq(wait_done(&hold), 0);
	ck_assert_int_eq(wait_done(&wx), -EAGAIN);	/* query_canceled */
	ck_assert_int_eq(wait_done(&wu), 0);
	ck_assert_int_eq(rows_of_exec(db, x.exec), 0);
	ck_assert_int_eq(rows_of_exec(db, u.exec), 1);
	waiter_destroy(&hold);
	waiter_destroy(&wx);
	waiter_destroy(&wu);
	ops->close(a);
}
END_TEST

START_TEST(test_only_the_instance_that_made_an_execution_settles_it)
{
	void *a = open_as("a", ""), *b = open_as("b", "");
	struct waiter w;
	struct ex x;

	make_ex(&x, "p", "theirs");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	/* A client of b names a's running exec id: b does not take a's row
	 * for its own, it is told who holds the identity. */
	ck_assert_int_eq(reserve(b, &x, &w), 0);
	ck_assert_int_eq(w.ntaken, 1);
	assert_reserved_as(&w.standing, &x);
	ck_assert_int_eq(w.standing.state, CARMY_STORE_RUNNING);
	/* Nor may b release, complete or resolve it. */
	ck_assert_int_eq(op_wait(b, CARMY_STORE_RELEASE, &x, NULL), 0);
	ck_assert_int_eq(op_wait(b, CARMY_STORE_COMPLETE, &x, NULL), -ESTALE);
	ck_assert_int_eq(resolve(b, &x, true), -ESTALE);
	ck_assert_int_eq(resolve(b, &x, false), 0);
	ck_assert_int_eq(rows_as(&x, "a", CARMY_STORE_RUNNING), 1);
	/* a completes it; b's resolve cannot change its result. */
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &x, NULL), 0);
	x.result[0] ^= 1;
	ck_assert_int_eq(resolve(b, &x, true), -ESTALE);
	x.result[0] ^= 1;
	ck_assert_int_eq(rows_as(&x, "a", CARMY_STORE_COMPLETED), 1);
	/* A PURGE forgets it, from any instance (its copy there). */
	ck_assert_int_eq(op_wait(b, CARMY_STORE_PURGE, &x, NULL), 0);
	ck_assert_int_eq(rows_of_exec(db, x.exec), 0);
	ops->close(b);
	ops->close(a);
}
END_TEST

START_TEST(test_an_exec_id_held_under_another_identity_fails_that_reserve_alone)
{
	void *a = open_one("a", "application_name=exec-test");
	PGconn *other = db_connect("");
	struct waiter hold, wy, wz, w;
	struct ex h, x, y, z, e;

	sleepy_inserts();
	make_ex(&x, "p", "first");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	/* y names x's exec id for another identity: in one batch with z,
	 * which is recorded. */
	make_ex(&y, "p", "second");
	memcpy(y.exec, x.exec, 16);
	make_ex(&z, "p", "third");
	hold_worker(a, "exec-test", &hold, &h);
	waiter_init(&wy, CARMY_STORE_RESERVE, &y);
	waiter_init(&wz, CARMY_STORE_RESERVE, &z);
	ops->submit(a, &wy.req);
	ops->submit(a, &wz.req);
	ck_assert_int_eq(wait_done(&hold), 0);
	ck_assert_int_eq(wait_done(&wy), -EEXIST);
	ck_assert_int_eq(wait_done(&wz), 0);
	ck_assert_int_eq(wy.ntaken + wz.ntaken, 0);
	ck_assert_int_eq(rows_of_exec(db, z.exec), 1);
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_executions "
			 "WHERE request_id = 'first'"), 1);
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_executions "
			 "WHERE request_id = 'second'"), 0);
	waiter_destroy(&hold);
	waiter_destroy(&wy);
	waiter_destroy(&wz);

	/* The same exec id inserted by another session, committed only
	 * while the RESERVE waits for it: seen in the next run. */
	make_ex(&e, "p", "fifth");
	sql(other, "BEGIN");
	insert_row(other, "p", "fourth", e.exec);
	waiter_init(&w, CARMY_STORE_RESERVE, &e);
	ops->submit(a, &w.req);
	wait_lock_wait("exec-test");
	sql(other, "COMMIT");
	ck_assert_int_eq(wait_done(&w), -EEXIST);
	ck_assert_int_eq(w.ntaken, 0);
	waiter_destroy(&w);
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_executions "
			 "WHERE request_id = 'fifth'"), 0);
	PQfinish(other);
	ops->close(a);
}
END_TEST

/* a (twin, application twin-a) loses its connections, and another
 * carmyd opens as twin meanwhile (returned): a reserve of a new x (id) on
 * a fails, and writes nothing. */
static void *take_twin(void *a, struct ex *x, const char *id)
{
	void *b;

	terminate("twin-a");
	b = open_as("twin", "");
	make_ex(x, "p", id);
	ck_assert_int_eq(reserve(a, x, NULL), -EBUSY);
	ck_assert_int_eq(reserve(a, x, NULL), -EBUSY);
	ck_assert_int_eq(rows_of_exec(db, x->exec), 0);
	return b;
}

START_TEST(test_an_instance_name_is_held_by_one_carmyd_at_a_time)
{
	char args[1024];
	void *a, *b;
	struct ex x;

	a = open_as("twin", "application_name=twin-a");
	snprintf(args, sizeof(args), "instance=twin %s", conninfo);
	refused(args, -EBUSY, "another carmyd is running as instance twin on "
		"this database");
	ops->close(a);
	b = open_as("twin", "");	/* free once a has gone */
	ops->close(b);

	/* With one connection: a's connection is lost and another carmyd
	 * takes the name before a is back: a runs no request until the
	 * name is free again. */
	a = open_one("twin", "application_name=twin-a");
	b = take_twin(a, &x, "twin");
	ops->close(b);
	ck_assert_int_eq(reserve_when_back(a, &x, NULL), 0);
	ops->close(a);

	/* With several, fenced: a runs no request again, even once the name
	 * is free (b has loaded the instance's executions as its own). */
	a = open_n("twin", 2, "application_name=twin-a");
	b = take_twin(a, &x, "twin-2");
	ops->close(b);
	ck_assert_int_eq(reserve(a, &x, NULL), -EBUSY);
	ck_assert_int_eq(rows_of_exec(db, x.exec), 0);
	ops->close(a);
	a = open_as("twin", "");	/* a new open: a new generation */
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	ops->close(a);
}
END_TEST

/* The backend holding the name's session lock: worker 0's. */
static long name_holder(const char *name);

static long generation(const char *name)
{
	char q[256];

	snprintf(q, sizeof(q), "SELECT gen FROM carmy_instances WHERE name = "
		 "'%s'", name);	/* the tests' names: no quote */
	return sql_long(db, q);
}

static long backends_of(const char *app)
{
	char q[256];

	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_stat_activity WHERE "
		 "application_name = '%s'", app);
	return sql_long(db, q);
}

/* Several connections, one of them (worker 0's, with the name) lost:
 * another carmyd of the name opens meanwhile, a new generation. The
 * first one's other connections are still up, but none of their batches
 * commits again: each fails its fence, and every request is answered
 * -EBUSY, recording nothing. */
START_TEST(test_a_superseded_instance_writes_nothing_on_any_connection)
{
	enum { N = 24 };
	struct waiter w[N];
	struct ex x[N];
	char id[32], q[256];
	long gen;
	void *a, *b;

	a = open_n("fenced", 4, "application_name=fence-a");
	gen = generation("fenced");
	ck_assert_int_eq(backends_of("fence-a"), 4);
	snprintf(q, sizeof(q), "SELECT pg_terminate_backend(%ld, 5000)::int",
		 name_holder("fenced"));
	ck_assert_int_eq(sql_long(db, q), 1);
	b = open_as("fenced", "");
	ck_assert_int_eq(generation("fenced"), gen + 1);
	ck_assert_int_eq(backends_of("fence-a"), 3);
	/* Identities enough to reach every worker of a. */
	for (int i = 0; i < N; i++) {
		snprintf(id, sizeof(id), "fenced-%d", i);
		make_ex(&x[i], "p", id);
		waiter_init(&w[i], CARMY_STORE_RESERVE, &x[i]);
		ops->submit(a, &w[i].req);
	}
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(wait_done(&w[i]), -EBUSY);
		ck_assert_int_eq(w[i].ntaken, 0);
		waiter_destroy(&w[i]);
		ck_assert_int_eq(rows_of_exec(db, x[i].exec), 0);
	}
	/* b works, and a stays fenced once b is gone. */
	ck_assert_int_eq(reserve(b, &x[0], NULL), 0);
	ck_assert_int_eq(op_wait(b, CARMY_STORE_RELEASE, &x[0], NULL), 0);
	ops->close(b);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(reserve(a, &x[i], NULL), -EBUSY);
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_executions "
			 "WHERE instance = 'fenced'"), 0);
	/* Nor does a, fenced, keep the name from the next carmyd. */
	b = open_as("fenced", "");
	ck_assert_int_eq(reserve(b, &x[1], NULL), 0);
	ops->close(b);
	ops->close(a);
}
END_TEST

/* Each request goes to one connection, and is answered once: many
 * identities, submitted together, all recorded, and settled, over
 * connections= backends. */
START_TEST(test_requests_spread_over_the_connections_are_each_answered_once)
{
	enum { N = 200 };
	static const unsigned conns[] = { 1, 3, 16 };
	static struct waiter w[N];
	static struct ex x[N];
	char id[32];

	for (size_t c = 0; c < sizeof(conns) / sizeof(*conns); c++) {
		void *a = open_n("spread", conns[c], "application_name="
				 "spread-test");

		ck_assert_int_eq(backends_of("spread-test"), conns[c]);
		for (int i = 0; i < N; i++) {
			snprintf(id, sizeof(id), "spread-%zu-%d", c, i);
			make_ex(&x[i], "p", id);
			waiter_init(&w[i], CARMY_STORE_RESERVE, &x[i]);
			ops->submit(a, &w[i].req);
		}
		for (int i = 0; i < N; i++) {
			ck_assert_int_eq(wait_done(&w[i]), 0);
			waiter_destroy(&w[i]);
			waiter_init(&w[i], CARMY_STORE_COMPLETE, &x[i]);
			ops->submit(a, &w[i].req);
		}
		for (int i = 0; i < N; i++) {
			ck_assert_int_eq(wait_done(&w[i]), 0);
			ck_assert_int_eq(w[i].ndone, 1);
			waiter_destroy(&w[i]);
		}
		ops->close(a);
		/* closed: its backends exit, then the next open */
		wait_until(db, "SELECT (count(*) = 0)::int FROM "
			   "pg_stat_activity WHERE application_name = "
			   "'spread-test'");
	}
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_executions "
			 "WHERE instance = 'spread' AND state = 2"),
			 N * (long)(sizeof(conns) / sizeof(*conns)));
}
END_TEST

/* Once the table exists, open runs no DDL: CREATE INDEX IF NOT EXISTS
 * would wait behind every instance's open transaction (and fail on its
 * lock timeout behind a long one), holding up their writes meanwhile. */
START_TEST(test_open_does_not_wait_for_other_writers_once_the_table_exists)
{
	PGconn *other = db_connect("");
	void *a = open_as("first", "");	/* makes the table */

	ops->close(a);
	sql(other, "BEGIN");
	insert_row(other, "p", "writer-open", NULL);
	a = open_as("late", "");	/* asserts that it opened */
	ops->close(a);
	sql(other, "ROLLBACK");
	PQfinish(other);
}
END_TEST

/* The name's key as the store computes it (FNV-1a, 64 bits). */
static int64_t name_key(const char *name)
{
	uint64_t h = 14695981039346656037u;

	for (const char *p = name; *p != '\0'; p++) {
		h ^= (uint8_t)*p;
		h *= 1099511628211u;
	}
	return (int64_t)h;
}

static long name_holder(const char *name)
{
	uint64_t h = (uint64_t)name_key(name);
	char q[512];

	snprintf(q, sizeof(q), "SELECT pid FROM pg_locks WHERE locktype = "
		 "'advisory' AND classid = %" PRIu32 " AND objid = %" PRIu32
		 " AND objsubid = 1 AND granted", (uint32_t)(h >> 32),
		 (uint32_t)h);
	return sql_long(db, q);
}

/* A restart: the stopped carmyd's backend can still hold the name, idle,
 * while it exits. Open waits for the name instead of refusing at once. */
START_TEST(test_open_waits_for_a_name_let_go_meanwhile)
{
	pthread_barrier_t go;
	struct opener o = { .name = "heir" };
	char info[1024], q[128];
	PGconn *holder;
	pthread_t t;

	snprintf(info, sizeof(info), "%s application_name=holder", conninfo);
	holder = PQconnectdb(info);
	ck_assert_int_eq(PQstatus(holder), CONNECTION_OK);
	snprintf(q, sizeof(q), "SELECT pg_advisory_lock(%" PRId64 ")",
		 name_key("heir"));
	sql(holder, q);
	pthread_barrier_init(&go, NULL, 1);
	o.go = &go;
	ck_assert_int_eq(pthread_create(&t, NULL, open_thread, &o), 0);
	wait_lock_wait("carmyd");
	snprintf(q, sizeof(q), "SELECT pg_advisory_unlock(%" PRId64 ")",
		 name_key("heir"));
	sql(holder, q);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	pthread_barrier_destroy(&go);
	ck_assert_msg(o.rc == 0, "open: %d %s", o.rc, o.err);
	ops->close(o.st);
	PQfinish(holder);
}
END_TEST

/*
 * A RESERVE of identity ("p", id) on store *a (database carmy_lost) that
 * commits while its answer is lost: a COMMIT flushed here that waits for a
 * standby that never comes, its backend terminated meanwhile (the client
 * is told nothing), and no new connection to be had, so it is answered
 * failed. *lost is a connection to carmy_lost made before; the database
 * takes no other until the caller allows it again (allow_lost()).
 */
static void lose_a_reservation_commit(void **a, struct ex *x, char *id,
				      size_t idlen, PGconn **lost)
{
	time_t end = time(NULL) + WAIT_S;
	struct waiter w;

	sql(db, "SET synchronous_commit = local");	/* never waits */
	sql(db, "DROP DATABASE IF EXISTS carmy_lost WITH (FORCE)");
	sql(db, "CREATE DATABASE carmy_lost");
	*a = open_as("a", "dbname=carmy_lost application_name=lost-commit");
	*lost = db_connect("dbname=carmy_lost");
	sql(db, "ALTER SYSTEM SET synchronous_standby_names = 'carmy_nobody'");
	sql(db, "SELECT pg_reload_conf()");
	/* The server reads it in its own time: until then a RESERVE
	 * commits without waiting, and the next one is tried. */
	for (int i = 0;; i++) {
		snprintf(id, idlen, "lost-%d", i);
		make_ex(x, "p", id);
		waiter_init(&w, CARMY_STORE_RESERVE, x);
		ops->submit(*a, &w.req);
		while (!is_done(&w) && sql_long(db, "SELECT count(*) FROM "
				"pg_stat_activity WHERE application_name = "
				"'lost-commit' AND wait_event = 'SyncRep'")
				== 0)
			ck_assert_msg(time(NULL) < end, "no commit waited");
		if (!is_done(&w))
			break;
		ck_assert_int_eq(wait_done(&w), 0);
		waiter_destroy(&w);
	}
	sql(db, "ALTER DATABASE carmy_lost ALLOW_CONNECTIONS false");
	terminate("lost-commit");
	ck_assert_int_eq(wait_done(&w), -ECONNREFUSED);
	waiter_destroy(&w);
	sql(db, "ALTER SYSTEM RESET synchronous_standby_names");
	sql(db, "SELECT pg_reload_conf()");
}

static void allow_lost(void)
{
	sql(db, "ALTER DATABASE carmy_lost ALLOW_CONNECTIONS true");
}

START_TEST(test_a_reservation_whose_commit_answer_was_lost_is_withdrawn)
{
	struct waiter w2;
	struct ex x, x2;
	PGconn *lost;
	void *a;
	char id[32];

	lose_a_reservation_commit(&a, &x, id, sizeof(id), &lost);
	/* It did commit, for an execution reported failed. */
	ck_assert_int_eq(rows_of_exec(lost, x.exec), 1);
	/* While another session holds that row, the withdrawal waits out
	 * its lock timeout and is left for later: other requests go on.
	 * (Held before the store can connect: it withdraws by itself.) */
	{
		const char *v[1] = { (const char *)x.exec };
		int len[1] = { 16 }, fmt[1] = { 1 };
		PGresult *r;
		struct ex u;

		sql(lost, "BEGIN");
		r = PQexecParams(lost, "SELECT 1 FROM carmy_executions WHERE "
				 "exec = $1 FOR UPDATE", 1, NULL, v, len, fmt,
				 0);
		ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
		PQclear(r);
		allow_lost();
		make_ex(&u, "p", "unrelated-to-the-lost");
		ck_assert_int_eq(reserve_when_back(a, &u, NULL), 0);
		ck_assert_int_eq(rows_of_exec(lost, x.exec), 1);
		sql(lost, "ROLLBACK");
	}
	/* The next request finds the identity free: the row went first. */
	make_ex(&x2, "p", id);
	ck_assert_int_eq(reserve_when_back(a, &x2, &w2), 0);
	ck_assert_int_eq(w2.ntaken, 0);
	ck_assert_int_eq(rows_of_exec(lost, x.exec), 0);
	ck_assert_int_eq(rows_of_exec(lost, x2.exec), 1);
	PQfinish(lost);
	ops->close(a);
	sql(db, "DROP DATABASE carmy_lost WITH (FORCE)");
}
END_TEST

/* The withdrawal waits for no request to carry it: the row goes once the
 * database is back, with nothing else sent. Kept, every instance would
 * find the identity held, running, by an execution that never ran, for
 * as long as this one had nothing else to write. */
START_TEST(test_a_lost_reservation_is_withdrawn_without_another_request)
{
	time_t end;
	PGconn *lost;
	struct ex x;
	void *a;
	char id[32];

	lose_a_reservation_commit(&a, &x, id, sizeof(id), &lost);
	ck_assert_int_eq(rows_of_exec(lost, x.exec), 1);
	allow_lost();
	end = time(NULL) + WAIT_S;
	while (rows_of_exec(lost, x.exec) != 0) {
		ck_assert_msg(time(NULL) < end, "the row of %s stands", id);
		usleep(10000);
	}
	PQfinish(lost);
	ops->close(a);
	sql(db, "DROP DATABASE carmy_lost WITH (FORCE)");
}
END_TEST

/* The pid of the one backend named app. */
static long backend_pid(const char *app)
{
	char q[256];

	snprintf(q, sizeof(q), "SELECT pid FROM pg_stat_activity WHERE "
		 "application_name = '%s'", app);
	return sql_long(db, q);
}

/* Rows of exec x completed, on c, with a result of len bytes equal to
 * want's first len bytes (want NULL: any). */
static long completed_with(PGconn *c, const uint8_t exec[16],
			   const uint8_t *want, uint32_t len)
{
	char n[16];
	const char *v[3] = { (const char *)exec, n, (const char *)want };
	int lens[3] = { 16, 0, (int)len }, fmt[3] = { 1, 0, 1 };
	PGresult *r;
	long rows;

	snprintf(n, sizeof(n), "%u", len);
	r = PQexecParams(c, want ? "SELECT count(*) FROM carmy_executions "
			 "WHERE exec = $1 AND state = 2 AND length(result) = "
			 "$2::int AND result = $3" : "SELECT count(*) FROM "
			 "carmy_executions WHERE exec = $1 AND state = 2 AND "
			 "length(result) = $2::int", want ? 3 : 2, NULL, v,
			 lens, fmt, 0);
	ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
	rows = atol(PQgetvalue(r, 0, 0));
	PQclear(r);
	return rows;
}

/*
 * Commits wait for a standby that never comes. Reading the setting back is
 * not enough: a backend waits only once the checkpointer, in its own time,
 * has published that a standby is named. So a probe session commits a row
 * (a commit waits only if it took an xid and wrote WAL) until it is seen
 * waiting for the standby, and is then cancelled; from then on every
 * backend's next commit waits. The callers' own session has
 * synchronous_commit = local.
 */
static void standby_never_answers(void)
{
	time_t end = time(NULL) + WAIT_S;
	PGconn *probe;
	PGresult *r;
	PGcancel *cancel;
	char q[160], err[256];
	bool waiting = false;

	sql(db, "CREATE TABLE IF NOT EXISTS carmy_syncrep_probe (n int)");
	probe = db_connect("application_name=carmy-syncrep-probe "
			   "options='-c client_min_messages=error'");
	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_stat_activity WHERE "
		 "pid = %d AND wait_event = 'SyncRep'", PQbackendPID(probe));
	sql(db, "ALTER SYSTEM SET synchronous_standby_names = 'carmy_nobody'");
	sql(db, "SELECT pg_reload_conf()");
	while (!waiting) {
		ck_assert_int_eq(PQsendQuery(probe, "INSERT INTO "
					     "carmy_syncrep_probe VALUES (1)"),
				 1);
		for (;;) {
			ck_assert_msg(time(NULL) < end, "no commit waited for "
				      "the standby within %d s", WAIT_S);
			ck_assert_int_eq(PQconsumeInput(probe), 1);
			if (!PQisBusy(probe))
				break;
			if (sql_long(db, q) > 0) {
				waiting = true;
				break;
			}
			usleep(1000);
		}
		if (waiting)
			break;
		/* Committed without waiting: the flag is not out yet. */
		while ((r = PQgetResult(probe)) != NULL) {
			ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK,
				      "probe: %s", PQerrorMessage(probe));
			PQclear(r);
		}
	}
	cancel = PQgetCancel(probe);
	ck_assert_ptr_nonnull(cancel);
	ck_assert_msg(PQcancel(cancel, err, sizeof(err)) == 1, "cancel: %s",
		      err);
	PQfreeCancel(cancel);
	/* Committed here, the wait cancelled: answered with a warning. */
	while ((r = PQgetResult(probe)) != NULL)
		PQclear(r);
	PQfinish(probe);
}

/* How many identities a lost-completion test reserves ahead, should a
 * COMPLETE commit without waiting all the same; with the probe above the
 * first one waits. */
#define LOST_TRIES 8

/* Reserve xs[0..LOST_TRIES), named after id, then make commits wait for a
 * standby that never answers. */
static void reserve_then_stall_commits(void *a, struct ex *xs, const char *id)
{
	char name[64];

	for (int i = 0; i < LOST_TRIES; i++) {
		snprintf(name, sizeof(name), "%s-%d", id, i);
		make_ex(&xs[i], "p", name);
		ck_assert_int_eq(reserve(a, &xs[i], NULL), 0);
	}
	standby_never_answers();
}

/*
 * Submit the COMPLETE of xs[0], xs[1]... into w until one is not answered
 * recorded at once (the first, once standby_never_answers() has seen a
 * commit wait; the rest are there should one not). With in_syncrep, "not at
 * once" is its backend seen waiting for the standby, w still unanswered;
 * without, w answered with an error within BOUNDED_S (the store's
 * timeout= ran out).
 * Returns the index of the lost one.
 */
static int lost_completion(void *a, struct ex *xs, struct waiter *w,
			   bool in_syncrep)
{
	time_t end = time(NULL) + WAIT_S;

	for (int i = 0; i < LOST_TRIES; i++) {
		waiter_init(w, CARMY_STORE_COMPLETE, &xs[i]);
		ops->submit(a, &w->req);
		if (!in_syncrep) {
			if (wait_within(w, BOUNDED_S) != 0)
				return i;
			waiter_destroy(w);
			continue;
		}
		while (!is_done(w) && sql_long(db, "SELECT count(*) FROM "
				"pg_stat_activity WHERE application_name = "
				"'lost-commit' AND wait_event = 'SyncRep'") == 0)
			ck_assert_msg(time(NULL) < end, "no commit waited");
		if (!is_done(w))
			return i;
		ck_assert_int_eq(wait_done(w), 0);
		waiter_destroy(w);
	}
	ck_abort_msg("%d completions committed at once", LOST_TRIES);
	return -1;
}

/* The database back, with commits that wait for nobody. */
static void database_back(void)
{
	sql(db, "ALTER SYSTEM RESET synchronous_standby_names");
	sql(db, "SELECT pg_reload_conf()");
	sql(db, "ALTER DATABASE carmy_lost ALLOW_CONNECTIONS true");
}

/* x stands completed in carmy_lost with its own result; then the store
 * is closed and the database dropped. */
static void lost_ends_completed(void *a, const struct ex *x)
{
	PGconn *lost = db_connect("dbname=carmy_lost");

	ck_assert_int_eq(completed_with(lost, x->exec, x->result,
					x->result_len), 1);
	PQfinish(lost);
	ops->close(a);
	sql(db, "DROP DATABASE carmy_lost WITH (FORCE)");
}

/* A COMPLETE whose COMMIT's answer is lost (the harness of the RESERVE's
 * test above), then no connection: it is not answered failed; the store
 * sends it again until the database takes it, and answers it recorded. */
START_TEST(test_a_completion_whose_commit_answer_was_lost_is_sent_until_recorded)
{
	struct ex xs[LOST_TRIES], y;
	struct waiter w;
	void *a;
	int lost;

	sql(db, "SET synchronous_commit = local");	/* never waits */
	sql(db, "DROP DATABASE IF EXISTS carmy_lost WITH (FORCE)");
	sql(db, "CREATE DATABASE carmy_lost");
	a = open_as("a", "dbname=carmy_lost application_name=lost-commit");
	reserve_then_stall_commits(a, xs, "lost-completion");
	lost = lost_completion(a, xs, &w, true);
	sql(db, "ALTER DATABASE carmy_lost ALLOW_CONNECTIONS false");
	terminate("lost-commit");
	/* A request behind it fails for want of a connection: by then the
	 * completion has been tried again and not answered. */
	make_ex(&y, "p", "behind-the-lost");
	ck_assert_int_eq(reserve(a, &y, NULL), -ECONNREFUSED);
	ck_assert_msg(!is_done(&w), "a completion that may have committed "
		      "was answered (%d) without the database", w.rc);
	database_back();
	/* Sent again once the database is back: recorded, this result. */
	ck_assert_int_eq(wait_done(&w), 0);
	waiter_destroy(&w);
	lost_ends_completed(a, &xs[lost]);
}
END_TEST

/* Past the store's timeout= without the database, the completion whose
 * commit answer was lost is answered failed; completed again with the
 * same result it is answered recorded once the database is back, and
 * with another result refused: one result, whatever is sent again. */
START_TEST(test_a_completion_answered_failed_after_the_timeout_keeps_its_one_result)
{
	char args[1024], err[512] = "";
	time_t end = time(NULL) + WAIT_S;
	struct ex xs[LOST_TRIES], x, other;
	struct waiter w;
	void *a = NULL;
	int rc;

	sql(db, "SET synchronous_commit = local");	/* never waits */
	sql(db, "DROP DATABASE IF EXISTS carmy_lost WITH (FORCE)");
	sql(db, "CREATE DATABASE carmy_lost");
	snprintf(args, sizeof(args), "instance=a timeout=1 %s dbname=carmy_lost "
		 "application_name=lost-commit", conninfo);
	ck_assert_msg(ops->open(args, &a, err, sizeof(err)) == 0, "open: %s",
		      err);
	reserve_then_stall_commits(a, xs, "lost-then-failed");
	sql(db, "ALTER DATABASE carmy_lost ALLOW_CONNECTIONS false");
	/* Its commit waits for the standby; the store hears nothing for
	 * 1 s, takes the server for gone, and finds no connection. */
	x = xs[lost_completion(a, xs, &w, false)];
	ck_assert_int_lt(wait_within(&w, BOUNDED_S), 0);
	waiter_destroy(&w);
	/* Sent again by its client meanwhile: failed, no database. */
	ck_assert_int_lt(op_wait(a, CARMY_STORE_COMPLETE, &x, NULL), 0);
	database_back();
	/* Until the store is back (its old backend, let go by the reset,
	 * may hold the name a moment longer): */
	while ((rc = op_wait(a, CARMY_STORE_COMPLETE, &x, NULL)) ==
	       -ECONNREFUSED || rc == -EBUSY)
		ck_assert_msg(time(NULL) < end, "still %d", rc);
	ck_assert_int_eq(rc, 0);
	other = x;
	other.result[0] ^= 0xff;
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &other, NULL),
			 -ESTALE);
	lost_ends_completed(a, &x);
}
END_TEST

/* What the completion of the test below rides with, for its done(). */
static struct {
	void *st;
	PGconn *c;
	const struct ex *x;
	struct ex refused_ex;
	struct waiter w, refused;
} ride;

/* The completion's done(), on the store's thread: answered failed, the
 * store now keeps a copy of it, to run at the head of the next batch. Its
 * row is set back to running (as if its commit had never landed), and a
 * request whose statement the database refuses is queued: that next
 * batch is the copy and it. */
static void on_copied(struct carmy_store_req *req, int rc)
{
	const char *v[1] = { (const char *)ride.x->exec };
	int len[1] = { 16 }, fmt[1] = { 1 };
	PGresult *r;

	if (rc != 0) {
		__atomic_store_n(&skewed_nulls, 0, __ATOMIC_RELEASE);
		r = PQexecParams(ride.c, "UPDATE carmy_executions SET state "
				 "= 1, finished_ns = NULL, status = NULL, "
				 "result_code = NULL, result = NULL WHERE exec "
				 "= $1", 1, NULL, v, len, fmt, 0);
		ck_assert_int_eq(PQresultStatus(r), PGRES_COMMAND_OK);
		PQclear(r);
		waiter_init(&ride.refused, CARMY_STORE_RESERVE,
			    &ride.refused_ex);
		ops->submit(ride.st, &ride.refused.req);
	}
	on_done(req, rc);
}

/* A completion out of step on every run up to the store's timeout= is
 * answered failed, and the store sends its own copy until the database
 * takes it: a batch that fails for another request's sake (an insert a
 * trigger refuses) does not drop the copy, which runs again after the
 * backoff and is recorded. */
START_TEST(test_a_kept_completion_outlives_a_batch_another_request_failed)
{
	char args[1024], err[512] = "";
	time_t end = time(NULL) + WAIT_S;
	struct ex x;
	void *a = NULL;

	snprintf(args, sizeof(args), "instance=a connections=1 timeout=1 %s",
		 conninfo);
	ck_assert_msg(ops->open(args, &a, err, sizeof(err)) == 0, "open: %s",
		      err);
	sql(db, "CREATE OR REPLACE FUNCTION carmy_test_refuse() RETURNS "
	    "trigger LANGUAGE plpgsql AS $$ BEGIN IF convert_from("
	    "NEW.request_id, 'UTF8') LIKE 'refused-%' THEN RAISE EXCEPTION "
	    "'refused'; END IF; RETURN NEW; END $$");
	sql(db, "CREATE TRIGGER carmy_test_refuse BEFORE INSERT ON "
	    "carmy_executions FOR EACH ROW EXECUTE FUNCTION "
	    "carmy_test_refuse()");
	make_ex(&x, "p", "kept");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	make_ex(&ride.refused_ex, "p", "refused-1");
	ride.st = a;
	ride.c = db_connect("");
	ride.x = &x;
	waiter_init(&ride.w, CARMY_STORE_COMPLETE, &x);
	ride.w.req.done = on_copied;
	/* Out of step on every run: the bare update's row count, then the
	 * full statement's first flag (until on_copied()). */
	__atomic_store_n(&skewed_tags, 1, __ATOMIC_RELEASE);
	skew_null_at(0, 0);
	__atomic_store_n(&skewed_nulls, INT32_MAX, __ATOMIC_RELEASE);
	ops->submit(a, &ride.w.req);
	ck_assert_int_eq(wait_done(&ride.w), -EIO);
	ck_assert_int_eq(wait_done(&ride.refused), -EIO);
	while (completed_with(db, x.exec, x.result, x.result_len) != 1) {
		ck_assert_msg(time(NULL) < end, "the completion is not "
			      "recorded after %d s", WAIT_S);
		usleep(10000);
	}
	waiter_destroy(&ride.refused);
	waiter_destroy(&ride.w);
	PQfinish(ride.c);
	ops->close(a);
}
END_TEST

/* FNV-1a, 64 bits, of n bytes, from h: the store's routing hash. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h ^= ((const uint8_t *)p)[i];
		h *= 1099511628211u;
	}
	return h;
}

/* The worker, of n, that a RESERVE of x goes to (store_pg.c: route(): by
 * its identity, each part's length in two bytes, big-endian, then its
 * bytes), and the one any other request of x goes to (by its exec id). */
static unsigned reserve_worker(const struct ex *x, unsigned n)
{
	const char *part[3] = { x->principal, "session", x->id };
	uint64_t h = 14695981039346656037u;

	for (int k = 0; k < 3; k++) {
		size_t len = strlen(part[k]);
		uint8_t b[2] = { (uint8_t)(len >> 8), (uint8_t)len };

		h = fnv(h, b, 2);
		h = fnv(h, part[k], len);
	}
	return (unsigned)(h % n);
}

static unsigned exec_worker(const struct ex *x, unsigned n)
{
	return (unsigned)(fnv(14695981039346656037u, x->exec, 16) % n);
}

/* With several connections, one lost while its transaction waits in its
 * commit (for a synchronous standby that never answers, past the store's
 * timeout=) is replaced, but nothing runs on the new one while the old
 * backend lives: the reservation, reported failed, is withdrawn only once
 * that transaction has ended, so that the row it commits then does not
 * stand for good (a withdrawal run before would find nothing, and be
 * forgotten). On worker 1: worker 0's old backend holds the name. */
START_TEST(test_a_new_connection_runs_nothing_while_the_old_backend_lives)
{
	char args[1024], err[512] = "", id[32], q[160];
	time_t end;
	struct waiter w;
	struct ex x, other;
	PGconn *lost;
	void *a = NULL;

	sql(db, "SET synchronous_commit = local");	/* never waits */
	sql(db, "DROP DATABASE IF EXISTS carmy_lost WITH (FORCE)");
	sql(db, "CREATE DATABASE carmy_lost");
	/* timeout= short of the 2 s a new connection waits for its lock:
	 * that wait is cut to fit (750 ms), and its end is a refusal
	 * (-EBUSY), not a server taken for gone. */
	snprintf(args, sizeof(args), "instance=a connections=2 timeout=1 %s "
		 "dbname=carmy_lost application_name=old-backend", conninfo);
	ck_assert_msg(ops->open(args, &a, err, sizeof(err)) == 0, "open: %s",
		      err);
	lost = db_connect("dbname=carmy_lost");
	for (int i = 0;; i++) {
		snprintf(id, sizeof(id), "stalled-%d", i);
		make_ex(&x, "p", id);
		if (reserve_worker(&x, 2) == 1)
			break;
	}
	do
		make_ex(&other, "p", "released");
	while (exec_worker(&other, 2) != 1);

	standby_never_answers();
	waiter_init(&w, CARMY_STORE_RESERVE, &x);
	ops->submit(a, &w.req);
	ck_assert_int_eq(wait_within(&w, BOUNDED_S), -EBUSY);
	waiter_destroy(&w);
	/* Still nothing on worker 1's new connection (a release that
	 * deletes nothing commits without a standby): */
	ck_assert_int_eq(op_wait(a, CARMY_STORE_RELEASE, &other, NULL),
			 -EBUSY);

	/* The old backend ends once its commit does: the row stands, and
	 * only then goes. */
	snprintf(q, sizeof(q), "SELECT (count(*) = 0)::int FROM "
		 "pg_stat_activity WHERE pid = %ld", sql_long(db, "SELECT pid "
		 "FROM pg_stat_activity WHERE datname = 'carmy_lost' AND "
		 "wait_event = 'SyncRep'"));
	sql(db, "ALTER SYSTEM RESET synchronous_standby_names");
	sql(db, "SELECT pg_reload_conf()");
	wait_until(db, q);
	end = time(NULL) + WAIT_S;
	while (rows_of_exec(lost, x.exec) != 0) {
		ck_assert_msg(time(NULL) < end, "the row of %s stands", id);
		usleep(10000);
	}
	ck_assert_int_eq(op_wait(a, CARMY_STORE_RELEASE, &other, NULL), 0);
	PQfinish(lost);
	ops->close(a);
	sql(db, "DROP DATABASE carmy_lost WITH (FORCE)");
}
END_TEST

/* The stopped server's processes, SIGCONT'd by teardown should a test
 * fail while they are stopped. */
static pid_t stopped[2];

static void stop_or_go(int sig)
{
	for (int i = 0; i < 2; i++)
		if (stopped[i] > 0)
			kill(stopped[i], sig);
	if (sig == SIGCONT)
		stopped[0] = stopped[1] = 0;
}

/* The parent of process pid (/proc/PID/stat's fourth field). */
static pid_t parent_of(pid_t pid)
{
	char path[64], comm[64];
	int ppid = 0;
	char st;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fscanf(f, "%*d (%63[^)]) %c %d", comm, &st, &ppid),
			 3);
	fclose(f);
	return (pid_t)ppid;
}

#define BIG_RESULT (8u << 20)	/* far past both sockets' buffers */

/* A server that stops reading (its backend and postmaster stopped) while
 * a batch of several MB is sent: the send is bounded by timeout= as a
 * wait for an answer is, the request fails, and once the server runs
 * again the store is back, with the completion, which may have reached
 * it, sent again and recorded. */
START_TEST(test_a_server_that_stops_reading_fails_a_large_batch_in_bounded_time)
{
	char args[1024], err[512] = "";
	uint8_t *big = malloc(BIG_RESULT);
	struct waiter w;
	struct ex x, y;
	void *a = NULL;
	char q[256];

	ck_assert_ptr_nonnull(big);
	for (uint32_t i = 0; i < BIG_RESULT; i++)
		big[i] = (uint8_t)(i * 7 + 1);
	snprintf(args, sizeof(args), "instance=a connections=1 timeout=2 %s "
		 "connect_timeout=2 application_name=stall-test", conninfo);
	ck_assert_msg(ops->open(args, &a, err, sizeof(err)) == 0, "open: %s",
		      err);
	make_ex(&x, "p", "stall");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	stopped[0] = (pid_t)backend_pid("stall-test");
	stopped[1] = parent_of(stopped[0]);
	stop_or_go(SIGSTOP);

	waiter_init(&w, CARMY_STORE_COMPLETE, &x);
	w.rec.result = big;
	w.rec.result_len = BIG_RESULT;
	ops->submit(a, &w.req);
	ck_assert_int_lt(wait_within(&w, BOUNDED_S), 0);
	waiter_destroy(&w);

	stop_or_go(SIGCONT);
	make_ex(&y, "p", "after-the-stall");
	ck_assert_int_eq(reserve_when_back(a, &y, NULL), 0);
	/* The completion, kept, is sent again until it is recorded. */
	snprintf(q, sizeof(q), "SELECT count(*) FROM carmy_executions WHERE "
		 "exec = decode('");
	for (int k = 0; k < 16; k++)
		snprintf(q + strlen(q), sizeof(q) - strlen(q), "%02x",
			 x.exec[k]);
	snprintf(q + strlen(q), sizeof(q) - strlen(q), "', 'hex') AND "
		 "state = 2");
	wait_until(db, q);
	ck_assert_int_eq(completed_with(db, x.exec, big, BIG_RESULT), 1);
	ops->close(a);
	free(big);
}
END_TEST

START_TEST(test_an_unreachable_server_fails_requests_without_a_wait_each)
{
	char dir[] = "/tmp/carmy-pgtest.XXXXXX", sock[160], hole[64];
	char real[512], extra[600];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, attempts = 0, answered;
	time_t end;
	void *a;
	struct ex x;

	/* The server's socket reached through a link the test swaps for a
	 * black hole: a socket that queues connections and never answers,
	 * so each attempt to connect takes connect_timeout (2 s). */
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(real, sizeof(real), "%s/.s.PGSQL.%s", PQhost(db), PQport(db));
	snprintf(sock, sizeof(sock), "%s/.s.PGSQL.%s", dir, PQport(db));
	snprintf(hole, sizeof(hole), "%s/hole", dir);
	ck_assert_int_eq(symlink(real, sock), 0);
	snprintf(extra, sizeof(extra), "host=%s connect_timeout=2 "
		 "application_name=hole-test", dir);
	a = open_as("a", extra);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
	ck_assert_int_ge(fd, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", hole);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(fd, 64), 0);
	ck_assert_int_eq(rename(hole, sock), 0);
	terminate("hole-test");

	make_ex(&x, "p", "hole");
	/* One attempt to connect, which fails: */
	ck_assert_int_eq(reserve(a, &x, NULL), -ECONNREFUSED);
	/* Then the store backs off: requests fail at once, not one
	 * connect_timeout each. */
	end = time(NULL) + 10;
	for (answered = 0; answered < OUTAGE_N && time(NULL) < end;
	     answered++)
		ck_assert_int_eq(reserve(a, &x, NULL), -ECONNREFUSED);
	ck_assert_msg(answered == OUTAGE_N, "%d requests failed in 10 s",
		      answered);
	for (int c; (c = accept(fd, NULL, NULL)) >= 0; attempts++)
		close(c);
	ck_assert_msg(attempts >= 1 && attempts <= 5, "%d attempts to "
		      "connect for %d requests", attempts, OUTAGE_N + 1);

	snprintf(hole, sizeof(hole), "%s/link", dir);
	ck_assert_int_eq(symlink(real, hole), 0);
	ck_assert_int_eq(rename(hole, sock), 0);
	ck_assert_int_eq(reserve_when_back(a, &x, NULL), 0);
	ops->close(a);
	close(fd);
	unlink(sock);
	rmdir(dir);
}
END_TEST

START_TEST(test_batches_reserving_shared_identities_in_opposite_orders_do_not_deadlock)
{
	static const char *const app[2] = { "dl-a", "dl-b" };
	static const char *const role[4] = { "w", "gate", "x", "y" };
	struct waiter w[2][4];
	struct ex x[2][4];
	PGconn *gate_w, *gate_p;
	void *st[2];
	long pid[2];
	time_t end;
	char extra[256];

	/* A database of its own: its deadlock count is this test's. */
	sql(db, "DROP DATABASE IF EXISTS carmy_dl WITH (FORCE)");
	sql(db, "CREATE DATABASE carmy_dl");
	for (int k = 0; k < 2; k++) {
		snprintf(extra, sizeof(extra), "dbname=carmy_dl "
			 "application_name=%s options='-c "
			 "deadlock_timeout=10ms'", app[k]);
		st[k] = open_one(k ? "b" : "a", extra);
	}
	gate_w = db_connect("dbname=carmy_dl");
	gate_p = db_connect("dbname=carmy_dl");
	for (int round = 0; round < DL_ROUNDS; round++) {
		char id[4][32];

		/* On each instance: a batch held on gate_w's insert, then
		 * one batch of gate_p's identity (held on it: both start
		 * at once when it commits), x and y; b submits y first. */
		for (int i = 0; i < 4; i++)
			snprintf(id[i], sizeof(id[i]), "%d-%d-%s", round, i,
				 role[i]);
		sql(gate_w, "BEGIN");
		insert_row(gate_w, "dl", id[0], NULL);
		sql(gate_p, "BEGIN");
		insert_row(gate_p, "dl", id[1], NULL);
		for (int k = 0; k < 2; k++) {
			for (int i = 0; i < 4; i++) {
				make_ex(&x[k][i], "dl", id[i]);
				waiter_init(&w[k][i], CARMY_STORE_RESERVE,
					    &x[k][i]);
			}
			ops->submit(st[k], &w[k][0].req);
			wait_lock_wait(app[k]);
			ops->submit(st[k], &w[k][1].req);
			ops->submit(st[k], &w[k][k ? 3 : 2].req);
			ops->submit(st[k], &w[k][k ? 2 : 3].req);
		}
		sql(gate_w, "COMMIT");
		for (int k = 0; k < 2; k++) {
			ck_assert_int_eq(wait_done(&w[k][0]), 0);
			wait_lock_wait(app[k]);
		}
		sql(gate_p, "COMMIT");
		for (int i = 2; i < 4; i++) {
			for (int k = 0; k < 2; k++)
				ck_assert_int_eq(wait_done(&w[k][i]), 0);
			ck_assert_int_eq(w[0][i].ntaken + w[1][i].ntaken, 1);
		}
		for (int k = 0; k < 2; k++)
			for (int i = 0; i < 4; i++) {
				if (i == 1)
					ck_assert_int_eq(wait_done(&w[k][i]),
							 0);
				waiter_destroy(&w[k][i]);
			}
	}
	PQfinish(gate_w);
	PQfinish(gate_p);
	/* A backend reports its deadlocks by the time it has exited. */
	for (int k = 0; k < 2; k++) {
		pid[k] = backend_pid(app[k]);
		ops->close(st[k]);
	}
	end = time(NULL) + WAIT_S;
	for (int k = 0; k < 2; k++)
		while (kill((pid_t)pid[k], 0) == 0 || errno != ESRCH)
			ck_assert_msg(time(NULL) < end, "backend %ld still "
				      "there", pid[k]);
	ck_assert_int_eq(sql_long(db, "SELECT deadlocks FROM "
			 "pg_stat_database WHERE datname = 'carmy_dl'"), 0);
	sql(db, "DROP DATABASE carmy_dl WITH (FORCE)");
}
END_TEST

START_TEST(test_a_request_the_database_would_refuse_fails_alone)
{
	void *a = open_as("a", "");
	struct waiter bad, good;
	struct ex x, y;

	make_ex(&x, "p", "bad");
	make_ex(&y, "p", "good");
	waiter_init(&bad, CARMY_STORE_RESERVE, &x);
	bad.rec.len[1] = 0;	/* an empty session */
	waiter_init(&good, CARMY_STORE_RESERVE, &y);
	ops->submit(a, &bad.req);
	ops->submit(a, &good.req);
	ck_assert_int_eq(wait_done(&bad), -EINVAL);
	ck_assert_int_eq(wait_done(&good), 0);
	waiter_destroy(&bad);
	waiter_destroy(&good);
	ops->close(a);
}
END_TEST

/* The requests of one batch, submitted while st's worker is held (its
 * backend named app) by a RESERVE whose insert waits for the advisory
 * lock GATE_KEY (sleepy_inserts), which the test's connection holds
 * until all are submitted: they go as one transaction however slow the
 * machine, each kind of a run as one set-based statement from SET_MIN,
 * else a statement each. */
static void submit_batch(void *st, const char *app, struct waiter *w,
			 const enum carmy_store_op *op, struct ex *const *x,
			 int n)
{
	struct waiter hold;
	struct ex h;
	char id[64], q[256];

	sql(db, "SELECT pg_advisory_lock(" GATE_KEY ")");
	snprintf(id, sizeof(id), "gate-%u", exec_seq);
	make_ex(&h, "hold", id);
	waiter_init(&hold, CARMY_STORE_RESERVE, &h);
	ops->submit(st, &hold.req);
	snprintf(q, sizeof(q), "SELECT count(*) FROM pg_stat_activity WHERE "
		 "application_name = '%s' AND wait_event_type = 'Lock' AND "
		 "wait_event = 'advisory'", app);
	wait_until(db, q);
	for (int i = 0; i < n; i++) {
		waiter_init(&w[i], op[i], x[i]);
		if (op[i] == CARMY_STORE_RESOLVE)
			as_resolved(&w[i].rec, true);
		ops->submit(st, &w[i].req);
	}
	sql(db, "SELECT pg_advisory_unlock(" GATE_KEY ")");
	ck_assert_int_eq(wait_done(&hold), 0);
	waiter_destroy(&hold);
}

/* A set-based statement's answer out of step after some of its rows
 * were judged, each taking the row standing (kept: pointing into the
 * answer): the batch runs again in full, and each request is told the
 * row standing, as if nothing had gone wrong. */
START_TEST(test_a_set_answer_out_of_step_keeps_nothing_of_it)
{
	enum { N = 4 };
	void *a = open_one("a", "application_name=askew-set");
	void *b = open_as("b", "");
	struct ex theirs[N], mine[N], *x[N];
	enum carmy_store_op op[N];
	struct waiter w[N];
	char id[32];

	for (int i = 0; i < N; i++) {
		snprintf(id, sizeof(id), "askew-%d", i);
		make_ex(&theirs[i], "s", id);
		make_ex(&mine[i], "s", id);
		ck_assert_int_eq(reserve(b, &theirs[i], NULL), 0);
		x[i] = &mine[i];
		op[i] = CARMY_STORE_RESERVE;
	}
	sleepy_inserts();
	note_statements();
	/* The full set's third row, its first flag (after the ordinal):
	 * the rows before it were judged taken. */
	skew_null_at(2, 1);
	submit_batch(a, "askew-set", w, op, x, N);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(wait_done(&w[i]), 0);
		ck_assert_msg(!w[i].taken_after_done, "taken() after done()");
		ck_assert_int_eq(w[i].ntaken, 1);
		assert_reserved_as(&w[i].standing, &theirs[i]);
		ck_assert_int_eq(rows_of_exec(db, mine[i].exec), 0);
		snprintf(id, sizeof(id), "askew-%d", i);
		ck_assert_int_eq(sent(id, BARE_SET), 1);
		ck_assert_int_eq(sent(id, FULL_SET), 2);
		waiter_destroy(&w[i]);
	}
	ck_assert_int_eq(skews_left(), 0);
	ops->close(b);
	ops->close(a);
}
END_TEST

/* Resolutions as committed, a batch of them: one bare set-based update
 * gives each row its result and who resolved it; the same batch again
 * takes nothing bare, and the full set, in a later transaction, finds
 * each one's own result. */
START_TEST(test_resolutions_in_a_batch_settle_as_one_set)
{
	enum { N = 4 };
	void *a = open_one("a", "application_name=resolve-set");
	struct ex x[N], *px[N];
	enum carmy_store_op op[N];
	struct waiter w[N];
	char id[32];

	for (int i = 0; i < N; i++) {
		snprintf(id, sizeof(id), "resolved-%d", i);
		make_ex(&x[i], "r", id);
		ck_assert_int_eq(reserve(a, &x[i], NULL), 0);
		px[i] = &x[i];
		op[i] = CARMY_STORE_RESOLVE;
	}
	sleepy_inserts();
	note_statements();
	for (int run = 0; run < 2; run++) {
		submit_batch(a, "resolve-set", w, op, px, N);
		for (int i = 0; i < N; i++) {
			ck_assert_msg(wait_done(&w[i]) == 0, "run %d, request "
				      "%d: %d", run, i, w[i].rc);
			ck_assert_int_eq(rows_as(&x[i], "a",
						 CARMY_STORE_COMPLETED), 1);
			waiter_destroy(&w[i]);
		}
		ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM "
				 "carmy_executions WHERE principal = 'r' AND "
				 "resolved_ns = 1700000000123456789 AND "
				 "resolved_uid = 1001 AND resolved_pid = 777"),
				 N);
		ck_assert_int_eq(sent_updates(BARE_SET), run + 1);
		ck_assert_int_eq(sent_updates(FULL_SET), run);
	}
	ck_assert(xacts_after("query LIKE '" BARE_SET "'",
			      "query LIKE '" FULL_SET "'"));
	ops->close(a);
}
END_TEST

START_TEST(test_one_batch_of_every_kind_answers_each_request_as_alone)
{
	enum { N = 15 };
	void *a = open_one("a", "application_name=mixed-test");
	void *b = open_as("b", "");
	struct ex fresh0, fresh1, c1, c2, c2other, dup1, dup2, same, theirs,
		  theirs_a, tdone, tdone_a, first, borrow, never, rel, relnew;
	struct waiter w[N];
	const enum carmy_store_op op[N] = {
		CARMY_STORE_RESERVE, CARMY_STORE_COMPLETE, CARMY_STORE_RESERVE,
		CARMY_STORE_RESERVE, CARMY_STORE_RESERVE, CARMY_STORE_RESERVE,
		CARMY_STORE_COMPLETE, CARMY_STORE_COMPLETE, CARMY_STORE_RESERVE,
		CARMY_STORE_RESERVE, CARMY_STORE_RESERVE, CARMY_STORE_COMPLETE,
		CARMY_STORE_RELEASE, CARMY_STORE_RESERVE, CARMY_STORE_RESERVE
	};
	struct ex *const x[N] = { &fresh0, &c1, &dup1, &dup2, &same, &same,
		&c2, &c2other, &theirs_a, &tdone_a, &borrow, &never, &rel,
		&relnew, &fresh1 };

	sleepy_inserts();
	make_ex(&fresh0, "m", "fresh-0");
	make_ex(&fresh1, "m", "fresh-1");
	make_ex(&c1, "m", "complete-1");
	make_ex(&c2, "m", "complete-2");
	c2other = c2;
	c2other.result[0] ^= 1;
	make_ex(&dup1, "m", "dup");
	make_ex(&dup2, "m", "dup");
	make_ex(&same, "m", "same");
	make_ex(&theirs, "m", "theirs");
	make_ex(&theirs_a, "m", "theirs");
	make_ex(&tdone, "m", "theirs-done");
	make_ex(&tdone_a, "m", "theirs-done");
	make_ex(&first, "m", "first");
	make_ex(&borrow, "m", "borrow");
	memcpy(borrow.exec, first.exec, 16);
	make_ex(&never, "m", "never");
	make_ex(&rel, "m", "released");
	make_ex(&relnew, "m", "released");
	ck_assert_int_eq(reserve(a, &c1, NULL), 0);
	ck_assert_int_eq(reserve(a, &c2, NULL), 0);
	ck_assert_int_eq(reserve(a, &first, NULL), 0);
	ck_assert_int_eq(reserve(a, &rel, NULL), 0);
	ck_assert_int_eq(reserve(b, &theirs, NULL), 0);
	ck_assert_int_eq(reserve(b, &tdone, NULL), 0);
	ck_assert_int_eq(op_wait(b, CARMY_STORE_COMPLETE, &tdone, NULL), 0);

	note_statements();
	submit_batch(a, "mixed-test", w, op, x, N);
	for (int i = 0; i < N; i++)
		ck_assert_msg(!w[i].taken_after_done, "request %d: taken() "
			      "after done()", i);
	/* New identities, and a request twice: recorded. */
	ck_assert_int_eq(wait_done(&w[0]), 0);
	ck_assert_int_eq(wait_done(&w[14]), 0);
	ck_assert_int_eq(wait_done(&w[4]), 0);
	ck_assert_int_eq(wait_done(&w[5]), 0);
	ck_assert_int_eq(w[0].ntaken + w[14].ntaken + w[4].ntaken +
			 w[5].ntaken, 0);
	ck_assert_int_eq(rows_as(&fresh0, "a", CARMY_STORE_RUNNING), 1);
	ck_assert_int_eq(rows_as(&fresh1, "a", CARMY_STORE_RUNNING), 1);
	ck_assert_int_eq(rows_as(&same, "a", CARMY_STORE_RUNNING), 1);
	/* One identity twice: the first recorded, the second told of it. */
	ck_assert_int_eq(wait_done(&w[2]), 0);
	ck_assert_int_eq(wait_done(&w[3]), 0);
	ck_assert_int_eq(w[2].ntaken, 0);
	ck_assert_int_eq(w[3].ntaken, 1);
	assert_reserved_as(&w[3].standing, &dup1);
	ck_assert_int_eq(w[3].standing.state, CARMY_STORE_RUNNING);
	ck_assert_int_eq(rows_of_exec(db, dup2.exec), 0);
	/* Another instance's, running and completed: told, as it stands. */
	ck_assert_int_eq(wait_done(&w[8]), 0);
	ck_assert_int_eq(w[8].ntaken, 1);
	assert_reserved_as(&w[8].standing, &theirs);
	ck_assert_int_eq(w[8].standing.state, CARMY_STORE_RUNNING);
	ck_assert_int_eq(wait_done(&w[9]), 0);
	ck_assert_int_eq(w[9].ntaken, 1);
	assert_completed_as(&w[9].standing, &tdone);
	ck_assert_int_eq(rows_of_exec(db, theirs_a.exec), 0);
	ck_assert_int_eq(rows_of_exec(db, tdone_a.exec), 0);
	/* An exec id another identity holds: that request alone fails. */
	ck_assert_int_eq(wait_done(&w[10]), -EEXIST);
	ck_assert_int_eq(w[10].ntaken, 0);
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_executions "
			 "WHERE request_id = 'borrow'"), 0);
	/* Completions: recorded; one exec twice, the first result kept and
	 * the other refused; nothing reserved, refused. */
	ck_assert_int_eq(wait_done(&w[1]), 0);
	ck_assert_int_eq(wait_done(&w[6]), 0);
	ck_assert_int_eq(wait_done(&w[7]), -ESTALE);
	ck_assert_int_eq(wait_done(&w[11]), -ESTALE);
	for (int i = 0; i < N; i++)
		(void)wait_done(&w[i]);
	/* Every request answered, what was sent: before the RELEASE, the 8
	 * reservations as one bare set and the 4 completions as another;
	 * after it, 2 lone bare inserts; then, in a later transaction, what
	 * took nothing, in full: 4 reservations as a set, 2 completions
	 * alone (under SET_MIN). */
	ck_assert_int_eq(sent("fresh-0", BARE_SET), 1);
	ck_assert_int_eq(sent("same", BARE_SET), 2);
	ck_assert_int_eq(sent("dup", BARE_SET), 2);
	ck_assert_int_eq(sent("fresh-1", BARE), 1);
	ck_assert_int_eq(sent("released", BARE), 1);
	ck_assert_int_eq(sent_updates(BARE_SET), 1);
	ck_assert_int_eq(sent_updates(BARE_UPDATE), 0);
	ck_assert_int_eq(noted("count(*)", "query NOT LIKE '" BARE_SET "' AND "
			       "query NOT LIKE '" BARE "'"), 6);
	ck_assert_int_eq(sent("dup", FULL_SET), 1);
	ck_assert_int_eq(sent("theirs", FULL_SET), 1);
	ck_assert_int_eq(sent("theirs-done", FULL_SET), 1);
	ck_assert_int_eq(sent("borrow", FULL_SET), 1);
	ck_assert_int_eq(sent_updates(FULL_UPDATE), 2);
	ck_assert_int_eq(xacts("(query LIKE '" BARE_SET "' OR query LIKE '"
			       BARE "') AND coalesce(encode(request_id, "
			       "'escape'), '') NOT LIKE 'gate-%'"), 1);
	ck_assert(xacts_after("query LIKE '" BARE_SET "'",
			      "query NOT LIKE '" BARE_SET "' AND query NOT "
			      "LIKE '" BARE "'"));
	ck_assert_int_eq(rows_as(&c1, "a", CARMY_STORE_COMPLETED), 1);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &c2, NULL), 0);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &c2other, NULL),
			 -ESTALE);
	ck_assert_int_eq(rows_of_exec(db, never.exec), 0);
	/* A release, and after it a new reservation of its identity. */
	ck_assert_int_eq(wait_done(&w[12]), 0);
	ck_assert_int_eq(wait_done(&w[13]), 0);
	ck_assert_int_eq(w[13].ntaken, 0);
	ck_assert_int_eq(rows_of_exec(db, rel.exec), 0);
	ck_assert_int_eq(rows_as(&relnew, "a", CARMY_STORE_RUNNING), 1);
	for (int i = 0; i < N; i++)
		waiter_destroy(&w[i]);
	ops->close(b);
	ops->close(a);
}
END_TEST

/* A batch whose commit answer is lost runs again, whole, in a new
 * transaction: every statement then finds what its first run wrote. The
 * same batch submitted again is that second run, statement for
 * statement. n requests, RESERVEs and COMPLETEs in turn, named
 * prefix-0 up, on a store whose one backend is named app; with note, the
 * statements sent are noted (note_statements). */
static void batch_twice(const char *app, const char *prefix, int n,
			bool note)
{
	char conn[128], id[32];
	void *a;
	struct ex ex[10], *x[10];
	enum carmy_store_op op[10];
	struct waiter w[2][10];

	ck_assert_int_le(n, 10);
	snprintf(conn, sizeof(conn), "application_name=%s", app);
	a = open_one("a", conn);
	sleepy_inserts();
	if (note)
		note_statements();
	for (int i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "%s-%d", prefix, i);
		make_ex(&ex[i], "g", id);
		x[i] = &ex[i];
		op[i] = i % 2 ? CARMY_STORE_COMPLETE : CARMY_STORE_RESERVE;
		if (op[i] == CARMY_STORE_COMPLETE)
			ck_assert_int_eq(reserve(a, &ex[i], NULL), 0);
	}
	for (int run = 0; run < 2; run++) {
		submit_batch(a, app, w[run], op, x, n);
		for (int i = 0; i < n; i++) {
			ck_assert_msg(wait_done(&w[run][i]) == 0, "run %d, "
				      "request %d: %d", run, i,
				      w[run][i].rc);
			ck_assert_int_eq(w[run][i].ntaken, 0);
			ck_assert_int_eq(rows_as(&ex[i], "a", i % 2 ?
						 CARMY_STORE_COMPLETED :
						 CARMY_STORE_RUNNING), 1);
			waiter_destroy(&w[run][i]);
		}
	}
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_executions "
			 "WHERE principal = 'g'"), n);
	ops->close(a);
}

/* Groups of SET_MIN or more: set-based statements, bare, then in the
 * second run taking nothing and followed by the full ones finding their
 * own rows and results. */
START_TEST(test_a_batch_run_again_after_its_commit_answers_the_same)
{
	batch_twice("again-test", "again", 10, true);
	for (int i = 0; i < 10; i += 2) {
		char id[32];

		snprintf(id, sizeof(id), "again-%d", i);
		ck_assert_int_eq(sent(id, BARE_SET), 2);
		ck_assert_int_eq(sent(id, FULL_SET), 1);
	}
	ck_assert_int_eq(sent_updates(BARE_SET), 2);
	ck_assert_int_eq(sent_updates(FULL_SET), 1);
	ck_assert_int_eq(xacts("query LIKE '" BARE_SET "'"), 2);
	ck_assert(xacts_after("query LIKE '" BARE_SET "'", "query LIKE '"
			      FULL_SET "'"));
}
END_TEST

/* Fewer: statements of their own, a RESERVE's bare insert or a
 * COMPLETE's bare update then, in the second run, taking nothing, and its
 * full statement finding its own row or result. */
START_TEST(test_a_small_batch_run_again_after_its_commit_answers_the_same)
{
	batch_twice("small-again-test", "small", 4, true);
	for (int i = 0; i < 4; i += 2) {
		char id[32];

		snprintf(id, sizeof(id), "small-%d", i);
		ck_assert_int_eq(sent(id, BARE), 2);
		ck_assert_int_eq(sent(id, FULL), 1);
	}
	ck_assert_int_eq(sent_updates(BARE_UPDATE), 4);
	ck_assert_int_eq(sent_updates(FULL_UPDATE), 2);
	/* Each run's bare statements in one transaction, the second's full
	 * ones in the next. */
	ck_assert_int_eq(xacts("(request_id IS NULL OR request_id IN "
			       "('small-0', 'small-2')) AND (query LIKE '" BARE
			       "' OR query LIKE '" BARE_UPDATE "')"), 2);
	ck_assert_int_eq(xacts("query LIKE '" FULL "' OR query LIKE '"
			       FULL_UPDATE "'"), 1);
	ck_assert(xacts_after("query LIKE '" BARE "' OR query LIKE '"
			      BARE_UPDATE "'", "query LIKE '" FULL
			      "' OR query LIKE '" FULL_UPDATE "'"));
}
END_TEST

/* Two RESERVEs of one identity, each its own statement in one batch: the
 * first recorded, the second told of it; one request twice: recorded
 * once, both answered so. */
START_TEST(test_twin_reserves_of_their_own_in_one_batch_answer_as_alone)
{
	void *a = open_one("a", "application_name=twins-test");
	struct ex dup1, dup2, same;
	struct waiter w[2];
	const enum carmy_store_op op[2] = { CARMY_STORE_RESERVE,
					    CARMY_STORE_RESERVE };
	struct ex *const dups[2] = { &dup1, &dup2 }, *const twice[2] = {
		&same, &same };

	sleepy_inserts();
	note_statements();
	make_ex(&dup1, "t", "dup");
	make_ex(&dup2, "t", "dup");
	make_ex(&same, "t", "same");

	submit_batch(a, "twins-test", w, op, dups, 2);
	ck_assert_int_eq(wait_done(&w[0]), 0);
	ck_assert_int_eq(wait_done(&w[1]), 0);
	ck_assert_int_eq(w[0].ntaken, 0);
	ck_assert_int_eq(w[1].ntaken, 1);
	assert_reserved_as(&w[1].standing, &dup1);
	ck_assert_int_eq(w[1].standing.state, CARMY_STORE_RUNNING);
	ck_assert_int_eq(rows_as(&dup1, "a", CARMY_STORE_RUNNING), 1);
	ck_assert_int_eq(rows_of_exec(db, dup2.exec), 0);
	ck_assert_int_eq(sent("dup", BARE), 2);
	ck_assert_int_eq(sent("dup", FULL), 1);
	ck_assert_int_eq(xacts("request_id = 'dup' AND query LIKE '" BARE "'"),
			 1);
	ck_assert(xacts_after("request_id = 'dup' AND query LIKE '" BARE "'",
			      "request_id = 'dup' AND query LIKE '" FULL "'"));
	for (int i = 0; i < 2; i++)
		waiter_destroy(&w[i]);

	submit_batch(a, "twins-test", w, op, twice, 2);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(wait_done(&w[i]), 0);
		ck_assert_int_eq(w[i].ntaken, 0);
		waiter_destroy(&w[i]);
	}
	ck_assert_int_eq(rows_as(&same, "a", CARMY_STORE_RUNNING), 1);
	ck_assert_int_eq(sent("same", BARE), 2);
	ck_assert_int_eq(sent("same", FULL), 1);
	ck_assert_int_eq(xacts("request_id = 'same' AND query LIKE '" BARE
			       "'"), 1);
	ck_assert(xacts_after("request_id = 'same' AND query LIKE '" BARE
			      "'", "request_id = 'same' AND query LIKE '"
			      FULL "'"));
	ops->close(a);
}
END_TEST

START_TEST(test_batches_of_two_instances_on_the_same_identities_record_each_once)
{
	enum { N = 64 };
	void *st[2] = { open_as("a", ""), open_as("b", "") };
	static struct waiter w[2][N];
	static struct ex x[2][N];
	char id[32];

	/* Both workers wait on the table: each instance's requests queue
	 * up into a batch, and the two batches go at once. */
	sql(db, "BEGIN");
	sql(db, "LOCK TABLE carmy_executions IN EXCLUSIVE MODE");
	for (int i = 0; i < N; i++) {
		snprintf(id, sizeof(id), "both-%d", i);
		for (int k = 0; k < 2; k++) {
			make_ex(&x[k][i], "both", id);
			waiter_init(&w[k][i], CARMY_STORE_RESERVE, &x[k][i]);
			ops->submit(st[k], &w[k][i].req);
		}
	}
	sql(db, "COMMIT");
	for (int i = 0; i < N; i++) {
		int win;

		for (int k = 0; k < 2; k++)
			ck_assert_int_eq(wait_done(&w[k][i]), 0);
		ck_assert_msg(w[0][i].ntaken + w[1][i].ntaken == 1,
			      "both-%d: taken %d and %d times", i,
			      w[0][i].ntaken, w[1][i].ntaken);
		win = w[0][i].ntaken == 0 ? 0 : 1;
		assert_reserved_as(&w[!win][i].standing, &x[win][i]);
		ck_assert_int_eq(rows_of_exec(db, x[win][i].exec), 1);
		ck_assert_int_eq(rows_of_exec(db, x[!win][i].exec), 0);
		for (int k = 0; k < 2; k++)
			waiter_destroy(&w[k][i]);
	}
	ck_assert_int_eq(sql_long(db, "SELECT count(*) FROM carmy_executions"),
			 N);
	ops->close(st[0]);
	ops->close(st[1]);
}
END_TEST

/* A batch has no BEGIN: its statements are the protocol's implicit
 * transaction, committed at the sync. While its second statement waits
 * on a lock, the first one's row is not committed. */
START_TEST(test_a_batch_commits_as_one_at_its_end)
{
	/* lock_timeout of its own: x waits until the other session ends */
	void *a = open_one("a", "application_name=atomic-test "
			  "options='-c lock_timeout=600s'");
	PGconn *other = db_connect("");
	struct waiter hold, wx, wu;
	struct ex h, x, u;

	sleepy_inserts();
	sql(other, "BEGIN");
	insert_row(other, "p", "b-held", NULL);
	make_ex(&u, "p", "a-first");	/* before x in identity order */
	make_ex(&x, "p", "b-held");
	hold_worker(a, "atomic-test", &hold, &h);
	waiter_init(&wu, CARMY_STORE_RESERVE, &u);
	waiter_init(&wx, CARMY_STORE_RESERVE, &x);
	ops->submit(a, &wu.req);
	ops->submit(a, &wx.req);
	ck_assert_int_eq(wait_done(&hold), 0);
	wait_lock_wait("atomic-test");
	ck_assert_msg(rows_of_exec(db, u.exec) == 0, "a statement of a batch "
		      "committed before the batch's end");
	ck_assert(!is_done(&wu));
	sql(other, "ROLLBACK");
	ck_assert_int_eq(wait_done(&wu), 0);
	ck_assert_int_eq(wait_done(&wx), 0);
	ck_assert_int_eq(wu.ntaken + wx.ntaken, 0);
	ck_assert_int_eq(rows_of_exec(db, u.exec), 1);
	ck_assert_int_eq(rows_of_exec(db, x.exec), 1);
	waiter_destroy(&hold);
	waiter_destroy(&wu);
	waiter_destroy(&wx);
	PQfinish(other);
	ops->close(a);
}
END_TEST

/* Batches run in the session's default transactions: READ COMMITTED and
 * writable, whatever the connection, role or database asked for; after a
 * reconnect too. */
START_TEST(test_batches_are_read_committed_and_writable_whatever_the_defaults)
{
	void *a = open_as("a", "application_name=defaults-test options='"
			  "-c default_transaction_read_only=on "
			  "-c default_transaction_isolation=serializable'");
	struct ex x;

	sql(db, "CREATE OR REPLACE FUNCTION carmy_test_iso() RETURNS trigger "
	    "LANGUAGE plpgsql AS $$ BEGIN IF current_setting("
	    "'transaction_isolation') <> 'read committed' THEN RAISE "
	    "EXCEPTION 'isolation %', current_setting("
	    "'transaction_isolation'); END IF; RETURN NEW; END $$");
	sql(db, "CREATE TRIGGER carmy_test_iso BEFORE INSERT ON "
	    "carmy_executions FOR EACH ROW EXECUTE FUNCTION "
	    "carmy_test_iso()");
	make_ex(&x, "p", "defaults");
	ck_assert_int_eq(reserve(a, &x, NULL), 0);
	ck_assert_int_eq(op_wait(a, CARMY_STORE_COMPLETE, &x, NULL), 0);
	terminate("defaults-test");
	make_ex(&x, "p", "defaults-again");
	ck_assert_int_eq(reserve_when_back(a, &x, NULL), 0);
	ck_assert_int_eq(rows_as(&x, "a", CARMY_STORE_RUNNING), 1);
	ops->close(a);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("store_pg");
	TCase *tc = tcase_create("store_pg");
	char so[512];
	const char *b = getenv("CARMY_BUILDDIR");
	void *h;
	SRunner *sr;
	int failed;

	snprintf(so, sizeof(so), "%s/stores/pg/.libs/carmy_store_pg.so",
		 b ? b : ".");
	h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		printf("Bail out! cannot load %s: %s\n", so, dlerror());
		return 1;
	}
	ops = dlsym(h, "carmy_store_plugin");
	if (ops == NULL || ops->abi != CARMY_STORE_ABI || !ops->shared ||
	    !ops->durable || strcmp(ops->name, "postgresql") != 0) {
		printf("Bail out! %s is not a shared store of ABI %d\n", so,
		       CARMY_STORE_ABI);
		return 1;
	}
	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_open_creates_the_schema_even_when_two_instances_race);
	tcase_add_test(tc, test_reserve_of_a_vacant_identity_is_recorded_before_done);
	tcase_add_test(tc, test_reserve_of_a_held_identity_is_taken_running_then_completed);
	tcase_add_test(tc, test_reserve_retried_with_its_own_exec_is_recorded_not_taken);
	tcase_add_test(tc, test_a_lone_reserve_is_a_bare_insert_unless_its_identity_is_held);
	tcase_add_test(tc, test_a_lone_completion_is_a_bare_update_unless_it_took_nothing);
	tcase_add_test(tc, test_answers_out_of_step_are_taken_as_may_have_committed);
	tcase_add_test(tc, test_a_set_answer_out_of_step_keeps_nothing_of_it);
	tcase_add_test(tc, test_answers_out_of_step_every_time_fail_the_batch);
	tcase_add_test(tc, test_a_reservation_run_again_knows_its_own_row_whatever_else_it_reads);
	tcase_add_test(tc, test_an_answer_of_another_width_is_out_of_step);
	tcase_add_test(tc, test_complete_is_idempotent_and_never_overwrites_a_result);
	tcase_add_test(tc, test_settles_update_in_place_on_pages_left_half_free);
	tcase_add_test(tc, test_open_sets_a_fillfactor_only_where_none_was_chosen);
	tcase_add_test(tc, test_release_frees_the_identity_and_may_name_nothing);
	tcase_add_test(tc, test_resolve_commits_a_result_or_frees_the_identity);
	tcase_add_test(tc, test_purge_forgets_a_completed_execution_only);
	tcase_add_test(tc, test_load_hands_over_this_instances_executions_with_every_field);
	tcase_add_test(tc, test_a_table_without_the_call_columns_is_upgraded_in_place);
	tcase_add_test(tc, test_racing_reservations_record_exactly_one_and_name_it);
	tcase_add_test(tc, test_requests_submitted_together_commit_together);
	tcase_add_test(tc, test_a_damaged_row_is_refused_by_load_and_reserve);
	tcase_add_test(tc, test_bad_args_are_refused_with_a_sentence);
	tcase_add_test(tc, test_a_uri_is_a_connection_string_too);
	tcase_add_test(tc, test_the_instance_is_the_host_name_by_default);
	tcase_add_test(tc, test_a_lost_connection_is_reset_and_the_batch_run_again);
	tcase_add_test(tc, test_an_unreachable_database_fails_requests_until_it_is_back);
	tcase_add_test(tc, test_a_table_locked_throughout_fails_requests_until_it_is_free);
	tcase_add_test(tc, test_prepares_without_an_answer_fail_open_and_reconnect_in_bounded_time);
	tcase_add_test(tc, test_each_session_bounds_its_waits_unless_it_has_bounds_of_its_own);
	tcase_add_test(tc, test_a_reserve_waiting_on_an_uncommitted_insert_fails_alone);
	tcase_add_test(tc, test_a_request_waiting_on_a_row_lock_fails_alone);
	tcase_add_test(tc, test_a_statement_timeout_fails_its_request_alone);
	tcase_add_test(tc, test_only_the_instance_that_made_an_execution_settles_it);
	tcase_add_test(tc, test_an_exec_id_held_under_another_identity_fails_that_reserve_alone);
	tcase_add_test(tc, test_an_instance_name_is_held_by_one_carmyd_at_a_time);
	tcase_add_test(tc, test_a_superseded_instance_writes_nothing_on_any_connection);
	tcase_add_test(tc, test_requests_spread_over_the_connections_are_each_answered_once);
	tcase_add_test(tc, test_open_waits_for_a_name_let_go_meanwhile);
	tcase_add_test(tc,
		       test_open_does_not_wait_for_other_writers_once_the_table_exists);
	tcase_add_test(tc, test_a_reservation_whose_commit_answer_was_lost_is_withdrawn);
	tcase_add_test(tc, test_a_lost_reservation_is_withdrawn_without_another_request);
	tcase_add_test(tc, test_a_completion_whose_commit_answer_was_lost_is_sent_until_recorded);
	tcase_add_test(tc, test_a_completion_answered_failed_after_the_timeout_keeps_its_one_result);
	tcase_add_test(tc, test_a_kept_completion_outlives_a_batch_another_request_failed);
	tcase_add_test(tc, test_a_new_connection_runs_nothing_while_the_old_backend_lives);
	tcase_add_test(tc, test_an_unreachable_server_fails_requests_without_a_wait_each);
	tcase_add_test(tc, test_a_server_that_stops_reading_fails_a_large_batch_in_bounded_time);
	tcase_add_test(tc, test_batches_reserving_shared_identities_in_opposite_orders_do_not_deadlock);
	tcase_add_test(tc, test_a_request_the_database_would_refuse_fails_alone);
	tcase_add_test(tc, test_resolutions_in_a_batch_settle_as_one_set);
	tcase_add_test(tc, test_one_batch_of_every_kind_answers_each_request_as_alone);
	tcase_add_test(tc, test_a_batch_run_again_after_its_commit_answers_the_same);
	tcase_add_test(tc, test_a_small_batch_run_again_after_its_commit_answers_the_same);
	tcase_add_test(tc, test_twin_reserves_of_their_own_in_one_batch_answer_as_alone);
	tcase_add_test(tc, test_batches_of_two_instances_on_the_same_identities_record_each_once);
	tcase_add_test(tc, test_a_batch_commits_as_one_at_its_end);
	tcase_add_test(tc, test_batches_are_read_committed_and_writable_whatever_the_defaults);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	dlclose(h);
	return failed == 0 ? 0 : 1;
}
