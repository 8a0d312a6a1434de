/*
 * pg.h - what the files of the PostgreSQL store share, and nothing else:
 * struct pg_store and its workers' struct pg_worker, a batch's slots,
 * the statements' table and the functions one file calls in another.
 * Private to the plugin: not installed, and nothing here is exported from
 * carmy_store_pg.so (the declarations are hidden), whose one symbol is
 * carmy_store_plugin.
 * What the store does, and why, is told at the top of store_pg.c.
 *
 * The files, from the top; each uses only files below it:
 *
 *   store_pg.c   carmy_store_plugin: open, load, submit, close
 *   worker.c     a worker: the thread that writes one connection's
 *                batches: order, runs, answers, withdrawals, backoff
 *   send.c       a batch's statements, sent in one pipeline: a
 *                set-based statement for each group of RESERVEs and of
 *                settles, one statement for each other request
 *   read.c       their answers, read back to the sync
 *   conn.c       a connection made ready: arguments, connect, session,
 *                schema, the prepared statements (pg_stmts), the
 *                instance's name and generation
 *   rows.c       what each statement found, and the rows load() reads
 *   util.c       lines on stderr, libpq's messages, hex
 */
#ifndef CARMY_STORES_PG_PG_H
#define CARMY_STORES_PG_PG_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "carmy_store.h"

#pragma GCC visibility push(hidden)

#define INSTANCE_MAX 64
#define BATCH_MAX 1024		/* requests in one transaction */
/* Bytes of parameters (ids, results...) one set-based statement carries:
 * a group past it is split; a request alone past it goes in a statement
 * of its own (a result can be close to 1 GB). */
#define SET_BYTES_MAX (16u << 20)
/* Requests a set-based statement takes at least: below, a statement each
 * costs less (the set's own work, about 0.3 ms, is that of three or four
 * requests' statements). Measured again with the bare forms: 2 slower,
 * 8 not clearly faster (docs/performance.md). */
#define SET_MIN 4
#define WITHDRAW_MAX 1024	/* RESERVEs remembered to withdraw */
#define HOLD_MAX 256		/* COMPLETEs held at once (worker.c) */
/* How long open waits for the instance's name, and the first try after a
 * reconnect (which holds up the worker) for the name or the connection's
 * lock: the backend of a carmyd that stopped or died lets it go as it
 * exits, once it has noticed, at the end of the statement it was running
 * (a kill -9 in the middle of a batch), and so does the backend of this
 * one's lost connection. */
#define NAME_WAIT_OPEN_MS 10000u
#define NAME_WAIT_MS 2000u
/* The session's lock_timeout and statement_timeout, where it has none. */
#define LOCK_TIMEOUT_MS 2000u
#define STATEMENT_TIMEOUT_MS 30000u
/* How long a server may stay silent while it owes an answer before it is
 * taken for gone (wait.c): past statement_timeout (30 s), the longest a
 * working server takes to answer one of the store's statements. */
#define ANSWER_MS_DEFAULT 40000u

/* Internal outcomes of one run of a batch, besides 0 and -errno. */
#define LOST (-ENOTCONN)	/* connection gone: reconnect, run again */
/* An answer out of step with what was sent, read up to the sync on a
 * connection still working: the server ran the statements and may have
 * committed them; run again, each request as one that may have. */
#define ASKEW (-EPROTO)
#define RETRY (-EAGAIN)		/* rolled back by a conflict: again */
#define WAITED (-ETIMEDOUT)	/* a statement timed out: see culprit */
#define FENCED (-EBUSY)		/* the fence failed: superseded */

/* connections=: workers, each with its own connection. */
#define CONNECTIONS_MAX 16
#define CONNECTIONS_DEFAULT 1
/* The fence's SQLSTATE (conn.c: carmy_fence()), a class of its own. */
#define FENCE_STATE "CY001"

/* The columns of a record, as load() and RESERVE read them back. */
#define ROW_COLS "principal, session, request_id, exec, fingerprint, " \
	"rawprint, pid, started_ns, state, finished_ns, status, result_code, " \
	"result, resolved_ns, resolved_uid, resolved_pid, tool, tool_len, " \
	"args, args_len, result_format"
enum {
	C_PRINCIPAL, C_SESSION, C_REQUEST_ID, C_EXEC, C_FINGERPRINT,
	C_RAWPRINT, C_PID, C_STARTED, C_STATE, C_FINISHED, C_STATUS,
	C_RESULT_CODE, C_RESULT, C_RESOLVED_NS, C_RESOLVED_UID,
	C_RESOLVED_PID, C_TOOL, C_TOOL_LEN, C_ARGS, C_ARGS_LEN, C_FORMAT,
	C_NCOLS
};

/* Type oids (catalog/pg_type.h, stable since forever). */
#define BYTEAOID 17
#define INT8OID 20
#define INT2OID 21
#define INT4OID 23
#define TEXTOID 25
#define BYTEAARRAYOID 1001
#define INT2ARRAYOID 1005
#define INT4ARRAYOID 1007
#define INT8ARRAYOID 1016

/* The prepared statements (conn.c), prepared on every connection. */
struct pg_stmt {
	const char *name, *sql;
	int nparams;
	Oid types[14];
};
enum {
	ST_RESERVE, ST_SETTLE, ST_RELEASE, ST_PURGE, ST_WITHDRAW,
	ST_RESERVES, ST_SETTLES,	/* set-based: arrays, one row each */
	ST_FENCE,			/* each batch's first */
	/* The bare forms, sent first: the insert or the update alone. */
	ST_RESERVE_PLAIN, ST_SETTLE_PLAIN, ST_RESERVES_PLAIN,
	ST_SETTLES_PLAIN,
	ST_COUNT
};
extern const struct pg_stmt pg_stmts[ST_COUNT];

/* A request of the batch being written, and what its run decided. The
 * decision is only tentative until the transaction has committed. */
struct slot {
	struct carmy_store_req *req;
	int rc;				/* its answer */
	bool again;			/* run its statement again */
	bool answered;
	bool unsure;			/* a run of it ended, outcome
					 * unknown: may have committed */
	bool full;			/* took nothing, or must look again:
					 * the full forms from then on (one
					 * full slot sends its whole group
					 * full), never the bare ones */
	bool kept;			/* RESERVE taken: standing holds the
					 * row, pointing into a result in
					 * pg_worker.held */
	bool alone;			/* the store's copy of a COMPLETE
					 * (worker.c: hold()): a statement of
					 * its own, never in a set, so that a
					 * failure names it or not */
	bool blamed;			/* a statement that carried it failed,
					 * or was answered out of step, in a
					 * run of this batch (read.c) */
	uint64_t until_ms;		/* a held COMPLETE: answered failed
					 * from then on (CLOCK_MONOTONIC) */
	int kind;			/* send.c's grouping kind, noted while
					 * req lives: an answered req may be
					 * gone (done() frees it) */
	struct carmy_store_record standing;
};

/* One statement of a run: a set-based one for count >= SET_MIN slots
 * (RESERVEs or settles), else the one slot's own. sl points into
 * pg_worker.live. */
struct step {
	struct slot **sl;
	uint32_t count;
	bool set;
	bool plain;			/* set: its bare form (no slot full) */
};

/* A parameter array, built in PostgreSQL's binary array format. */
struct pg_arr {
	uint8_t *p;
	size_t len, cap;
	uint32_t n;
};
#define RESERVE_COLS 13		/* arrays of ST_RESERVES */

/* A RESERVE answered failed that may have committed: its row to delete. */
struct withdrawal {
	uint8_t exec[16];
	uint16_t len[3];
	uint8_t *id;			/* the three parts, end to end */
};

/* A COMPLETE whose outcome is unknown (its commit's answer was lost) and
 * that could not run again yet: carmyd's request, held unanswered until
 * until_ms, or the store's own copy of it once that request was
 * answered failed (until_ms UINT64_MAX). */
struct held {
	struct carmy_store_req *req;
	uint64_t until_ms;
};

/* One worker: a thread and its connection, writing the batches of the
 * requests routed to it (store_pg.c: route()) as the store's one worker
 * would, with its own queue, withdrawals and held COMPLETEs. */
struct pg_worker {
	struct pg_store *store;
	const char *instance;	/* store->instance */
	unsigned index;		/* 0: holds the name, serves load() */
	PGconn *conn;		/* the worker's; open's, load's, close's */
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct carmy_store_req *head, **tail;	/* queued, under lock */
	bool stopping;				/* under lock */
	bool started;
	pthread_t thread;
	/* The worker's own: */
	bool session;		/* connected, session set up */
	bool named;		/* and holding its lock: the instance's
				 * name (worker 0), or the connection's
				 * own (the others: conn.c,
				 * pg_take_conn_lock()) */
	int down;		/* 0, or why requests fail (said on stderr) */
	uint64_t retry_ms;	/* no reconnect before (CLOCK_MONOTONIC) */
	unsigned backoff_ms;	/* the interval that led to it */
	struct slot *slots;	/* BATCH_MAX */
	struct slot **order;	/* the order their statements go in */
	struct slot *culprit;	/* WAITED: whose statement timed out */
	/* A set-based statement waited out a timeout: it cannot say whose
	 * row it waited on, so the batch's runs go one statement a request
	 * from then on, and the next WAITED names its culprit. */
	bool single;
	struct slot **live;	/* BATCH_MAX: this run's unanswered slots */
	struct step *steps;	/* BATCH_MAX: this run's statements */
	size_t nsteps;
	PGresult **held;	/* BATCH_MAX: results slots' standing point
				 * into, cleared once they are answered */
	size_t nheld;
	struct pg_arr arr[RESERVE_COLS];	/* send.c's */
	struct withdrawal *wd;	/* WITHDRAW_MAX */
	size_t nwd;
	/* A withdrawal waited out its lock timeout (another session holds
	 * its row): the rest of this batch runs without them, and the next
	 * batch tries them again. */
	bool wd_waited, wd_held;
	uint64_t wd_retry_ms;	/* their next run, with nothing queued */
	struct held hold[HOLD_MAX];	/* run again at the head of the
					 * next batch */
	size_t nhold;
	uint64_t hold_retry_ms;	/* their next run, with nothing queued */
	bool closing;		/* the last batch: nothing more is held */
	/* An answer not yet given (worker.c, deliver()): the next one says
	 * whether more follow, or the end of the run gives it. */
	struct carmy_store_req *due;
	int due_rc;
	char why[256];		/* the last failure, for stderr */
};

/* The store: the instance, its generation, and its workers. */
struct pg_store {
	char instance[INSTANCE_MAX + 1];
	/* The fence's key (conn.c: pg_fence_key()) and this open's
	 * generation of the instance (carmy_instances.gen), which every
	 * batch checks before it writes. */
	int64_t fence_key;
	int64_t gen;
	/* A successor took the instance's generation: every worker fails
	 * its requests from then on (__atomic, any worker sets it). */
	bool fenced;
	unsigned nworkers;	/* connections= */
	struct pg_worker *w;	/* nworkers */
};

/* worker.c: a worker's thread; arg is its struct pg_worker. */
void *pg_work(void *arg);

/* send.c, read.c: one run of a batch, in pipeline mode. pg_send_batch
 * returns 0, LOST or -ENOMEM (the sync sent: pg_read_to_sync(s, rc)
 * then). */
int pg_send_batch(struct pg_worker *s, size_t n);
void pg_free_arrays(struct pg_worker *s);
int pg_read_batch(struct pg_worker *s);
int pg_read_to_sync(struct pg_worker *s, int rc);

/* wait.c: PQgetResult(), PQexec() and PQprepare() with every wait, for
 * the answer and for the socket to take what libpq holds to send (the
 * connection is non-blocking), bounded by pg_answer_ms of silence
 * (timeout= in the ARGS; one for the process); pg_server_wait_ms(), a
 * wait the store asks of the server: ms or less, within that silence. */
extern unsigned pg_answer_ms;
unsigned pg_server_wait_ms(unsigned ms, bool lock);
void pg_await(PGconn *c);
PGresult *pg_get_result(PGconn *c);
PGresult *pg_exec(PGconn *c, const char *sql);
PGresult *pg_prepare(PGconn *c, const char *name, const char *sql,
		     int nparams, const Oid *types);

/* conn.c */
int pg_parse_args(const char *args, char *instance, unsigned *connections,
		  const char **conninfo, char *err, size_t errlen);
int pg_connect_db(struct pg_worker *s, const char *conninfo, char *err,
		  size_t errlen);
int pg_reconnect(struct pg_worker *s, char *err, size_t errlen);
int pg_create_schema(PGconn *c, char *err, size_t errlen);
int pg_setup_session(PGconn *c, char *err, size_t errlen);
int pg_prepare_all(PGconn *c, char *err, size_t errlen);
int pg_take_name(struct pg_worker *s, unsigned wait_ms, bool at_open,
		 char *err, size_t errlen);
int pg_take_conn_lock(struct pg_worker *s, unsigned wait_ms, char *err,
		      size_t errlen);
int64_t pg_fence_key(const char *instance);
int pg_new_generation(struct pg_worker *s, char *err, size_t errlen);

/* rows.c */
int pg_judge(struct pg_worker *s, struct slot *sl, PGresult *r);
int pg_judge_set(struct pg_worker *s, const struct step *st, PGresult *r);
void pg_drop_held(struct pg_worker *s);
int pg_decode_row(const PGresult *r, int row, int base,
		  struct carmy_store_record *rec);

/* util.c */
void pg_say(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
const char *pg_pq_error(const char *msg, char *buf, size_t len);

#pragma GCC visibility pop

#endif /* CARMY_STORES_PG_PG_H */
