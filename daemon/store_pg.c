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
 * keepalives_count=3: the worker would otherwise wait on it for hours) and
 * fallback_application_name=carmyd; the string overrides any of them.
 * Point it at a primary (target_session_attrs=read-write with several
 * hosts), directly or through a pooler in session mode: statements are
 * prepared once per connection.
 *
 * NAME is this carmyd among those sharing the database, 1 to 64 bytes of
 * [A-Za-z0-9._-], the host name by default. load() selects on it, so two
 * carmyds sharing one database MUST have distinct names (two on one host:
 * give both one), and a carmyd that comes back after a reboot must keep
 * its name to find its executions again.
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
 * Each op in SQL (exec: the 16-byte execution id; every value a bound
 * parameter, bytea and integers in binary):
 *
 *   RESERVE   INSERT ... ON CONFLICT (identity) DO NOTHING, and in the same
 *             statement the row standing for the identity. Inserted:
 *             recorded. A row with req's own exec: recorded (this is a
 *             batch run again). Any other row: taken(), nothing recorded.
 *             Neither: the row that stopped the insert was committed after
 *             the statement's snapshot was taken (READ COMMITTED); the
 *             statement runs again, in the next transaction, which sees it.
 *   COMPLETE  UPDATE ... SET state 2 and the result WHERE exec AND state 1.
 *             No row updated: fine if the row already holds exactly this
 *             result (a batch run again), -ESTALE otherwise: a result is
 *             never overwritten, a released execution never resurrected.
 *   RESOLVE   committed: as COMPLETE, with the resolved_* fields; not
 *             committed: as RELEASE.
 *   RELEASE   DELETE WHERE exec AND state 1; 0 whether or not a row went.
 *   PURGE     DELETE WHERE exec AND state 2; likewise.
 *
 * Group commit. One thread owns the connection. submit() queues and
 * returns; the thread takes everything queued as one batch and sends it in
 * one pipeline (libpq pipeline mode): BEGIN, each request's statement in
 * submission order, COMMIT, sync, one round trip and one WAL flush for the
 * lot, then it answers every request. While a batch waits for its flush
 * the next one queues up, so throughput grows with concurrency. The
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
 * Why a batch may run twice. A deadlock, serialization failure or lock
 * timeout rolls the batch back: it runs again (up to TRIES_MAX times).
 * A connection lost with the COMMIT sent leaves its outcome unknown: the
 * store reconnects and runs the batch again. Every statement above is
 * written to be right either way: RESERVE recognises its own exec, COMPLETE
 * and RESOLVE their own result, RELEASE and PURGE delete what is there.
 * A server that cannot be reached fails the batch (-ECONNREFUSED), and the
 * next batch tries again: the store keeps answering failures until it can
 * record, and never pretends.
 *
 * Every value read back is untrusted: a row that is not what this store
 * writes (lengths, states, ranges) fails load() with -EBADMSG, and a
 * RESERVE that finds one standing fails -EBADMSG.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "carmy_store.h"

#define INSTANCE_MAX 64
#define BATCH_MAX 1024		/* requests in one transaction */
#define TRIES_MAX 20		/* runs of one batch before -EAGAIN */
#define RESULT_MAX 0x3fff0000u	/* under bytea's (and a message's) 1 GB */
#define MIN_SERVER 90500	/* INSERT ... ON CONFLICT */
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

/* Columns 0 and 1: was it inserted, is a row standing; then ROW_COLS. The
 * join sees the statement's snapshot, not the insert's row: a row shows
 * only if it stood before. */
#define RESERVE_SQL \
	"WITH ins AS (INSERT INTO carmy_executions (principal, session," \
	" request_id, exec, instance, fingerprint, rawprint, pid, started_ns," \
	" state) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 1)" \
	" ON CONFLICT (principal, session, request_id) DO NOTHING" \
	" RETURNING 1)" \
	" SELECT EXISTS (SELECT 1 FROM ins), e.ctid IS NOT NULL, " ROW_COLS \
	" FROM (VALUES (1)) AS one (x) LEFT JOIN carmy_executions AS e" \
	" ON e.principal = $1 AND e.session = $2 AND e.request_id = $3"
/* COMPLETE, and RESOLVE as committed ($6..$8 NULL for COMPLETE). Columns:
 * updated, row found, its state, whether it holds exactly this result. */
#define SETTLE_SQL \
	"WITH upd AS (UPDATE carmy_executions SET state = 2," \
	" finished_ns = $2, status = $3, result_code = $4, result = $5," \
	" resolved_ns = $6, resolved_uid = $7, resolved_pid = $8" \
	" WHERE exec = $1 AND state = 1" \
	" RETURNING 1)" \
	" SELECT EXISTS (SELECT 1 FROM upd), e.ctid IS NOT NULL, e.state," \
	" e.status = $3 AND e.result_code = $4 AND e.result = $5" \
	" FROM (VALUES (1)) AS one (x) LEFT JOIN carmy_executions AS e" \
	" ON e.exec = $1"
#define RELEASE_SQL \
	"DELETE FROM carmy_executions WHERE exec = $1 AND state = 1"
#define PURGE_SQL \
	"DELETE FROM carmy_executions WHERE exec = $1 AND state = 2"
#define LOAD_SQL \
	"SELECT " ROW_COLS " FROM carmy_executions WHERE instance = $1"

static const struct stmt {
	const char *name, *sql;
	int nparams;
	Oid types[9];
} stmts[] = {
	{ "carmy_reserve", RESERVE_SQL, 9, { BYTEAOID, BYTEAOID, BYTEAOID,
	  BYTEAOID, TEXTOID, BYTEAOID, BYTEAOID, INT8OID, INT8OID } },
	{ "carmy_settle", SETTLE_SQL, 8, { BYTEAOID, INT8OID, INT4OID,
	  INT4OID, BYTEAOID, INT8OID, INT8OID, INT8OID } },
	{ "carmy_release", RELEASE_SQL, 1, { BYTEAOID } },
	{ "carmy_purge", PURGE_SQL, 1, { BYTEAOID } },
};
enum { ST_RESERVE, ST_SETTLE, ST_RELEASE, ST_PURGE };

/* A request of the batch being written, and what its run decided. The
 * decision is only tentative until the transaction has committed. */
struct slot {
	struct carmy_store_req *req;
	int rc;				/* its answer */
	bool again;			/* run its statement again */
	bool answered;
	PGresult *res;			/* RESERVE taken: the row */
	struct carmy_store_record standing;	/* points into res */
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
	bool ready;		/* connected, session set up */
	bool down;		/* said so on stderr; say when it is back */
	struct slot *slots;	/* BATCH_MAX */
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
static int check_req(const struct carmy_store_req *req);
static void *worker(void *arg);
static void run_batch(struct pg_store *s, size_t n);
static int run_once(struct pg_store *s, size_t n);
static int send_batch(PGconn *c, struct slot *slots, size_t n,
		      const char *instance);
static int read_batch(struct pg_store *s, size_t n);
static int judge(struct slot *sl, PGresult *r);
static int decode_row(const PGresult *r, int row, int base,
		      struct carmy_store_record *rec);
static void say(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static const char *pq_error(const char *msg, char *buf, size_t len);

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
		rc = create_schema(s->conn, err, errlen);
	if (rc == 0)
		rc = setup_session(s->conn, err, errlen);
	if (rc == 0) {
		s->slots = calloc(BATCH_MAX, sizeof(*s->slots));
		if (s->slots == NULL) {
			snprintf(err, errlen, "out of memory");
			rc = -ENOMEM;
		}
	}
	if (rc == 0) {
		int e;

		s->ready = true;
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

/*
 * Hand over this instance's executions, row by row (single-row mode: a
 * million of them are never in memory at once). The worker is idle: no
 * request has been submitted yet, so the connection is ours here.
 */
static int pg_load(void *store, carmy_store_each_fn each, void *arg)
{
	struct pg_store *s = store;
	PGconn *c = s->conn;
	const char *params[1] = { s->instance };
	PGresult *r;
	int rc = 0;
	char msg[256];

	if (!PQsendQueryParams(c, LOAD_SQL, 1, NULL, params, NULL, NULL, 1)) {
		say("cannot load the executions of instance %s: %s",
		    s->instance, pq_error(PQerrorMessage(c), msg, sizeof(msg)));
		return -EIO;
	}
	if (!PQsetSingleRowMode(c)) {
		say("cannot load the executions of instance %s row by row",
		    s->instance);
		while ((r = PQgetResult(c)) != NULL)
			PQclear(r);
		return -EIO;
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
	return rc;
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
	PQfinish(s->conn);
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
		"fallback_application_name", "dbname", NULL };
	const char *values[] = { "10", "30", "10", "3", "carmyd", conninfo,
				 NULL };
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
 * find the table absent): the advisory lock makes them take turns. */
static int create_schema(PGconn *c, char *err, size_t errlen)
{
	size_t n = sizeof(schema_sql) / sizeof(schema_sql[0]);

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

/* What every connection needs before a batch, at open and after every
 * reconnect: commits that wait for the flush, and the statements. */
static int setup_session(PGconn *c, char *err, size_t errlen)
{
	int rc = exec_ok(c, "SET synchronous_commit = on", "cannot set "
			 "synchronous_commit", err, errlen);

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
		run_batch(s, n);
		pthread_mutex_lock(&s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* The connection, working and set up for a batch: 0, or why not. */
static int ready(struct pg_store *s)
{
	char err[512];
	int rc = 0;

	if (s->ready && PQstatus(s->conn) == CONNECTION_OK)
		return 0;
	PQreset(s->conn);
	if (PQstatus(s->conn) != CONNECTION_OK) {
		pq_error(PQerrorMessage(s->conn), err, sizeof(err));
		rc = -ECONNREFUSED;
	} else if (PQserverVersion(s->conn) < MIN_SERVER) {
		snprintf(err, sizeof(err), "server version %d is too old",
			 PQserverVersion(s->conn));
		rc = -EPROTONOSUPPORT;
	} else {
		rc = setup_session(s->conn, err, sizeof(err));
	}
	if (rc != 0 && !s->down)
		say("instance %s: the database cannot take requests, failing "
		    "them until it can: %s", s->instance, err);
	if (rc == 0 && s->down)
		say("instance %s: connected to the database again",
		    s->instance);
	s->down = rc != 0;
	s->ready = rc == 0;
	return rc;
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
static void forget(struct pg_store *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct slot *sl = &s->slots[i];

		PQclear(sl->res);
		sl->res = NULL;
		sl->rc = 0;
		sl->again = false;
	}
}

/*
 * Write slots[0..n) until each is answered: one transaction per run, runs
 * again after a conflict, a lost connection or a RESERVE that must look
 * again, at most TRIES_MAX runs in all.
 */
static void run_batch(struct pg_store *s, size_t n)
{
	size_t left = n;
	int rc = 0, tries = 0;
	bool said = false;

	while (left > 0) {
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
			left = answer_settled(s, n);
			continue;
		}
		forget(s, n);
		if (rc == LOST) {
			say("instance %s: connection lost (%s): reconnecting "
			    "to run the batch again", s->instance, s->why);
			s->ready = false;
		} else if (rc != RETRY) {
			break;
		}
	}
	if (left == 0)
		return;
	left = 0;
	for (size_t i = 0; i < n; i++) {
		if (!s->slots[i].answered) {
			s->slots[i].rc = rc;
			answer(&s->slots[i]);
			left++;
		}
	}
	if (!said)
		say("instance %s: failed %zu requests (%s): %s", s->instance,
		    left, strerror(-rc), s->why);
}

/* One run: the unanswered slots as one pipelined transaction. 0 once it
 * committed (each slot's rc and again say what it decided), else RETRY,
 * LOST or -EIO, with the transaction rolled back or the connection to be
 * reset. */
static int run_once(struct pg_store *s, size_t n)
{
	PGconn *c = s->conn;
	int rc;

	if (PQenterPipelineMode(c)) {
		rc = send_batch(c, s->slots, n, s->instance);
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
		       bool resolved)
{
	uint8_t finished[8], status[4], code[4], rns[8], uid[8], pid[8];
	const char *v[8] = { (const char *)r->exec, (const char *)finished,
		(const char *)status, (const char *)code,
		r->result_len ? (const char *)r->result : "",
		NULL, NULL, NULL };
	int len[8] = { 16, 8, 4, 4, (int)r->result_len, 8, 8, 8 };
	int fmt[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };

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
	return PQsendQueryPrepared(c, stmts[ST_SETTLE].name, 8, v, len, fmt,
				   1);
}

static int send_exec(PGconn *c, int st, const uint8_t exec[16])
{
	const char *v[1] = { (const char *)exec };
	int len[1] = { 16 }, fmt[1] = { 1 };

	return PQsendQueryPrepared(c, stmts[st].name, 1, v, len, fmt, 1);
}

static int send_one(PGconn *c, const struct carmy_store_req *req,
		    const char *instance)
{
	const struct carmy_store_record *r = req->rec;

	switch (req->op) {
	case CARMY_STORE_RESERVE:
		return send_reserve(c, r, instance);
	case CARMY_STORE_COMPLETE:
		return send_settle(c, r, false);
	case CARMY_STORE_RESOLVE:
		if (r->state == CARMY_STORE_COMPLETED)
			return send_settle(c, r, true);
		return send_exec(c, ST_RELEASE, r->exec);
	case CARMY_STORE_RELEASE:
		return send_exec(c, ST_RELEASE, r->exec);
	default:
		return send_exec(c, ST_PURGE, r->exec);
	}
}

/* BEGIN, the unanswered slots' statements, COMMIT, sync: queued, then
 * flushed by the sync. 0, or LOST (the connection is reset after). */
static int send_batch(PGconn *c, struct slot *slots, size_t n,
		      const char *instance)
{
	if (!PQsendQueryParams(c, "BEGIN ISOLATION LEVEL READ COMMITTED, "
			       "READ WRITE", 0, NULL, NULL, NULL, NULL, 1))
		return LOST;
	for (size_t i = 0; i < n; i++)
		if (!slots[i].answered &&
		    !send_one(c, slots[i].req, instance))
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

/* Why a command failed: RETRY for what a rerun resolves, else -EIO with
 * the server's words in s->why. */
static int failure(struct pg_store *s, const PGresult *r)
{
	const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	const char *sev = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);

	pq_error(PQresultErrorMessage(r), s->why, sizeof(s->why));
	if (state != NULL && (strcmp(state, "40P01") == 0 ||
			      strcmp(state, "40001") == 0 ||
			      strcmp(state, "55P03") == 0))
		return RETRY;
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
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (s->slots[i].answered)
			continue;
		r = next_result(c);
		rc = command(s, r);
		if (rc != 0)
			PQclear(r);
		else if ((rc = judge(&s->slots[i], r)) != 0)
			snprintf(s->why, sizeof(s->why), "a statement "
				 "answered rows of an unexpected shape");
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

/* RESERVE: inserted, its own row, taken, or look again. Keeps r when
 * taken. */
static void judge_reserve(struct slot *sl, PGresult *r)
{
	int64_t inserted, found;

	if (get_int(r, 0, 0, 1, 0, 1, &inserted) ||
	    get_int(r, 0, 1, 1, 0, 1, &found)) {
		sl->rc = -EBADMSG;
	} else if (inserted) {
		sl->rc = 0;
	} else if (!found) {
		sl->again = true;
	} else if ((sl->rc = decode_row(r, 0, 2, &sl->standing)) != 0) {
		/* damage stands for the identity: nothing recorded */
	} else if (memcmp(sl->standing.exec, sl->req->rec->exec, 16) == 0) {
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
		    PQnfields(r) < (settle ? 4 : 2)) {
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
