/*
 * store_pg.c - the PostgreSQL store: a shared store (carmy_store.h, "Shared
 * stores") through which several carmyds, on one host or many, record into
 * one database and reserve every identity once between them.
 *
 *   carmyd --store plugin:PKGLIBDIR/carmy_store_pg.so:[instance=NAME ]CONNINFO
 *
 * CONNINFO is any libpq connection string, keywords or URI
 * ("host=db dbname=carmy user=carmyd", "postgresql://db/carmy"). Under it
 * the store puts connect_timeout=10, TCP keepalives that find a silent
 * server gone within a minute (keepalives_idle=30, keepalives_interval=10,
 * keepalives_count=3: the worker would otherwise wait on it for hours),
 * tcp_user_timeout=30000 (keepalives do not fire while sent data is
 * unacknowledged: a batch sent to a server that vanished would wait for
 * TCP's own retransmissions, some fifteen minutes) and
 * fallback_application_name=carmyd; the string overrides any of them.
 * Point it at a primary (target_session_attrs=read-write with several
 * hosts), directly or through a pooler in session mode: statements are
 * prepared, and the instance's name held, once per connection.
 *
 * NAME is this carmyd among those sharing the database, 1 to 64 bytes of
 * [A-Za-z0-9._-], the host name by default. load() selects on it, and only
 * the instance that made an execution completes, releases or resolves it,
 * so two carmyds sharing one database must not share a name (two on one
 * host: give both one): each would take the other's running executions
 * for interrupted ones. The store enforces it: each connection holds a
 * session advisory lock keyed on the name (a 64-bit hash of it), taken at
 * open, where another carmyd of the name makes open fail, and taken again
 * after every reconnect before any request runs; while another session
 * holds it, every request fails (-EBUSY). A holder busy with a statement
 * may be the backend of a carmyd that died (kill -9 mid-batch) and has not
 * noticed yet, and one idle at open the backend of a carmyd that just
 * stopped, still exiting: open waits up to 10 s for the name to be let go
 * (a live carmyd holding it costs a second one 10 s, then a refusal); the
 * first try after a reconnect waits 2 s for a busy holder and refuses an
 * idle one, a live carmyd, at once. A
 * carmyd that comes back after a reboot must keep its name to find its
 * executions again.
 *
 * The schema, created at open if absent (under an advisory lock, in one
 * transaction, so that instances starting together do not race on it):
 *
 *   carmy_executions (principal, session, request_id: bytea, the primary
 *     key; exec bytea UNIQUE; instance text; fingerprint, rawprint bytea;
 *     pid, started_ns bigint; state smallint, 1 running, 2 completed;
 *     finished_ns bigint, status, result_code integer, result bytea: set
 *     once completed; resolved_ns, resolved_uid, resolved_pid bigint: set
 *     by an operator's RESOLVE), indexed on instance.
 *
 * Each op in SQL (exec: the 16-byte execution id, which comes from a
 * client's entry in the segment and is trusted no further than that;
 * instance: this one's name; every value a bound parameter, bytea and
 * integers in binary):
 *
 *   RESERVE   INSERT ... ON CONFLICT DO NOTHING (any unique constraint:
 *             the identity's, and exec's, which a client could name for
 *             another identity), and in the same statement the row
 *             standing for the identity and whether a row holds the exec
 *             id. Inserted: recorded. A row with req's own exec and this
 *             instance: recorded (this is a batch run again). Any other
 *             row: taken(), nothing recorded. No row for the identity but
 *             one with the exec id: -EEXIST, nothing recorded, and the rest
 *             of the batch unaffected. Neither: the row that stopped the
 *             insert was committed after the statement's snapshot was
 *             taken (READ COMMITTED); the statement runs again, in the next
 *             transaction, which sees it.
 *   COMPLETE  UPDATE ... SET state 2 and the result WHERE exec AND instance
 *             AND state 1. No row updated: fine if this instance's row
 *             already holds exactly this result (a batch run again),
 *             -ESTALE otherwise: a result is never overwritten, a released
 *             execution never resurrected, another instance's never
 *             touched.
 *   RESOLVE   committed: as COMPLETE, with the resolved_* fields; not
 *             committed: as RELEASE.
 *   RELEASE   DELETE WHERE exec AND instance AND state 1; 0 whether or not
 *             a row went.
 *   PURGE     DELETE WHERE exec AND state 2, of any instance: an instance
 *             purges the copy it replayed of another's result, and with it
 *             the record (carmy_store.h).
 *
 * Group commit. One thread owns the connection. submit() queues and
 * returns; the thread takes everything queued as one batch and sends it in
 * one pipeline (libpq pipeline mode): BEGIN, each request's statement,
 * COMMIT, sync, one round trip and one WAL flush for the lot, then it
 * answers every request. Statements go in submission order, except that
 * the RESERVEs between two requests that may free an identity (RELEASE,
 * RESOLVE, PURGE) go in the order of their identities: two instances
 * reserving the same identities in one batch each then insert them in one
 * order and do not deadlock on them (a deadlock that involves other
 * statements, a COMPLETE's update say, PostgreSQL still breaks after
 * deadlock_timeout, and the batch runs again). While a batch waits for its
 * flush the next one queues up, so throughput grows with concurrency. The
 * connection stays in blocking mode: libpq's send path reads and buffers
 * the server's answers whenever the socket will not take more
 * (pqSendSome), so a pipeline longer than both socket buffers cannot
 * deadlock.
 *
 * A request is answered only after its transaction has committed, with
 * synchronous_commit set on for the session (a database default of off
 * must not weaken it), or has failed. taken() too comes after the commit,
 * just before done(): the standing row it reports was read in a
 * transaction that could still have failed, and carmyd must not act on a
 * reservation whose outcome the store has not settled.
 *
 * Waits are bounded. A RESERVE waits for any uncommitted insert or delete
 * of its identity, and the one worker with it: an operator's open
 * transaction, or another instance frozen mid-batch, would stall every
 * request of this one. So each session sets lock_timeout 2s,
 * statement_timeout 30s and idle_in_transaction_session_timeout 60s (the
 * last for the other instances' sake, should this one freeze in a
 * transaction), and the server's side of the TCP keepalives and
 * tcp_user_timeout like the client's, so that the server drops a
 * connection of ours that died silently, and the locks it held, within
 * about a minute; each only where the session has no value of its own
 * (CONNINFO's options, the role's, the database's). A statement that
 * times out (lock_not_available, query_canceled) fails its request alone
 * (-EAGAIN): the batch is rolled back and runs again without it, since
 * waiting once more would hold up every other request as long again.
 *
 * Why a batch may run twice. A deadlock or serialization failure rolls
 * the batch back: it runs again, as does a timeout in BEGIN or COMMIT (up
 * to TRIES_MAX runs in all). A connection lost with the COMMIT sent leaves
 * its outcome unknown: the store reconnects and runs the batch again.
 * Every statement above is written to be right either way: RESERVE
 * recognises its own exec, COMPLETE and RESOLVE their own result, RELEASE
 * and PURGE delete what is there.
 *
 * A server that cannot be reached fails the batch (-ECONNREFUSED): the
 * store keeps answering failures until it can record, and never pretends.
 * A reconnect blocks the worker up to connect_timeout, so after one fails
 * the batches that follow are failed at once, without trying, for a
 * backoff interval (200 ms, doubling to 2 s) before the next attempt.
 *
 * An outcome unknown, then no connection: a RESERVE answered with a
 * failure may still have committed, and its row would hold the identity
 * everywhere for an execution that never ran (its client gave the entry
 * back). The store remembers such RESERVEs (up to WITHDRAW_MAX; beyond,
 * it says so on stderr) and deletes their rows (this identity, this exec,
 * this instance, still running) at the head of the next transaction it
 * runs, before any other request, forgetting them once that commits; at
 * close it makes one last attempt.
 *
 * Every value read back is untrusted: a row that is not what this store
 * writes (lengths, states, ranges) fails load() with -EBADMSG, and a
 * RESERVE that finds one standing fails -EBADMSG.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "carmy_store.h"

#define INSTANCE_MAX 64
#define BATCH_MAX 1024		/* requests in one transaction */
#define TRIES_MAX 20		/* runs of one batch before -EAGAIN */
#define WITHDRAW_MAX 1024	/* RESERVEs remembered to withdraw */
#define RESULT_MAX 0x3fff0000u	/* under bytea's (and a message's) 1 GB */
#define MIN_SERVER 90500	/* INSERT ... ON CONFLICT */
#define BACKOFF_MIN_MS 200	/* after a failed reconnect */
#define BACKOFF_MAX_MS 2000
/* How long open waits for the instance's name, and the first try after a
 * reconnect (which holds up the worker): the backend of a carmyd that
 * stopped or died lets it go as it exits, once it has noticed, at the end
 * of the statement it was running (a kill -9 in the middle of a batch),
 * and so does the backend of this one's lost connection. */
#define NAME_WAIT_OPEN "'10s'"
#define NAME_WAIT "'2s'"
/* pg_advisory_xact_lock key of schema creation: "CarmyPgS" */
#define SCHEMA_LOCK "4855287687794419539"

/* Type oids (catalog/pg_type.h, stable since forever). */
#define BYTEAOID 17
#define INT8OID 20
#define INT4OID 23
#define TEXTOID 25

/* Internal outcomes of one run of a batch, besides 0 and -errno. */
#define LOST (-ENOTCONN)	/* connection gone: reconnect, run again */
#define RETRY (-EAGAIN)		/* rolled back by a conflict: again */
#define WAITED (-ETIMEDOUT)	/* a statement timed out: see culprit */

static const char *const schema_sql[] = {
	"BEGIN",
	"SELECT pg_advisory_xact_lock(" SCHEMA_LOCK ")",
	"CREATE TABLE IF NOT EXISTS carmy_executions ("
	" principal bytea NOT NULL,"
	" session bytea NOT NULL,"
	" request_id bytea NOT NULL,"
	" exec bytea NOT NULL UNIQUE,"
	" instance text NOT NULL,"
	" fingerprint bytea NOT NULL,"
	" rawprint bytea NOT NULL,"
	" pid bigint NOT NULL,"
	" started_ns bigint NOT NULL,"
	" state smallint NOT NULL,"
	" finished_ns bigint,"
	" status integer,"
	" result_code integer,"
	" result bytea,"
	" resolved_ns bigint,"
	" resolved_uid bigint,"
	" resolved_pid bigint,"
	" PRIMARY KEY (principal, session, request_id))",
	"CREATE INDEX IF NOT EXISTS carmy_executions_instance"
	" ON carmy_executions (instance)",
	"COMMIT",
};

/* The session's bounds (see the top), each where nothing set it: not the
 * connection's options, the role's or the database's settings, nor the
 * server's configuration (pg_settings.source 'default'). Not by its value:
 * over TCP the keepalive settings read the system's defaults (7200 s...),
 * not 0, and 0 may be an explicit choice. pg_settings lists only what the
 * server knows (idle_in_transaction_session_timeout is 9.6's,
 * tcp_user_timeout 12's). idle_session_timeout (14's) is turned off
 * whatever set it: the session holds the instance's name, and must not be
 * dropped for sitting idle between requests. plan_cache_mode (12's) is
 * force_custom_plan: the statements are prepared while the table is small,
 * and a generic plan made then scans the whole table for an identity ever
 * after (a benchmark's cycles fell from 2,534 to 1,170 a second over 8,000
 * of them); planned for each run, they use the keys. */
#define BOUNDS_SQL \
	"SELECT set_config(d.name, d.value, false) FROM (VALUES" \
	" ('lock_timeout', '2s'), ('statement_timeout', '30s')," \
	" ('idle_in_transaction_session_timeout', '60s')," \
	" ('tcp_keepalives_idle', '30'), ('tcp_keepalives_interval', '10')," \
	" ('tcp_keepalives_count', '3'), ('tcp_user_timeout', '30000'))" \
	" AS d (name, value) JOIN pg_settings AS s USING (name)" \
	" WHERE s.source = 'default' UNION ALL SELECT set_config(name, '0'," \
	" false) FROM pg_settings WHERE name = 'idle_session_timeout'" \
	" UNION ALL SELECT set_config(name, 'force_custom_plan', false)" \
	" FROM pg_settings WHERE name = 'plan_cache_mode'"

/* The columns of a record, as load() and RESERVE read them back. */
#define ROW_COLS "principal, session, request_id, exec, fingerprint, " \
	"rawprint, pid, started_ns, state, finished_ns, status, result_code, " \
	"result, resolved_ns, resolved_uid, resolved_pid"
enum {
	C_PRINCIPAL, C_SESSION, C_REQUEST_ID, C_EXEC, C_FINGERPRINT,
	C_RAWPRINT, C_PID, C_STARTED, C_STATE, C_FINISHED, C_STATUS,
	C_RESULT_CODE, C_RESULT, C_RESOLVED_NS, C_RESOLVED_UID,
	C_RESOLVED_PID, C_NCOLS
};

/* Columns 0 to 3: was it inserted, is a row standing for the identity,
 * is that row this instance's, does a row hold the exec id; then ROW_COLS.
 * The reads see the statement's snapshot, not the insert's row: a row
 * shows only if it stood before. */
#define RESERVE_SQL \
	"WITH ins AS (INSERT INTO carmy_executions (principal, session," \
	" request_id, exec, instance, fingerprint, rawprint, pid, started_ns," \
	" state) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 1)" \
	" ON CONFLICT DO NOTHING RETURNING 1)" \
	" SELECT EXISTS (SELECT 1 FROM ins), e.ctid IS NOT NULL," \
	" e.instance = $5," \
	" EXISTS (SELECT 1 FROM carmy_executions AS o WHERE o.exec = $4), " \
	ROW_COLS \
	" FROM (VALUES (1)) AS one (x) LEFT JOIN carmy_executions AS e" \
	" ON e.principal = $1 AND e.session = $2 AND e.request_id = $3"
/* COMPLETE, and RESOLVE as committed ($6..$8 NULL for COMPLETE). Columns:
 * updated, row found, its state, whether it holds exactly this result. */
#define SETTLE_SQL \
	"WITH upd AS (UPDATE carmy_executions SET state = 2," \
	" finished_ns = $2, status = $3, result_code = $4, result = $5," \
	" resolved_ns = $6, resolved_uid = $7, resolved_pid = $8" \
	" WHERE exec = $1 AND instance = $9 AND state = 1" \
	" RETURNING 1)" \
	" SELECT EXISTS (SELECT 1 FROM upd), e.ctid IS NOT NULL, e.state," \
	" e.status = $3 AND e.result_code = $4 AND e.result = $5" \
	" FROM (VALUES (1)) AS one (x) LEFT JOIN carmy_executions AS e" \
	" ON e.exec = $1 AND e.instance = $9"
#define RELEASE_SQL \
	"DELETE FROM carmy_executions WHERE exec = $1 AND instance = $2" \
	" AND state = 1"
#define PURGE_SQL \
	"DELETE FROM carmy_executions WHERE exec = $1 AND state = 2"
/* The row a RESERVE reported failed may have inserted, and only it. */
#define WITHDRAW_SQL \
	"DELETE FROM carmy_executions WHERE principal = $1 AND session = $2" \
	" AND request_id = $3 AND exec = $4 AND instance = $5 AND state = 1"
#define LOAD_SQL \
	"SELECT " ROW_COLS " FROM carmy_executions WHERE instance = $1"

static const struct stmt {
	const char *name, *sql;
	int nparams;
	Oid types[9];
} stmts[] = {
	{ "carmy_reserve", RESERVE_SQL, 9, { BYTEAOID, BYTEAOID, BYTEAOID,
	  BYTEAOID, TEXTOID, BYTEAOID, BYTEAOID, INT8OID, INT8OID } },
	{ "carmy_settle", SETTLE_SQL, 9, { BYTEAOID, INT8OID, INT4OID,
	  INT4OID, BYTEAOID, INT8OID, INT8OID, INT8OID, TEXTOID } },
	{ "carmy_release", RELEASE_SQL, 2, { BYTEAOID, TEXTOID } },
	{ "carmy_purge", PURGE_SQL, 1, { BYTEAOID } },
	{ "carmy_withdraw", WITHDRAW_SQL, 5, { BYTEAOID, BYTEAOID, BYTEAOID,
	  BYTEAOID, TEXTOID } },
};
enum { ST_RESERVE, ST_SETTLE, ST_RELEASE, ST_PURGE, ST_WITHDRAW };

/* A request of the batch being written, and what its run decided. The
 * decision is only tentative until the transaction has committed. */
struct slot {
	struct carmy_store_req *req;
	int rc;				/* its answer */
	bool again;			/* run its statement again */
	bool answered;
	bool unsure;			/* a run of it ended, outcome
					 * unknown: may have committed */
	PGresult *res;			/* RESERVE taken: the row */
	struct carmy_store_record standing;	/* points into res */
};

/* A RESERVE answered failed that may have committed: its row to delete. */
struct withdrawal {
	uint8_t exec[16];
	uint16_t len[3];
	uint8_t *id;			/* the three parts, end to end */
};

struct pg_store {
	PGconn *conn;		/* the worker's; open's, load's, close's */
	char instance[INSTANCE_MAX + 1];
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct carmy_store_req *head, **tail;	/* queued, under lock */
	bool stopping;				/* under lock */
	bool started;
	pthread_t worker;
	/* The worker's own: */
	bool session;		/* connected, session set up */
	bool named;		/* and holding the name */
	int down;		/* 0, or why requests fail (said on stderr) */
	uint64_t retry_ms;	/* no reconnect before (CLOCK_MONOTONIC) */
	unsigned backoff_ms;	/* the interval that led to it */
	struct slot *slots;	/* BATCH_MAX */
	struct slot **order;	/* the order their statements go in */
	struct slot *culprit;	/* WAITED: whose statement timed out */
	struct withdrawal *wd;	/* WITHDRAW_MAX */
	size_t nwd;
	/* A withdrawal waited out its lock timeout (another session holds
	 * its row): the rest of this batch runs without them, and the next
	 * batch tries them again. */
	bool wd_waited, wd_held;
	char why[256];		/* the last failure, for stderr */
};

static int pg_open(const char *args, void **store, char *err, size_t errlen);
static int pg_load(void *store, carmy_store_each_fn each, void *arg);
static void pg_submit(void *store, struct carmy_store_req *req);
static void pg_close(void *store);

static int parse_args(const char *args, char *instance, const char **conninfo,
		      char *err, size_t errlen);
static int connect_db(struct pg_store *s, const char *conninfo, char *err,
		      size_t errlen);
static int create_schema(PGconn *c, char *err, size_t errlen);
static int setup_session(PGconn *c, char *err, size_t errlen);
static int prepare_all(PGconn *c, char *err, size_t errlen);
static int take_name(struct pg_store *s, const char *wait, bool at_open,
		     char *err, size_t errlen);
static int check_req(const struct carmy_store_req *req);
static void *worker(void *arg);
static void plan(struct pg_store *s, size_t n);
static void run_batch(struct pg_store *s, size_t n);
static int run_once(struct pg_store *s, size_t n);
static int send_batch(struct pg_store *s, size_t n);
static int read_batch(struct pg_store *s, size_t n);
static int judge(struct slot *sl, PGresult *r);
static int decode_row(const PGresult *r, int row, int base,
		      struct carmy_store_record *rec);
static void say(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static const char *pq_error(const char *msg, char *buf, size_t len);
static const char *hex16(const uint8_t id[16], char out[33]);

const struct carmy_store_ops carmy_store_plugin = {
	.abi = CARMY_STORE_ABI,
	.name = "postgresql",
	.open = pg_open,
	.load = pg_load,
	.submit = pg_submit,
	.close = pg_close,
	.durable = 1,
	.shared = 1,
};

/* ---------------------------------------------------------------- API */

static int pg_open(const char *args, void **store, char *err, size_t errlen)
{
	struct pg_store *s;
	const char *conninfo;
	int rc;

	*store = NULL;
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->tail = &s->head;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->wake, NULL);
	rc = parse_args(args ? args : "", s->instance, &conninfo, err, errlen);
	if (rc == 0)
		rc = connect_db(s, conninfo, err, errlen);
	if (rc == 0)
		rc = setup_session(s->conn, err, errlen);
	if (rc == 0)
		rc = take_name(s, NAME_WAIT_OPEN, true, err, errlen);
	if (rc == 0)
		rc = create_schema(s->conn, err, errlen);
	if (rc == 0)
		rc = prepare_all(s->conn, err, errlen);
	if (rc == 0) {
		s->slots = calloc(BATCH_MAX, sizeof(*s->slots));
		s->order = calloc(BATCH_MAX, sizeof(*s->order));
		s->wd = calloc(WITHDRAW_MAX, sizeof(*s->wd));
		if (s->slots == NULL || s->order == NULL || s->wd == NULL) {
			snprintf(err, errlen, "out of memory");
			rc = -ENOMEM;
		}
	}
	if (rc == 0) {
		int e;

		s->session = s->named = true;
		e = pthread_create(&s->worker, NULL, worker, s);
		if (e != 0) {
			snprintf(err, errlen, "cannot start the PostgreSQL "
				 "store's thread: %s", strerror(e));
			rc = -e;
		}
		s->started = e == 0;
	}
	if (rc != 0) {
		pg_close(s);
		return rc;
	}
	*store = s;
	return 0;
}

/* The end of a load's transaction, gone either way (a cancel sent to stop
 * the load may come late enough to cancel the ROLLBACK). It only read, in
 * one snapshot: what it read stands whatever COMMIT says. */
static int load_end(PGconn *c, int rc)
{
	PQclear(PQexec(c, rc == 0 ? "COMMIT" : "ROLLBACK"));
	if (PQtransactionStatus(c) != PQTRANS_IDLE)
		PQclear(PQexec(c, "ROLLBACK"));
	return rc;
}

/*
 * Hand over this instance's executions, row by row (single-row mode: a
 * million of them are never in memory at once). The worker is idle: no
 * request has been submitted yet, so the connection is ours here. Without
 * the session's statement and idle timeouts: a large instance takes as
 * long as it takes, and carmyd's each() is part of it.
 */
static int pg_load(void *store, carmy_store_each_fn each, void *arg)
{
	struct pg_store *s = store;
	PGconn *c = s->conn;
	const char *params[1] = { s->instance };
	PGresult *r;
	int rc = 0;
	char msg[256];

	/* pg_settings: the idle timeout is 9.6's */
	r = PQexec(c, "BEGIN; SELECT set_config(name, '0', true) FROM "
		   "pg_settings WHERE name IN ('statement_timeout', "
		   "'idle_in_transaction_session_timeout')");
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		say("cannot load the executions of instance %s: %s",
		    s->instance, pq_error(PQerrorMessage(c), msg, sizeof(msg)));
		PQclear(r);
		return load_end(c, -EIO);
	}
	PQclear(r);
	if (!PQsendQueryParams(c, LOAD_SQL, 1, NULL, params, NULL, NULL, 1)) {
		say("cannot load the executions of instance %s: %s",
		    s->instance, pq_error(PQerrorMessage(c), msg, sizeof(msg)));
		return load_end(c, -EIO);
	}
	if (!PQsetSingleRowMode(c)) {
		say("cannot load the executions of instance %s row by row",
		    s->instance);
		while ((r = PQgetResult(c)) != NULL)
			PQclear(r);
		return load_end(c, -EIO);
	}
	while ((r = PQgetResult(c)) != NULL) {
		ExecStatusType st = PQresultStatus(r);

		if (st == PGRES_SINGLE_TUPLE && rc == 0) {
			struct carmy_store_record rec;

			rc = decode_row(r, 0, 0, &rec);
			if (rc == -EBADMSG)
				say("instance %s: a row of carmy_executions is "
				    "damaged: refusing to load", s->instance);
			if (rc == 0)
				rc = each(arg, &rec);
			if (rc != 0) {
				/* Stop the server; what it sent already is
				 * read and dropped below. */
				PGcancel *cancel = PQgetCancel(c);

				if (cancel != NULL) {
					PQcancel(cancel, msg, sizeof(msg));
					PQfreeCancel(cancel);
				}
			}
		} else if (st != PGRES_SINGLE_TUPLE && st != PGRES_TUPLES_OK &&
			   rc == 0) {
			say("cannot load the executions of instance %s: %s",
			    s->instance, pq_error(PQresultErrorMessage(r), msg,
						  sizeof(msg)));
			rc = -EIO;
		}
		PQclear(r);
	}
	return load_end(c, rc);
}

static void pg_submit(void *store, struct carmy_store_req *req)
{
	struct pg_store *s = store;
	int rc = check_req(req);

	if (rc != 0) {
		req->done(req, rc);
		return;
	}
	req->next = NULL;
	pthread_mutex_lock(&s->lock);
	*s->tail = req;
	s->tail = &req->next;
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->lock);
}

/* Nothing is in flight (carmyd waits), but a queue left over would still
 * be written and answered by the worker before it stops. */
static void pg_close(void *store)
{
	struct pg_store *s = store;

	if (s == NULL)
		return;
	if (s->started) {
		pthread_mutex_lock(&s->lock);
		s->stopping = true;
		pthread_cond_signal(&s->wake);
		pthread_mutex_unlock(&s->lock);
		pthread_join(s->worker, NULL);
	}
	PQfinish(s->conn);	/* and with the session, the name */
	for (size_t i = 0; i < s->nwd; i++)
		free(s->wd[i].id);
	free(s->wd);
	free(s->order);
	free(s->slots);
	pthread_cond_destroy(&s->wake);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* ------------------------------------------------- opening the store */

static bool name_ok(const char *p, size_t n)
{
	if (n == 0 || n > INSTANCE_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((p[i] >= 'a' && p[i] <= 'z') ||
		      (p[i] >= 'A' && p[i] <= 'Z') ||
		      (p[i] >= '0' && p[i] <= '9') ||
		      p[i] == '.' || p[i] == '_' || p[i] == '-'))
			return false;
	return true;
}

/* ARGS: [instance=NAME ]CONNINFO. The name ends at the first space. */
static int parse_args(const char *args, char *instance, const char **conninfo,
		      char *err, size_t errlen)
{
	char host[256];
	size_t n;

	if (strncmp(args, "instance=", 9) == 0) {
		const char *name = args + 9;

		n = strcspn(name, " ");
		*conninfo = name + n + strspn(name + n, " ");
		if (!name_ok(name, n)) {
			snprintf(err, errlen, "instance name \"%.*s\" is not 1 "
				 "to %d bytes of A-Z a-z 0-9 . _ -",
				 n > 80 ? 80 : (int)n, name, INSTANCE_MAX);
			return -EINVAL;
		}
		memcpy(instance, name, n);
		instance[n] = '\0';
		return 0;
	}
	*conninfo = args;
	if (gethostname(host, sizeof(host)) != 0) {
		snprintf(err, errlen, "cannot read the host name (%s) to name "
			 "this instance: give one with instance=NAME",
			 strerror(errno));
		return -EINVAL;
	}
	host[sizeof(host) - 1] = '\0';
	n = strlen(host);
	if (!name_ok(host, n)) {
		snprintf(err, errlen, "the host name \"%.80s\" cannot name "
			 "this instance (1 to %d bytes of A-Z a-z 0-9 . _ -): "
			 "give one with instance=NAME", host, INSTANCE_MAX);
		return -EINVAL;
	}
	memcpy(instance, host, n + 1);
	return 0;
}

static void no_notices(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

/* Connect, with defaults that conninfo overrides (it is expanded where
 * dbname stands, after them). Refuse a server without ON CONFLICT. */
static int connect_db(struct pg_store *s, const char *conninfo, char *err,
		      size_t errlen)
{
	static const char *const keys[] = { "connect_timeout",
		"keepalives_idle", "keepalives_interval", "keepalives_count",
		"tcp_user_timeout", "fallback_application_name", "dbname",
		NULL };
	const char *values[] = { "10", "30", "10", "3", "30000", "carmyd",
				 conninfo, NULL };
	char msg[256];
	int v;

	s->conn = PQconnectdbParams(keys, values, 1);
	if (s->conn == NULL) {
		snprintf(err, errlen, "cannot connect to PostgreSQL: out of "
			 "memory");
		return -ENOMEM;
	}
	if (PQstatus(s->conn) != CONNECTION_OK) {
		snprintf(err, errlen, "cannot connect to PostgreSQL: %s",
			 pq_error(PQerrorMessage(s->conn), msg, sizeof(msg)));
		return -ECONNREFUSED;
	}
	PQsetNoticeProcessor(s->conn, no_notices, NULL);
	v = PQserverVersion(s->conn);
	if (v < MIN_SERVER) {
		snprintf(err, errlen, "PostgreSQL server version %d is too "
			 "old: the store needs 9.5 or later (INSERT ... ON "
			 "CONFLICT)", v);
		return -EPROTONOSUPPORT;
	}
	return 0;
}

/* One statement outside a pipeline: 0, or -EIO with a sentence in err. */
static int exec_ok(PGconn *c, const char *sql, const char *doing, char *err,
		   size_t errlen)
{
	PGresult *r = PQexec(c, sql);
	ExecStatusType st = PQresultStatus(r);
	char msg[256];

	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
		PQclear(r);
		return 0;
	}
	snprintf(err, errlen, "%s: %s", doing,
		 pq_error(r ? PQresultErrorMessage(r) : PQerrorMessage(c),
			  msg, sizeof(msg)));
	PQclear(r);
	return -EIO;
}

/* CREATE ... IF NOT EXISTS still races with itself (two creators both
 * find the table absent): the advisory lock makes them take turns. It is
 * not run at all once the table and its index exist: CREATE INDEX IF NOT
 * EXISTS takes a lock on the table even then, which waits for every
 * instance's writes in flight and holds up those behind it. */
static int create_schema(PGconn *c, char *err, size_t errlen)
{
	size_t n = sizeof(schema_sql) / sizeof(schema_sql[0]);
	PGresult *r = PQexec(c, "SELECT to_regclass('carmy_executions') IS NOT"
			     " NULL AND to_regclass('carmy_executions_instance')"
			     " IS NOT NULL");
	bool exists = PQresultStatus(r) == PGRES_TUPLES_OK &&
		      PQntuples(r) == 1 && PQnfields(r) == 1 &&
		      strcmp(PQgetvalue(r, 0, 0), "t") == 0;

	PQclear(r);
	if (exists)
		return 0;
	for (size_t i = 0; i < n; i++) {
		int rc = exec_ok(c, schema_sql[i], "cannot create the table "
				 "carmy_executions", err, errlen);

		if (rc != 0) {
			PQclear(PQexec(c, "ROLLBACK"));
			return rc;
		}
	}
	return 0;
}

/* What every connection needs first, at open and after every reconnect:
 * commits that wait for the flush, and bounded waits. */
static int setup_session(PGconn *c, char *err, size_t errlen)
{
	int rc = exec_ok(c, "SET synchronous_commit = on", "cannot set "
			 "synchronous_commit", err, errlen);

	if (rc == 0)
		rc = exec_ok(c, BOUNDS_SQL, "cannot bound the session's waits",
			     err, errlen);
	return rc;
}

/* The statements, once the table is there. */
static int prepare_all(PGconn *c, char *err, size_t errlen)
{
	int rc = 0;

	for (size_t i = 0; i < sizeof(stmts) / sizeof(stmts[0]) && rc == 0;
	     i++) {
		PGresult *r = PQprepare(c, stmts[i].name, stmts[i].sql,
					stmts[i].nparams, stmts[i].types);
		char msg[256];

		if (PQresultStatus(r) != PGRES_COMMAND_OK) {
			snprintf(err, errlen, "cannot prepare %s: %s",
				 stmts[i].name, pq_error(r ?
				 PQresultErrorMessage(r) : PQerrorMessage(c),
				 msg, sizeof(msg)));
			rc = -EIO;
		}
		PQclear(r);
	}
	return rc;
}

/* The name's advisory lock key: FNV-1a, 64 bits, of the name. */
static uint64_t name_hash(const char *name)
{
	uint64_t h = 14695981039346656037u;

	for (const char *p = name; *p != '\0'; p++) {
		h ^= (uint8_t)*p;
		h *= 1099511628211u;
	}
	return h;
}

/* The lock's one statement outside a pipeline: 0, -EBUSY (its holder
 * would not let go of it in time), or -EIO with a sentence in err. */
static int name_sql(struct pg_store *s, const char *sql, PGresult **out,
		    char *err, size_t errlen)
{
	PGresult *r = PQexec(s->conn, sql);
	const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	ExecStatusType st = PQresultStatus(r);
	char msg[256];
	int rc = 0;

	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
		rc = state != NULL && strcmp(state, "55P03") == 0 ? -EBUSY :
		     -EIO;
		if (rc == -EIO)
			snprintf(err, errlen, "cannot take the advisory lock "
				 "of instance %s: %s", s->instance, pq_error(r ?
				 PQresultErrorMessage(r) :
				 PQerrorMessage(s->conn), msg, sizeof(msg)));
	}
	if (PQtransactionStatus(s->conn) == PQTRANS_INERROR)
		PQclear(PQexec(s->conn, "ROLLBACK"));
	if (rc == 0 && out != NULL)
		*out = r;
	else
		PQclear(r);
	return rc;
}

/*
 * Hold the instance's name for this session: 0, -EBUSY (with the sentence
 * in err) while another session holds it, -EIO if the server would not
 * say. After a reconnect, a holder that sits idle is a live carmyd:
 * refused at once. One in the middle of something may be the backend of a
 * carmyd that died, to notice only at the end of its statement; at open,
 * an idle one may be the backend of a carmyd that just stopped, still
 * exiting: those are waited for up to wait (an interval literal; a session
 * lock taken in a transaction outlives it), unless wait is NULL. The holder is told by the key as pg_locks shows
 * it: high half in classid, low half in objid, objsubid 1.
 */
static int take_name(struct pg_store *s, const char *wait, bool at_open,
		     char *err, size_t errlen)
{
	uint64_t h = name_hash(s->instance);
	char sql[640];
	PGresult *r = NULL;
	bool got, idle;
	int rc;

	snprintf(sql, sizeof(sql), "SELECT pg_try_advisory_lock(%" PRId64 "),"
		 " EXISTS (SELECT 1 FROM pg_locks AS l JOIN pg_stat_activity"
		 " AS a USING (pid) WHERE l.locktype = 'advisory' AND"
		 " l.database = (SELECT oid FROM pg_database WHERE datname ="
		 " current_database()) AND l.classid = %" PRIu32 " AND"
		 " l.objid = %" PRIu32 " AND l.objsubid = 1 AND l.granted AND"
		 " a.state = 'idle')", (int64_t)h, (uint32_t)(h >> 32),
		 (uint32_t)h);
	rc = name_sql(s, sql, &r, err, errlen);
	if (rc == 0 && (PQresultStatus(r) != PGRES_TUPLES_OK ||
			PQntuples(r) != 1 || PQnfields(r) != 2)) {
		snprintf(err, errlen, "cannot take the advisory lock of "
			 "instance %s: unexpected answer", s->instance);
		rc = -EIO;
	}
	if (rc == 0) {
		got = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
		idle = strcmp(PQgetvalue(r, 0, 1), "t") == 0;
		/* At open, even an idle holder is waited for: the backend
		 * of a carmyd that just stopped (a restart) can still look
		 * idle while it exits. */
		if (!got && ((idle && !at_open) || wait == NULL)) {
			rc = -EBUSY;
		} else if (!got) {
			snprintf(sql, sizeof(sql), "BEGIN; SET LOCAL "
				 "lock_timeout = %s; SELECT pg_advisory_lock("
				 "%" PRId64 "); COMMIT", wait, (int64_t)h);
			rc = name_sql(s, sql, NULL, err, errlen);
		}
	}
	PQclear(r);
	if (rc == -EBUSY)
		snprintf(err, errlen, "another carmyd is running as instance "
			 "%s on this database (give each its own "
			 "instance=NAME)", s->instance);
	return rc;
}

/* ------------------------------------------------------------ the worker */

/* Refuse at once what would fail its whole batch in the database. */
static int check_req(const struct carmy_store_req *req)
{
	const struct carmy_store_record *r = req->rec;
	bool result = req->op == CARMY_STORE_COMPLETE ||
		      (req->op == CARMY_STORE_RESOLVE &&
		       r->state == CARMY_STORE_COMPLETED);

	if (req->op < CARMY_STORE_RESERVE || req->op > CARMY_STORE_PURGE ||
	    (req->op == CARMY_STORE_RESOLVE && r->state != 0 &&
	     r->state != CARMY_STORE_COMPLETED))
		return -EINVAL;
	if (req->op == CARMY_STORE_RESERVE) {
		for (int k = 0; k < 3; k++)
			if (r->part[k] == NULL || r->len[k] == 0 ||
			    r->len[k] > CARMY_STORE_ID_MAX)
				return -EINVAL;
		if (r->started_ns > INT64_MAX)
			return -ERANGE;
	}
	if (result && (r->finished_ns > INT64_MAX ||
		       r->resolved_ns > INT64_MAX))
		return -ERANGE;
	if (result && r->result_len > 0 && r->result == NULL)
		return -EINVAL;
	if (result && r->result_len > RESULT_MAX)
		return -EFBIG;
	return 0;
}

/* At close: one last attempt at what is left to withdraw, whatever the
 * backoff, then name what stands for an operator to resolve. */
static void withdraw_at_close(struct pg_store *s)
{
	char hex[33];

	if (s->nwd == 0)
		return;
	s->retry_ms = 0;
	run_batch(s, 0);
	for (size_t i = 0; i < s->nwd; i++)
		say("instance %s: exec %s may stand as running though its "
		    "reservation was reported failed: resolve it as not "
		    "committed", s->instance, hex16(s->wd[i].exec, hex));
}

/* Take what is queued, up to BATCH_MAX, and write it; until close. */
static void *worker(void *arg)
{
	struct pg_store *s = arg;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		size_t n = 0;

		while (s->head == NULL && !s->stopping)
			pthread_cond_wait(&s->wake, &s->lock);
		if (s->head == NULL)
			break;
		while (s->head != NULL && n < BATCH_MAX) {
			memset(&s->slots[n], 0, sizeof(s->slots[n]));
			s->slots[n++].req = s->head;
			s->head = s->head->next;
		}
		if (s->head == NULL)
			s->tail = &s->head;
		pthread_mutex_unlock(&s->lock);
		plan(s, n);
		run_batch(s, n);
		pthread_mutex_lock(&s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	withdraw_at_close(s);
	return NULL;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A new connection, set up: 0, or why not in err. */
static int reconnect(struct pg_store *s, char *err, size_t errlen)
{
	PQreset(s->conn);
	if (PQstatus(s->conn) != CONNECTION_OK) {
		pq_error(PQerrorMessage(s->conn), err, errlen);
		return -ECONNREFUSED;
	}
	if (PQserverVersion(s->conn) < MIN_SERVER) {
		snprintf(err, errlen, "server version %d is too old",
			 PQserverVersion(s->conn));
		return -EPROTONOSUPPORT;
	}
	PQsetNoticeProcessor(s->conn, no_notices, NULL);
	if (setup_session(s->conn, err, errlen) != 0 ||
	    prepare_all(s->conn, err, errlen) != 0)
		return -EIO;
	return 0;
}

/*
 * The connection, working, set up and holding the instance's name, for a
 * batch: 0, or why not (s->why says more). After a failed reconnect,
 * batches fail at once until the backoff has passed: each attempt blocks
 * the worker up to connect_timeout.
 */
static int ready(struct pg_store *s)
{
	bool fresh = false;
	char err[256];
	int rc = 0;

	if (!s->session || PQstatus(s->conn) != CONNECTION_OK) {
		s->session = s->named = false;
		if (s->down != 0 && now_ms() < s->retry_ms)
			return s->down;	/* s->why: the last attempt's */
		rc = reconnect(s, err, sizeof(err));
		if (rc != 0) {
			s->backoff_ms = s->backoff_ms == 0 ? BACKOFF_MIN_MS :
					s->backoff_ms * 2 > BACKOFF_MAX_MS ?
					BACKOFF_MAX_MS : s->backoff_ms * 2;
			s->retry_ms = now_ms() + s->backoff_ms;
		} else {
			s->backoff_ms = 0;
			s->session = fresh = true;
		}
	}
	/* Never a request without the name: another carmyd holding it
	 * would take this one's running executions for interrupted ones.
	 * Waited for on a new connection (this instance's old backend may
	 * still be letting it go), only tried after that. */
	if (rc == 0 && !s->named) {
		rc = take_name(s, fresh ? NAME_WAIT : NULL, false, err,
			       sizeof(err));
		if (rc == 0)
			s->named = true;
		else if (rc != -EBUSY)
			s->session = false;
	}
	if (rc != 0) {
		snprintf(s->why, sizeof(s->why), "%s", err);
		if (rc != s->down)
			say("instance %s: the database cannot take requests, "
			    "failing them until it can: %s", s->instance, err);
	} else if (s->down != 0) {
		say("instance %s: connected to the database again",
		    s->instance);
	}
	s->down = rc;
	return rc;
}

/* One order of identities, the same in every instance: any will do. */
static int identity_cmp(const struct carmy_store_record *a,
			const struct carmy_store_record *b)
{
	for (int k = 0; k < 3; k++) {
		size_t n = a->len[k] < b->len[k] ? a->len[k] : b->len[k];
		int c = memcmp(a->part[k], b->part[k], n);

		if (c != 0)
			return c;
		if (a->len[k] != b->len[k])
			return a->len[k] < b->len[k] ? -1 : 1;
	}
	return 0;
}

/* Equal identities keep their submission order (the slots' addresses). */
static int by_identity(const void *pa, const void *pb)
{
	const struct slot *a = *(const struct slot *const *)pa;
	const struct slot *b = *(const struct slot *const *)pb;
	int c = identity_cmp(a->req->rec, b->req->rec);

	return c != 0 ? c : a < b ? -1 : a > b;
}

/* The order of a batch's statements (s->order): submission order, but
 * for the RESERVEs between two requests that may free an identity
 * (RELEASE, RESOLVE, PURGE), which take the places RESERVEs had among
 * them in the order of their identities. Then two instances whose batches
 * reserve the same identities insert them in the same order, and neither
 * waits for a row the other inserted while the other waits for one of
 * its own. A RESERVE never passes a request that may free its identity:
 * carmyd sends the RELEASE first, and the new RESERVE after it. */
static void plan(struct pg_store *s, size_t n)
{
	size_t from = 0;

	for (size_t i = 0; i < n; i++)
		s->order[i] = &s->slots[i];
	while (from < n) {
		size_t to = from, k = 0;
		struct slot **run = s->order + from;

		/* [from, to): no request in it frees an identity */
		while (to < n && (s->slots[to].req->op ==
				  CARMY_STORE_RESERVE ||
				  s->slots[to].req->op ==
				  CARMY_STORE_COMPLETE))
			to++;
		/* Its RESERVEs to the front of run, sorted, then back
		 * into the RESERVEs' places. */
		for (size_t i = from; i < to; i++)
			if (s->slots[i].req->op == CARMY_STORE_RESERVE)
				run[k++] = &s->slots[i];
		qsort(run, k, sizeof(*run), by_identity);
		for (size_t i = to; i-- > from;) {
			if (s->slots[i].req->op == CARMY_STORE_RESERVE)
				s->order[i] = run[--k];
			else
				s->order[i] = &s->slots[i];
		}
		from = to + 1;	/* past the one that frees an identity */
	}
}

/* Keep what it takes to delete the row a failed RESERVE may have left. */
static void remember(struct pg_store *s, const struct carmy_store_record *r)
{
	struct withdrawal *w;
	size_t len = (size_t)r->len[0] + r->len[1] + r->len[2], off = 0;
	char hex[33];

	if (s->nwd == WITHDRAW_MAX || (w = &s->wd[s->nwd],
				       w->id = malloc(len)) == NULL) {
		say("instance %s: cannot remember to withdraw exec %s, whose "
		    "reservation was reported failed but may have committed: "
		    "if it stands as running, resolve it as not committed",
		    s->instance, hex16(r->exec, hex));
		return;
	}
	memcpy(w->exec, r->exec, 16);
	for (int k = 0; k < 3; k++) {
		w->len[k] = r->len[k];
		memcpy(w->id + off, r->part[k], r->len[k]);
		off += r->len[k];
	}
	s->nwd++;
}

/* After a commit: the withdrawals it carried are done. */
static void withdrawn(struct pg_store *s)
{
	for (size_t i = 0; i < s->nwd; i++)
		free(s->wd[i].id);
	s->nwd = 0;
}

static void answer(struct slot *sl)
{
	struct carmy_store_req *req = sl->req;

	if (sl->rc == 0 && sl->res != NULL)
		req->taken(req, &sl->standing);
	PQclear(sl->res);
	sl->res = NULL;
	sl->answered = true;
	req->done(req, sl->rc);	/* req may be gone after this */
}

/* Answer sl with a failure, no commit behind it: a RESERVE that may have
 * committed in an earlier run is to be withdrawn. */
static void fail(struct pg_store *s, struct slot *sl, int rc)
{
	if (sl->unsure && sl->req->op == CARMY_STORE_RESERVE)
		remember(s, sl->req->rec);
	sl->rc = rc;
	answer(sl);
}

/* After a commit: answer what it settled, in order; count what must run
 * again. */
static size_t answer_settled(struct pg_store *s, size_t n)
{
	size_t left = 0;

	for (size_t i = 0; i < n; i++) {
		struct slot *sl = &s->slots[i];

		if (sl->answered)
			continue;
		if (sl->again) {
			sl->again = false;
			snprintf(s->why, sizeof(s->why), "an identity kept "
				 "changing hands under a reservation");
			left++;
		} else {
			answer(sl);
		}
	}
	return left;
}

/* After a rollback: forget what the run decided. */
static void forget(struct pg_store *s, size_t n, bool lost)
{
	for (size_t i = 0; i < n; i++) {
		struct slot *sl = &s->slots[i];

		PQclear(sl->res);
		sl->res = NULL;
		sl->rc = 0;
		sl->again = false;
		if (lost && !sl->answered)
			sl->unsure = true;
	}
}

/*
 * Write slots[0..n), and what is left to withdraw, until each is answered:
 * one transaction per run, runs again after a conflict, a lost connection
 * or a RESERVE that must look again, at most TRIES_MAX runs in all.
 */
static void run_batch(struct pg_store *s, size_t n)
{
	size_t left = n;
	int rc = 0, tries = 0;
	bool said = false;

	s->wd_held = false;
	while (left > 0 || (s->nwd > 0 && !s->wd_held)) {
		if (tries++ == TRIES_MAX) {
			rc = -EAGAIN;	/* s->why: the last trouble */
			break;
		}
		rc = ready(s);
		if (rc != 0) {
			said = true;	/* ready() did */
			break;
		}
		rc = run_once(s, n);
		if (rc == 0) {
			if (!s->wd_held)
				withdrawn(s);
			left = answer_settled(s, n);
			continue;
		}
		forget(s, n, rc == LOST);
		if (rc == LOST) {
			say("instance %s: connection lost (%s): reconnecting "
			    "to run the batch again", s->instance, s->why);
			s->session = false;
		} else if (rc == WAITED && s->wd_waited) {
			say("instance %s: a withdrawal waited on a lock (%s): "
			    "left for the next batch", s->instance, s->why);
			s->wd_held = true;
		} else if (rc == WAITED && s->culprit != NULL) {
			say("instance %s: a request failed, alone (%s): "
			    "running the rest of its batch again",
			    s->instance, s->why);
			fail(s, s->culprit, -EAGAIN);
			left--;
		} else if (rc != RETRY && rc != WAITED) {
			break;
		}
	}
	if (left == 0)
		return;
	left = 0;
	for (size_t i = 0; i < n; i++) {
		if (!s->slots[i].answered) {
			fail(s, &s->slots[i], rc);
			left++;
		}
	}
	if (!said)
		say("instance %s: failed %zu requests (%s): %s", s->instance,
		    left, strerror(-rc), s->why);
}

/* One run: what is left to withdraw and the unanswered slots as one
 * pipelined transaction. 0 once it committed (each slot's rc and again
 * say what it decided), else RETRY, WAITED, LOST or -EIO, with the
 * transaction rolled back or the connection to be reset. */
static int run_once(struct pg_store *s, size_t n)
{
	PGconn *c = s->conn;
	int rc;

	s->culprit = NULL;
	s->wd_waited = false;
	if (PQenterPipelineMode(c)) {
		rc = send_batch(s, n);
		if (rc == 0)
			rc = read_batch(s, n);
	} else {
		rc = LOST;
	}
	if (rc == LOST || !PQexitPipelineMode(c)) {
		pq_error(PQerrorMessage(c), s->why, sizeof(s->why));
		return LOST;
	}
	/* A failure between BEGIN and COMMIT leaves the transaction open
	 * and aborted at the sync. */
	if (PQtransactionStatus(c) != PQTRANS_IDLE) {
		PGresult *r = PQexec(c, "ROLLBACK");

		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			rc = LOST;
		PQclear(r);
	}
	return rc;
}

/* ------------------------------------------------ sending a batch */

static void put_be(uint8_t *out, uint64_t v, int size)
{
	for (int i = size - 1; i >= 0; i--, v >>= 8)
		out[i] = (uint8_t)v;
}

static int send_reserve(PGconn *c, const struct carmy_store_record *r,
			const char *instance)
{
	uint8_t pid[8], started[8];
	const char *v[9];
	int len[9], fmt[9];

	put_be(pid, r->pid, 8);
	put_be(started, r->started_ns, 8);
	for (int k = 0; k < 3; k++) {
		v[k] = (const char *)r->part[k];
		len[k] = r->len[k];
	}
	v[3] = (const char *)r->exec;
	v[4] = instance;
	v[5] = (const char *)r->fingerprint;
	v[6] = (const char *)r->rawprint;
	v[7] = (const char *)pid;
	v[8] = (const char *)started;
	len[3] = len[5] = len[6] = 16;
	len[4] = (int)strlen(instance);
	len[7] = len[8] = 8;
	for (int k = 0; k < 9; k++)
		fmt[k] = 1;
	return PQsendQueryPrepared(c, stmts[ST_RESERVE].name, 9, v, len, fmt,
				   1);
}

/* COMPLETE, or RESOLVE as committed (resolved: with who settled it). */
static int send_settle(PGconn *c, const struct carmy_store_record *r,
		       bool resolved, const char *instance)
{
	uint8_t finished[8], status[4], code[4], rns[8], uid[8], pid[8];
	const char *v[9] = { (const char *)r->exec, (const char *)finished,
		(const char *)status, (const char *)code,
		r->result_len ? (const char *)r->result : "",
		NULL, NULL, NULL, instance };
	int len[9] = { 16, 8, 4, 4, (int)r->result_len, 8, 8, 8,
		       (int)strlen(instance) };
	int fmt[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };

	put_be(finished, r->finished_ns, 8);
	put_be(status, (uint32_t)r->status, 4);
	put_be(code, (uint32_t)r->result_code, 4);
	if (resolved) {
		put_be(rns, r->resolved_ns, 8);
		put_be(uid, r->resolved_uid, 8);
		put_be(pid, r->resolved_pid, 8);
		v[5] = (const char *)rns;
		v[6] = (const char *)uid;
		v[7] = (const char *)pid;
	}
	return PQsendQueryPrepared(c, stmts[ST_SETTLE].name, 9, v, len, fmt,
				   1);
}

/* RELEASE (with instance) or PURGE (without). */
static int send_exec(PGconn *c, int st, const uint8_t exec[16],
		     const char *instance)
{
	const char *v[2] = { (const char *)exec, instance };
	int len[2] = { 16, instance ? (int)strlen(instance) : 0 };
	int fmt[2] = { 1, 1 };

	return PQsendQueryPrepared(c, stmts[st].name, instance ? 2 : 1, v,
				   len, fmt, 1);
}

static int send_withdraw(PGconn *c, const struct withdrawal *w,
			 const char *instance)
{
	const char *v[5] = { (const char *)w->id,
		(const char *)w->id + w->len[0],
		(const char *)w->id + w->len[0] + w->len[1],
		(const char *)w->exec, instance };
	int len[5] = { w->len[0], w->len[1], w->len[2], 16,
		       (int)strlen(instance) };
	int fmt[5] = { 1, 1, 1, 1, 1 };

	return PQsendQueryPrepared(c, stmts[ST_WITHDRAW].name, 5, v, len, fmt,
				   1);
}

static int send_one(PGconn *c, const struct carmy_store_req *req,
		    const char *instance)
{
	const struct carmy_store_record *r = req->rec;

	switch (req->op) {
	case CARMY_STORE_RESERVE:
		return send_reserve(c, r, instance);
	case CARMY_STORE_COMPLETE:
		return send_settle(c, r, false, instance);
	case CARMY_STORE_RESOLVE:
		if (r->state == CARMY_STORE_COMPLETED)
			return send_settle(c, r, true, instance);
		return send_exec(c, ST_RELEASE, r->exec, instance);
	case CARMY_STORE_RELEASE:
		return send_exec(c, ST_RELEASE, r->exec, instance);
	default:
		return send_exec(c, ST_PURGE, r->exec, NULL);
	}
}

/* BEGIN, the withdrawals, the unanswered slots' statements in s->order,
 * COMMIT, sync: queued, then flushed by the sync. 0, or LOST (the
 * connection is reset after). */
static int send_batch(struct pg_store *s, size_t n)
{
	PGconn *c = s->conn;

	if (!PQsendQueryParams(c, "BEGIN ISOLATION LEVEL READ COMMITTED, "
			       "READ WRITE", 0, NULL, NULL, NULL, NULL, 1))
		return LOST;
	for (size_t i = 0; i < (s->wd_held ? 0 : s->nwd); i++)
		if (!send_withdraw(c, &s->wd[i], s->instance))
			return LOST;
	for (size_t i = 0; i < n; i++)
		if (!s->order[i]->answered &&
		    !send_one(c, s->order[i]->req, s->instance))
			return LOST;
	if (!PQsendQueryParams(c, "COMMIT", 0, NULL, NULL, NULL, NULL, 1) ||
	    !PQpipelineSync(c))
		return LOST;
	return 0;
}

/* ------------------------------------------------ reading its answers */

/* The result of the next command in the pipeline, having read the NULL
 * that ends it; the sync's; or NULL: the connection is gone or the
 * answers do not match what was sent. */
static PGresult *next_result(PGconn *c)
{
	PGresult *r = PQgetResult(c), *end;

	if (r != NULL && PQresultStatus(r) != PGRES_PIPELINE_SYNC &&
	    (end = PQgetResult(c)) != NULL) {
		PQclear(end);
		PQclear(r);
		return NULL;
	}
	if (PQstatus(c) != CONNECTION_OK) {
		PQclear(r);
		return NULL;
	}
	return r;
}

/* Why a command failed: RETRY or WAITED for what a rerun resolves, else
 * -EIO with the server's words in s->why. */
static int failure(struct pg_store *s, const PGresult *r)
{
	const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	const char *sev = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);

	pq_error(PQresultErrorMessage(r), s->why, sizeof(s->why));
	if (state != NULL && (strcmp(state, "40P01") == 0 ||
			      strcmp(state, "40001") == 0))
		return RETRY;
	/* lock_timeout, statement_timeout, or a cancel */
	if (state != NULL && (strcmp(state, "55P03") == 0 ||
			      strcmp(state, "57014") == 0))
		return WAITED;
	/* FATAL: the server is closing the connection (a shutdown, a
	 * terminated backend). */
	if (sev != NULL && strcmp(sev, "ERROR") != 0)
		return LOST;
	return -EIO;
}

/* Read up to and including the sync. rc: the run's outcome so far. */
static int to_sync(PGconn *c, int rc)
{
	for (;;) {
		PGresult *r = next_result(c);
		ExecStatusType st = PQresultStatus(r);

		PQclear(r);
		if (r == NULL)
			return LOST;
		if (st == PGRES_PIPELINE_SYNC)
			return rc;
		if (rc == 0)
			rc = LOST;	/* more answers than commands */
	}
}

/* One command's answer: rc 0 and the result, or why it failed. */
static int command(struct pg_store *s, PGresult *r)
{
	ExecStatusType st = PQresultStatus(r);

	if (r == NULL)
		return LOST;
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		return 0;
	if (st == PGRES_FATAL_ERROR)
		return failure(s, r);
	snprintf(s->why, sizeof(s->why), "unexpected %s", PQresStatus(st));
	return -EIO;
}

static int read_batch(struct pg_store *s, size_t n)
{
	PGconn *c = s->conn;
	PGresult *r = next_result(c);
	int rc = command(s, r);

	PQclear(r);
	for (size_t i = 0; i < (s->wd_held ? 0 : s->nwd) && rc == 0; i++) {
		r = next_result(c);
		rc = command(s, r);
		PQclear(r);
		s->wd_waited = rc == WAITED;
	}
	for (size_t i = 0; i < n && rc == 0; i++) {
		struct slot *sl = s->order[i];

		if (sl->answered)
			continue;
		r = next_result(c);
		rc = command(s, r);
		if (rc != 0) {
			PQclear(r);
			if (rc == WAITED)
				s->culprit = sl;
		} else if ((rc = judge(sl, r)) != 0) {
			snprintf(s->why, sizeof(s->why), "a statement "
				 "answered rows of an unexpected shape");
		}
	}
	if (rc == 0) {
		r = next_result(c);
		rc = command(s, r);
		if (rc == 0 && strcmp(PQcmdStatus(r), "COMMIT") != 0) {
			snprintf(s->why, sizeof(s->why), "COMMIT answered %s",
				 PQcmdStatus(r));
			rc = -EIO;
		}
		PQclear(r);
	}
	return to_sync(c, rc);
}

/* ------------------------------------------ what each statement found */

/* A binary integer column of size bytes in [lo, hi]; NULL is damage. */
static int get_int(const PGresult *r, int row, int col, int size, int64_t lo,
		   int64_t hi, int64_t *out)
{
	const uint8_t *p = (const uint8_t *)PQgetvalue(r, row, col);
	uint64_t u = 0;
	int64_t v;

	if (PQgetisnull(r, row, col) || PQgetlength(r, row, col) != size)
		return -EBADMSG;
	for (int i = 0; i < size; i++)
		u = u << 8 | p[i];
	v = size == 8 ? (int64_t)u : size == 4 ? (int32_t)(uint32_t)u :
	    size == 2 ? (int16_t)(uint16_t)u : (int64_t)u;
	if (v < lo || v > hi)
		return -EBADMSG;
	*out = v;
	return 0;
}

/* The same, or 0 for NULL. */
static int get_opt_int(const PGresult *r, int row, int col, int size,
		       int64_t lo, int64_t hi, int64_t *out)
{
	if (PQgetisnull(r, row, col)) {
		*out = 0;
		return 0;
	}
	return get_int(r, row, col, size, lo, hi, out);
}

/* A bytea column of lo..hi bytes; NULL is damage. */
static int get_bytes(const PGresult *r, int row, int col, int lo, int64_t hi,
		     const uint8_t **p, uint32_t *len)
{
	int n = PQgetlength(r, row, col);

	if (PQgetisnull(r, row, col) || n < lo || n > hi)
		return -EBADMSG;
	*p = (const uint8_t *)PQgetvalue(r, row, col);
	*len = (uint32_t)n;
	return 0;
}

static int get_id16(const PGresult *r, int row, int col, uint8_t out[16])
{
	const uint8_t *p;
	uint32_t n;

	if (get_bytes(r, row, col, 16, 16, &p, &n) != 0)
		return -EBADMSG;
	memcpy(out, p, 16);
	return 0;
}

/* The completed half of a record: its result. */
static int decode_result(const PGresult *r, int row, int base,
			 struct carmy_store_record *rec)
{
	const uint8_t *p;
	int64_t fin, status, code;

	if (get_int(r, row, base + C_FINISHED, 8, 0, INT64_MAX, &fin) ||
	    get_int(r, row, base + C_STATUS, 4, INT32_MIN, INT32_MAX,
		    &status) ||
	    get_int(r, row, base + C_RESULT_CODE, 4, INT32_MIN, INT32_MAX,
		    &code) ||
	    get_bytes(r, row, base + C_RESULT, 0, UINT32_MAX, &p,
		      &rec->result_len))
		return -EBADMSG;
	rec->finished_ns = (uint64_t)fin;
	rec->status = (int32_t)status;
	rec->result_code = (int32_t)code;
	rec->result = p;
	return 0;
}

/* Row row of r, its ROW_COLS from column base, into rec (pointing into
 * r): 0, or -EBADMSG for anything this store would not have written. */
static int decode_row(const PGresult *r, int row, int base,
		      struct carmy_store_record *rec)
{
	int64_t pid, started, state, rns, ruid, rpid;

	memset(rec, 0, sizeof(*rec));
	if (PQnfields(r) != base + C_NCOLS || PQntuples(r) <= row)
		return -EBADMSG;
	for (int k = 0; k < 3; k++) {
		uint32_t len;

		if (get_bytes(r, row, base + C_PRINCIPAL + k, 1,
			      CARMY_STORE_ID_MAX, &rec->part[k], &len))
			return -EBADMSG;
		rec->len[k] = (uint16_t)len;
	}
	if (get_id16(r, row, base + C_EXEC, rec->exec) ||
	    get_id16(r, row, base + C_FINGERPRINT, rec->fingerprint) ||
	    get_id16(r, row, base + C_RAWPRINT, rec->rawprint) ||
	    get_int(r, row, base + C_PID, 8, 0, UINT32_MAX, &pid) ||
	    get_int(r, row, base + C_STARTED, 8, 0, INT64_MAX, &started) ||
	    get_int(r, row, base + C_STATE, 2, CARMY_STORE_RUNNING,
		    CARMY_STORE_COMPLETED, &state) ||
	    get_opt_int(r, row, base + C_RESOLVED_NS, 8, 0, INT64_MAX, &rns) ||
	    get_opt_int(r, row, base + C_RESOLVED_UID, 8, 0, UINT32_MAX,
			&ruid) ||
	    get_opt_int(r, row, base + C_RESOLVED_PID, 8, 0, UINT32_MAX,
			&rpid))
		return -EBADMSG;
	rec->pid = (uint32_t)pid;
	rec->started_ns = (uint64_t)started;
	rec->state = (int32_t)state;
	rec->resolved_ns = (uint64_t)rns;
	rec->resolved_uid = (uint32_t)ruid;
	rec->resolved_pid = (uint32_t)rpid;
	if (state == CARMY_STORE_COMPLETED)
		return decode_result(r, row, base, rec);
	return 0;
}

/* RESERVE: inserted, its own row, taken, an exec id another identity
 * holds, or look again. Keeps r when taken. Its own: this exec and this
 * instance; a row of another instance with req's exec id (a client named
 * it) is a row like any other. */
static void judge_reserve(struct slot *sl, PGresult *r)
{
	int64_t inserted, found, mine, used;

	if (get_int(r, 0, 0, 1, 0, 1, &inserted) ||
	    get_int(r, 0, 1, 1, 0, 1, &found) ||
	    get_opt_int(r, 0, 2, 1, 0, 1, &mine) ||
	    get_int(r, 0, 3, 1, 0, 1, &used)) {
		sl->rc = -EBADMSG;
	} else if (inserted) {
		sl->rc = 0;
	} else if (!found && used) {
		sl->rc = -EEXIST;	/* UNIQUE (exec), not the identity */
	} else if (!found) {
		sl->again = true;
	} else if ((sl->rc = decode_row(r, 0, 4, &sl->standing)) != 0) {
		/* damage stands for the identity: nothing recorded */
	} else if (mine &&
		   memcmp(sl->standing.exec, sl->req->rec->exec, 16) == 0) {
		sl->rc = 0;
	} else if (sl->req->taken == NULL) {
		sl->rc = -EEXIST;
	} else {
		sl->res = r;
		return;
	}
	PQclear(r);
}

/* COMPLETE, RESOLVE as committed: updated, already holding exactly this
 * result, stale, or look again. */
static void judge_settle(struct slot *sl, PGresult *r)
{
	int64_t updated, found, state, same;

	if (get_int(r, 0, 0, 1, 0, 1, &updated) ||
	    get_int(r, 0, 1, 1, 0, 1, &found))
		sl->rc = -EBADMSG;
	else if (updated)
		sl->rc = 0;
	else if (!found)
		sl->rc = -ESTALE;
	else if (get_int(r, 0, 2, 2, INT16_MIN, INT16_MAX, &state))
		sl->rc = -EBADMSG;
	else if (state == CARMY_STORE_RUNNING)
		sl->again = true;	/* completed after our snapshot */
	else if (state != CARMY_STORE_COMPLETED)
		sl->rc = -EBADMSG;
	else
		sl->rc = get_opt_int(r, 0, 3, 1, 0, 1, &same) == 0 && same ?
			 0 : -ESTALE;
	PQclear(r);
}

/* What sl's statement found: sl->rc and sl->again, tentatively. Takes r.
 * Returns 0, or -EIO if r is not the shape its statement has. */
static int judge(struct slot *sl, PGresult *r)
{
	const struct carmy_store_req *req = sl->req;
	bool settle = req->op == CARMY_STORE_COMPLETE ||
		      (req->op == CARMY_STORE_RESOLVE &&
		       req->rec->state == CARMY_STORE_COMPLETED);

	if (req->op == CARMY_STORE_RESERVE || settle) {
		if (PQresultStatus(r) != PGRES_TUPLES_OK ||
		    PQntuples(r) != 1 ||
		    PQnfields(r) < 4) {
			PQclear(r);
			return -EIO;
		}
		if (settle)
			judge_settle(sl, r);
		else
			judge_reserve(sl, r);
		return 0;
	}
	sl->rc = 0;	/* a DELETE: there or not, it is gone */
	PQclear(r);
	return 0;
}

/* ------------------------------------------------------------ helpers */

/* One line on stderr, one write(2), like carmyd's own. */
static void say(const char *fmt, ...)
{
	char line[768];
	va_list ap;
	int n = snprintf(line, sizeof(line), "carmy_store_pg: ");

	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;	/* nowhere else to say it */
}

/* libpq's message on one line: each run of blanks and newlines becomes
 * one space, none at the end. */
static const char *pq_error(const char *msg, char *buf, size_t len)
{
	size_t n = 0;

	if (msg == NULL || msg[0] == '\0')
		msg = "unknown error";
	for (const char *p = msg; *p != '\0' && n + 1 < len; p++) {
		bool blank = *p == ' ' || *p == '\n' || *p == '\t';

		if (!blank)
			buf[n++] = *p;
		else if (n > 0 && buf[n - 1] != ' ')
			buf[n++] = ' ';
	}
	while (n > 0 && buf[n - 1] == ' ')
		n--;
	buf[n] = '\0';
	return buf;
}

static const char *hex16(const uint8_t id[16], char out[33])
{
	static const char digits[] = "0123456789abcdef";

	for (int i = 0; i < 16; i++) {
		out[2 * i] = digits[id[i] >> 4];
		out[2 * i + 1] = digits[id[i] & 15];
	}
	out[32] = '\0';
	return out;
}
