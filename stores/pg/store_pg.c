/*
 * store_pg.c - the PostgreSQL store: a shared store (carmy_store.h, "Shared
 * stores") through which several carmyds, on one host or many, record into
 * one database and reserve every identity once between them.
 *
 *   carmyd --store plugin:PKGLIBDIR/carmy_store_pg.so:[instance=NAME ]
 *         [timeout=SECONDS ][connections=N ]CONNINFO
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
 * prepared, and the instance's name held, once per connection. N (1 to
 * 16, default 1) is how many connections the store writes through
 * ("Several connections" below); SECONDS, how long a server may stay
 * silent (wait.c).
 *
 * NAME is this carmyd among those sharing the database, 1 to 64 bytes of
 * [A-Za-z0-9._-], the host name by default. load() selects on it, and only
 * the instance that made an execution completes, releases or resolves it,
 * so two carmyds sharing one database must not share a name (two on one
 * host: give both one): each would take the other's running executions
 * for interrupted ones. The store enforces it: worker 0's connection
 * holds a session advisory lock keyed on the name (a 64-bit hash of it),
 * taken at open, where another carmyd of the name makes open fail, and
 * taken again after every reconnect before any request runs on it; while
 * another session holds it, its requests fail (-EBUSY). The other
 * connections do not hold the name: the fence below keeps them in step.
 * A holder busy with a statement may be the backend of a carmyd that died
 * (kill -9 mid-batch) and has not noticed yet, and one idle at open the
 * backend of a carmyd that just stopped, still exiting: open waits up to
 * 10 s for the name to be let go (a live carmyd holding it costs a second
 * one 10 s, then a refusal); the first try after a reconnect waits 2 s
 * for a busy holder and refuses an idle one, a live carmyd, at once. A
 * carmyd that comes back after a reboot must keep its name to find its
 * executions again.
 *
 * Fencing. With several connections, one of them may be lost (a
 * failover, pg_terminate_backend) and a second carmyd of the name take
 * the name meanwhile, while this one's other connections are still up.
 * So each open takes a new generation of the name: after taking the
 * name, before load(), in one transaction it takes the name's fence key
 * (a second advisory key, pg_fence_key()) exclusive and adds one to the
 * name's row of carmy_instances (name, gen), keeping the new value; and
 * every batch, on every connection, starts with carmy_fence(key, name,
 * gen), which takes the key shared until the batch's commit and raises
 * FENCE_STATE unless the row still holds this open's generation (read
 * after the lock: a new snapshot in READ COMMITTED). The exclusive lock
 * waits for every batch in flight of an earlier generation to end, and
 * every batch after it finds the new generation: no batch of a
 * superseded carmyd commits after its successor's load(). A batch that
 * fails its fence rolls back; the store then fails every request of
 * every connection (-EBUSY) for good, says so once, and lets go of the
 * name. Advisory locks taken in a transaction write no WAL, unlike a row
 * lock (SELECT ... FOR SHARE) would, at every batch. With one connection
 * (connections=1) batches run no fence (0.02 ms of the backend's a
 * batch, measured with pgbench: 7% of a one-request batch's time):
 * the connection holds the name whenever it runs a batch, so no batch of it
 * commits while a successor runs. It can still commit after a successor
 * that has stopped since, as every carmyd could with one connection.
 *
 * The schema, created at open if absent (under an advisory lock, in one
 * transaction, so that instances starting together do not race on it),
 * with carmy_instances and carmy_fence() above:
 *
 *   carmy_executions (principal, session, request_id: bytea, the primary
 *     key; exec bytea UNIQUE; instance text; fingerprint, rawprint bytea;
 *     pid, started_ns bigint; state smallint, 1 running, 2 completed;
 *     finished_ns bigint, status, result_code integer, result bytea: set
 *     once completed; resolved_ns, resolved_uid, resolved_pid bigint: set
 *     by an operator's RESOLVE; tool bytea, tool_len integer, args bytea,
 *     args_len bigint, result_format smallint: what the call was, set by
 *     its RESERVE), indexed on instance. A table made before the last
 *     five columns gets them at open (ALTER TABLE ... ADD COLUMN IF NOT
 *     EXISTS), its rows NULL there: no call kept.
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
 *             transaction, which sees it. A RESERVE sent as a statement of
 *             its own goes first as the bare insert (RESERVE_PLAIN_SQL
 *             in conn.c), whose command tag says whether it took; one that
 *             took nothing runs as the full statement in the next
 *             transaction, which tells the cases above apart.
 *   COMPLETE  UPDATE ... SET state 2 and the result WHERE exec AND instance
 *             AND state 1. No row updated: fine if this instance's row
 *             already holds exactly this result (a batch run again),
 *             -ESTALE otherwise: a result is never overwritten, a released
 *             execution never resurrected, another instance's never
 *             touched. Sent as a statement of its own, it goes first as
 *             the bare update (SETTLE_PLAIN_SQL), and as the full
 *             statement in the next transaction if that took nothing.
 *   RESOLVE   committed: as COMPLETE, with the resolved_* fields; not
 *             committed: as RELEASE.
 *   RELEASE   DELETE WHERE exec AND instance AND state 1; 0 whether or not
 *             a row went.
 *   PURGE     DELETE WHERE exec AND state 2, of any instance: an instance
 *             purges the copy it replayed of another's result, and with it
 *             the record (carmy_store.h).
 *
 * Group commit. One thread (a worker) owns each connection. submit()
 * queues on one worker and returns; the worker takes everything queued
 * on it as one batch and sends it in
 * one pipeline (libpq pipeline mode): the statements and a sync, which the
 * server runs as one transaction (the protocol's implicit one, READ
 * COMMITTED and writable by the session's defaults) and commits at the
 * sync, one round trip and one WAL flush for the lot (one more round trip
 * if a bare statement took nothing), then it answers every request. The
 * batch is cut into runs at the requests that may free an identity
 * (RELEASE, RESOLVE, PURGE), each of which goes after the run
 * before it; a run's RESERVEs go first, in the order of their identities,
 * then its COMPLETEs. Two instances reserving the same identities in one
 * batch each then insert them in one order and do not deadlock on them (a
 * deadlock that involves other statements, a COMPLETE's update say,
 * PostgreSQL still breaks after deadlock_timeout, and the batch runs
 * again). A run's RESERVEs go as one set-based statement, and so do its
 * COMPLETEs (RESERVES and SETTLES in conn.c: each column an array, an
 * element a request, unnest'ed WITH ORDINALITY; one row a request back,
 * judged as the request's own statement's would be): one statement to
 * plan and run, not one a request, in the one backend that serves the
 * connection. A group of fewer than SET_MIN (4), and every other
 * request, goes as its own statement (the forms above). Like a lone
 * request, a group goes first in its bare form (RESERVES_PLAIN_SQL,
 * SETTLES_PLAIN_SQL: the insert or update alone, the ordinals that took
 * back); those that took nothing look again in the next transaction, in
 * the full forms. While a batch waits for its flush the next one queues
 * up, so throughput grows with concurrency. The connection is
 * non-blocking: libpq keeps what the socket will not take, and wait.c
 * sends it, reading the server's answers meanwhile (so a pipeline longer
 * than both socket buffers cannot deadlock), for no longer than the
 * server stays silent up to the store's timeout (a stopped server would
 * hold a blocking send for ever).
 *
 * A request is answered only after its transaction has committed, with
 * synchronous_commit set on for the session (a database default of off
 * must not weaken it), or has failed. taken() too comes after the commit,
 * just before done(): the standing row it reports was read in a
 * transaction that could still have failed, and carmyd must not act on a
 * reservation whose outcome the store has not settled.
 *
 * Several connections. One connection runs one batch at a time, a
 * round trip, its statements and a WAL flush (about 1 ms); N workers,
 * each as above with its own connection, queue, withdrawals, held
 * COMPLETEs and backoff, run N batches at once, whose commits the server
 * overlaps. That pays where the server's flushes are what a connection
 * waits for; where its CPUs are (bench-shared on two CPUs shared with the
 * server and the clients), the smaller batches of several connections
 * cost more than one connection's: so one by default (docs/performance.md
 * has the figures). submit() routes a RESERVE to the worker of its identity's
 * hash, and every other request (which carries only the exec id) to the
 * worker of its exec id's hash. That keeps each order a worker relies on
 * within one worker: a RESERVE answered failed that may have committed is
 * withdrawn at the head of its worker's next transaction, which is the
 * worker any later RESERVE of that identity goes to, so the withdrawal
 * still comes first; two RESERVEs of one identity meet in one worker's
 * set, in order; a held COMPLETE runs at the head of its worker's next
 * batch, the worker any later RELEASE, RESOLVE or PURGE of that exec id
 * goes to. What no longer shares a worker is a request that frees an
 * identity (RELEASE, RESOLVE not committed, PURGE: by exec id) and a
 * later RESERVE of that identity (by identity), which plan() keeps in
 * order within a batch; carmyd never has both in flight: the entry stays
 * pending until a RELEASE or RESOLVE is answered, a PURGE's caller waits
 * for its answer (carmy_store.h, "Shared stores"), and an answer comes
 * after the commit, which the RESERVE's transaction then sees. A COMPLETE
 * follows its RESERVE's answer likewise. Two workers of one instance hold
 * disjoint identities, so they never wait on each other's inserts; the
 * rows their other statements touch are by exec id, disjoint too.
 *
 * A lost connection's backend may outlive it: a transaction of it
 * stalled in its commit (waiting for a synchronous standby, or for its
 * flush) can still commit after the worker has reconnected, and a
 * withdrawal run on the new connection meanwhile would find no row, be
 * forgotten, and leave the row that lands after it running for good. So
 * each connection holds a session advisory lock, which its backend lets
 * go only as it exits, and a worker runs nothing on a new connection
 * before it holds that lock again: worker 0's is the name (above), each
 * other's a key of its own (conn.c: pg_take_conn_lock(), from the name,
 * this open's generation and the worker's index: no other open of the
 * name meets it). The first try waits NAME_WAIT_MS for the old backend;
 * then the worker's requests fail (-EBUSY) until it has gone, each batch
 * trying again.
 *
 * Waits are bounded. A RESERVE waits for any uncommitted insert or delete
 * of its identity, and the worker with it: an operator's open
 * transaction, or another instance frozen mid-batch, would stall every
 * request of this one. So each session sets lock_timeout 2s,
 * statement_timeout 30s and idle_in_transaction_session_timeout 60s (the
 * last for the other instances' sake, should this one freeze in a
 * transaction), and the server's side of the TCP keepalives and
 * tcp_user_timeout like the client's, so that the server drops a
 * connection of ours that died silently, and the locks it held, within
 * about a minute; each only where the session has no value of its own
 * (CONNINFO's options, the role's, the database's). Every wait the
 * store asks of the server (these two, and its own waits for a lock) is
 * kept a quarter short of timeout= (pg_server_wait_ms()): a short
 * timeout= shortens them, so that the server says it waited in vain
 * before its silence reads as a server gone. A statement that
 * times out (lock_not_available, query_canceled) fails its request alone
 * (-EAGAIN): the batch is rolled back and runs again without it, since
 * waiting once more would hold up every other request as long again. A
 * set-based statement that times out cannot say whose row it waited on:
 * the batch runs again a statement a request, once more waiting up to the
 * timeout, and the request whose statement times out then fails alone.
 *
 * Why a batch may run twice. A deadlock or serialization failure rolls
 * the batch back: it runs again, as does a timeout at the commit (up
 * to TRIES_MAX runs in all). A connection lost with the sync sent leaves
 * its outcome unknown: the store reconnects and runs the batch again. An
 * answer out of step with what was sent (rows of a shape no statement
 * here sends, an error libpq made of an answer), read up to the sync,
 * leaves it unknown too: the batch runs again on the same connection,
 * each request as its full statement (ASKEW_MAX runs at most).
 * Every statement above is written to be right either way: RESERVE
 * recognises its own exec, COMPLETE and RESOLVE their own result, RELEASE
 * and PURGE delete what is there; the set-based forms judge each element
 * as its own statement would; a bare form run twice takes nothing, and
 * leaves the answer to the full form in the next transaction. Within one
 * set, two RESERVEs of an identity insert the first and send the second
 * to look again in the next transaction (where it is told of the first);
 * two settles of an exec id update with the first, and the second finds
 * that result standing.
 *
 * A server that cannot be reached fails the batch (-ECONNREFUSED): the
 * store keeps answering failures until it can record, and never pretends.
 * A reconnect blocks the worker up to connect_timeout, and each statement
 * that sets the new session up (its settings, its prepared statements)
 * up to the store's timeout of silence, as every statement (wait.c), so
 * after one fails the batches that follow are failed at once, without
 * trying, for a backoff interval (200 ms, doubling to 2 s) before the
 * next attempt.
 *
 * An outcome unknown, then no connection (or answers out of step every
 * time): a RESERVE answered with a failure may still have committed, and
 * its row would hold the identity everywhere for an execution that never
 * ran (its client gave the entry back). The store remembers such RESERVEs
 * (up to WITHDRAW_MAX; beyond, it says so on stderr) and deletes their
 * rows (this identity, this exec, this instance, still running) at the
 * head of the next transaction it runs, before any other request,
 * forgetting them once that commits; with no request to carry them, they
 * run alone after each backoff (a row left would hold its identity on
 * every instance for as long as this one has nothing to write); at close
 * it makes one last attempt.
 *
 * A COMPLETE of unknown outcome, then no connection (or answers out of
 * step), may have committed too: answered failed, its instance would take
 * the call for interrupted while the others replay its result. So it is
 * held, unanswered, and runs again at the head of each batch (after each
 * backoff when nothing else is queued) until the database answers;
 * carmyd's request is held up to the store's timeout, then answered failed
 * while the store's own copy is sent until the database takes it
 * (worker.c: hold()): a batch failed by another request's statement
 * holds it again; only its own statement, refused or answered out of
 * step by a working database, ends it, said on stderr. The copy goes as
 * a statement of its own, never in a set, so that a failure names it or
 * not.
 *
 * Every value read back is untrusted: a row that is not what this store
 * writes (lengths, states, ranges) fails load() with -EBADMSG, and a
 * RESERVE that finds one standing fails -EBADMSG; but a RESERVE run again
 * that finds its own row (its exec id and this instance, read before the
 * rest) is recorded, whatever else the row reads: its reservation stands.
 * An answer with more or fewer columns than its statement sends is an
 * answer out of step, not a row to read.
 *
 * This file is the plugin's entry: carmy_store_plugin, open, load, submit
 * (and its routing) and close. The workers and what they call live in the
 * files below it, listed in pg.h: worker.c (batches: their order, runs
 * and answers, the withdrawals, the backoff), send.c and read.c (one
 * run's pipeline), conn.c (the connection, its session, the schema, the
 * statements, the instance's name and generation), rows.c (what the
 * statements found) and util.c.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "carmy_store.h"
#include "stores/pg/pg.h"

#define RESULT_MAX 0x3fff0000u	/* under bytea's (and a message's) 1 GB */

#define LOAD_SQL \
	"SELECT " ROW_COLS " FROM carmy_executions WHERE instance = $1"

static int pg_open(const char *args, void **store, char *err, size_t errlen);
static int pg_load(void *store, carmy_store_each_fn each, void *arg);
static void pg_submit(void *store, struct carmy_store_req *req);
static void pg_close(void *store);
static int check_req(const struct carmy_store_req *req);

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

/* A worker's arrays, lock and queue; no connection yet. Its timed
 * waits (worker.c: wait_for_work()) are on CLOCK_MONOTONIC, which no
 * step of the wall clock moves. */
static int worker_init(struct pg_store *s, unsigned i)
{
	struct pg_worker *w = &s->w[i];
	pthread_condattr_t attr;

	w->store = s;
	w->instance = s->instance;
	w->index = i;
	w->tail = &w->head;
	pthread_mutex_init(&w->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&w->wake, &attr);
	pthread_condattr_destroy(&attr);
	w->slots = calloc(BATCH_MAX, sizeof(*w->slots));
	w->order = calloc(BATCH_MAX, sizeof(*w->order));
	w->wd = calloc(WITHDRAW_MAX, sizeof(*w->wd));
	w->live = calloc(BATCH_MAX, sizeof(*w->live));
	w->steps = calloc(BATCH_MAX, sizeof(*w->steps));
	w->held = calloc(BATCH_MAX, sizeof(*w->held));
	if (w->slots == NULL || w->order == NULL || w->wd == NULL ||
	    w->live == NULL || w->steps == NULL || w->held == NULL)
		return -ENOMEM;
	return 0;
}

/* Worker 0's connection: the name, the schema, a new generation (before
 * load(), which runs on it); then each other worker's, with its lock
 * (its key is this generation's: nobody holds it yet). */
static int connect_all(struct pg_store *s, const char *conninfo, char *err,
		       size_t errlen)
{
	struct pg_worker *w0 = &s->w[0];
	int rc = pg_connect_db(w0, conninfo, err, errlen);

	if (rc == 0)
		rc = pg_setup_session(w0->conn, err, errlen);
	if (rc == 0)
		rc = pg_take_name(w0, NAME_WAIT_OPEN_MS, true, err, errlen);
	if (rc == 0)
		rc = pg_create_schema(w0->conn, err, errlen);
	if (rc == 0)
		rc = pg_new_generation(w0, err, errlen);
	if (rc == 0)
		rc = pg_prepare_all(w0->conn, err, errlen);
	for (unsigned i = 1; i < s->nworkers && rc == 0; i++) {
		rc = pg_connect_db(&s->w[i], conninfo, err, errlen);
		if (rc == 0)
			rc = pg_setup_session(s->w[i].conn, err, errlen);
		if (rc == 0)
			rc = pg_prepare_all(s->w[i].conn, err, errlen);
		if (rc == 0)
			rc = pg_take_conn_lock(&s->w[i], 0, err, errlen);
	}
	return rc;
}

static int pg_open(const char *args, void **store, char *err, size_t errlen)
{
	struct pg_store *s;
	const char *conninfo;
	unsigned n = CONNECTIONS_DEFAULT;
	int rc;

	*store = NULL;
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	rc = pg_parse_args(args ? args : "", s->instance, &n, &conninfo, err,
			   errlen);
	if (rc != 0) {
		free(s);
		return rc;
	}
	s->fence_key = pg_fence_key(s->instance);
	s->w = calloc(n, sizeof(*s->w));
	if (s->w == NULL) {
		free(s);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->nworkers = n;
	for (unsigned i = 0; i < n; i++)
		if (worker_init(s, i) != 0 && rc == 0) {
			snprintf(err, errlen, "out of memory");
			rc = -ENOMEM;
		}
	if (rc == 0)
		rc = connect_all(s, conninfo, err, errlen);
	for (unsigned i = 0; i < n && rc == 0; i++) {
		struct pg_worker *w = &s->w[i];
		int e;

		w->session = w->named = true;
		e = pthread_create(&w->thread, NULL, pg_work, w);
		if (e != 0) {
			snprintf(err, errlen, "cannot start the PostgreSQL "
				 "store's thread: %s", strerror(e));
			rc = -e;
		}
		w->started = e == 0;
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
	PQclear(pg_exec(c, rc == 0 ? "COMMIT" : "ROLLBACK"));
	if (PQtransactionStatus(c) != PQTRANS_IDLE)
		PQclear(pg_exec(c, "ROLLBACK"));
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
	PGconn *c = s->w[0].conn;
	const char *params[1] = { s->instance };
	PGresult *r;
	int rc = 0;
	char msg[256];

	/* pg_settings: the idle timeout is 9.6's */
	r = pg_exec(c, "BEGIN; SELECT set_config(name, '0', true) FROM "
		   "pg_settings WHERE name IN ('statement_timeout', "
		   "'idle_in_transaction_session_timeout')");
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		pg_say("cannot load the executions of instance %s: %s",
		       s->instance, pg_pq_error(PQerrorMessage(c), msg,
						sizeof(msg)));
		PQclear(r);
		return load_end(c, -EIO);
	}
	PQclear(r);
	if (!PQsendQueryParams(c, LOAD_SQL, 1, NULL, params, NULL, NULL, 1)) {
		pg_say("cannot load the executions of instance %s: %s",
		       s->instance, pg_pq_error(PQerrorMessage(c), msg,
						sizeof(msg)));
		return load_end(c, -EIO);
	}
	if (!PQsetSingleRowMode(c)) {
		pg_say("cannot load the executions of instance %s row by row",
		       s->instance);
		while ((r = pg_get_result(c)) != NULL)
			PQclear(r);
		return load_end(c, -EIO);
	}
	while ((r = pg_get_result(c)) != NULL) {
		ExecStatusType st = PQresultStatus(r);

		if (st == PGRES_SINGLE_TUPLE && rc == 0) {
			struct carmy_store_record rec;

			rc = pg_decode_row(r, 0, 0, &rec);
			if (rc == -EBADMSG)
				pg_say("instance %s: a row of carmy_executions "
				       "is damaged: refusing to load",
				       s->instance);
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
			pg_say("cannot load the executions of instance %s: %s",
			       s->instance,
			       pg_pq_error(PQresultErrorMessage(r), msg,
					   sizeof(msg)));
			rc = -EIO;
		}
		PQclear(r);
	}
	return load_end(c, rc);
}

/* FNV-1a, 64 bits, of n bytes, from h. */
static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211u;
	}
	return h;
}

/* The worker that writes req: a RESERVE by its identity's hash, every
 * other request (which carries only the exec id) by its exec id's (the
 * top of this file, "Several connections"). */
static struct pg_worker *route(struct pg_store *s,
			       const struct carmy_store_req *req)
{
	const struct carmy_store_record *r = req->rec;
	uint64_t h = 14695981039346656037u;

	if (s->nworkers == 1)
		return &s->w[0];
	if (req->op == CARMY_STORE_RESERVE) {
		for (int k = 0; k < 3; k++) {
			uint8_t len[2] = { (uint8_t)(r->len[k] >> 8),
					   (uint8_t)r->len[k] };

			h = fnv(h, len, 2);
			h = fnv(h, r->part[k], r->len[k]);
		}
	} else {
		h = fnv(h, r->exec, 16);
	}
	return &s->w[h % s->nworkers];
}

static void pg_submit(void *store, struct carmy_store_req *req)
{
	struct pg_worker *w;
	int rc = check_req(req);

	if (rc != 0) {
		req->done(req, rc);
		return;
	}
	w = route(store, req);
	req->next = NULL;
	pthread_mutex_lock(&w->lock);
	*w->tail = req;
	w->tail = &req->next;
	pthread_mutex_unlock(&w->lock);
	/* After the unlock: woken under it, the worker would wait for the
	 * lock at once (a second sleep and wake-up a request). */
	pthread_cond_signal(&w->wake);
}

/* Nothing is in flight (carmyd waits), but a queue left over would still
 * be written and answered by its worker before it stops. Every worker is
 * told at once, so that their last batches run together; worker 0's
 * connection, and with its session the name, goes last. */
static void pg_close(void *store)
{
	struct pg_store *s = store;

	if (s == NULL)
		return;
	for (unsigned i = 0; i < s->nworkers; i++) {
		struct pg_worker *w = &s->w[i];

		if (!w->started)
			continue;
		pthread_mutex_lock(&w->lock);
		w->stopping = true;
		pthread_cond_signal(&w->wake);
		pthread_mutex_unlock(&w->lock);
	}
	for (unsigned i = s->nworkers; i-- > 0;) {
		struct pg_worker *w = &s->w[i];

		if (w->started)
			pthread_join(w->thread, NULL);
		PQfinish(w->conn);
		if (w->wd != NULL)
			for (size_t k = 0; k < w->nwd; k++)
				free(w->wd[k].id);
		free(w->wd);
		pg_free_arrays(w);
		free(w->held);
		free(w->steps);
		free(w->live);
		free(w->order);
		free(w->slots);
		pthread_cond_destroy(&w->wake);
		pthread_mutex_destroy(&w->lock);
	}
	free(s->w);
	free(s);
}

/* ------------------------------------------------------------ helpers */

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
		if ((r->tool_kept > 0 && r->tool == NULL) ||
		    r->tool_kept > CARMY_STORE_TOOL_MAX ||
		    r->tool_kept > r->tool_len || r->tool_len > UINT16_MAX ||
		    (r->args_kept > 0 && r->args == NULL) ||
		    r->args_kept > CARMY_STORE_ARGS_MAX ||
		    r->args_kept > r->args_len)
			return -EINVAL;
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
