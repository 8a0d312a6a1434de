/*
 * bench_pg.c - the peer workload against PostgreSQL, through libpq over a
 * Unix socket. See bench_peer.h.
 *
 * One row per identity, keyed on its three parts:
 *
 *   reserve   INSERT ... VALUES (identity, fingerprint, execution id,
 *             'running') ON CONFLICT DO NOTHING; it won if one row was
 *             inserted
 *   complete  UPDATE ... SET state 'completed', status, result WHERE the
 *             identity, our execution id and state 'running'; one row
 *   replay    SELECT fingerprint, execution_id, state, status, result
 *   rt        SELECT 1
 *
 * Every statement is prepared once per connection (PQprepare) and run with
 * PQexecPrepared, parameters and results in binary: one round trip each,
 * no parsing or planning per call. Each runs in its own transaction with
 * the server's settings as they are; carmy-bench prints them (fsync,
 * synchronous_commit) with the figures.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "bench/bench_peer.h"

#define TABLE "carmy_bench_idem"

struct pg_stmt {
	const char *name;
	const char *sql;
	int nparams;
};

enum {
	ST_RT,
	ST_RESERVE,
	ST_COMPLETE,
	ST_REPLAY,
	ST_COUNT,
};

static const struct pg_stmt stmts[ST_COUNT] = {
	{ "rt", "SELECT 1", 0 },
	{ "reserve",
	  "INSERT INTO " TABLE " (principal, session, request_id, "
	  "fingerprint, execution_id, state) "
	  "VALUES ($1, $2, $3, $4, $5, 'running') ON CONFLICT DO NOTHING", 5 },
	{ "complete",
	  "UPDATE " TABLE " SET state = 'completed', status = $5, result = $6 "
	  "WHERE principal = $1 AND session = $2 AND request_id = $3 "
	  "AND execution_id = $4 AND state = 'running'", 6 },
	{ "replay",
	  "SELECT fingerprint, execution_id, state, status, result FROM " TABLE
	  " WHERE principal = $1 AND session = $2 AND request_id = $3", 3 },
};

static void p_connect(struct peer_worker *s);
static void p_setup(struct peer_worker *s, struct peer_cfg *cfg);
static void p_rt(struct peer_worker *s);
static void p_reserve(struct peer_worker *s);
static void p_complete(struct peer_worker *s);
static void p_replay(struct peer_worker *s);
static void p_close(struct peer_worker *s);
static PGresult *exec_stmt(struct peer_worker *s, int st, const char **vals,
			   const int *lens, ExecStatusType want);
static void one_row_changed(struct peer_worker *s, PGresult *r,
			    const char *what);
static bool run_sql(struct peer_worker *s, const char *sql);
static void no_notices(void *arg, const char *message);

const struct peer_backend peer_pg = {
	.name = "pg",
	.connect = p_connect,
	.setup = p_setup,
	.rt = p_rt,
	.reserve = p_reserve,
	.complete = p_complete,
	.replay = p_replay,
	.close = p_close,
};

/* ------------------------------------------------------------ backend */

/* The table is created here, not in setup, because the statements are
 * prepared against it; the first connection (peer_prepare's, alone) creates
 * it, the workers' find it. */
static void p_connect(struct peer_worker *s)
{
	PGconn *c = PQconnectdb(s->cfg->where);

	s->ok = false;
	if (c == NULL || PQstatus(c) != CONNECTION_OK) {
		peer_fail(s, "cannot connect to '%s': %s", s->cfg->where,
			  c != NULL ? PQerrorMessage(c) : "out of memory");
		PQfinish(c);
		return;
	}
	s->conn = c;
	PQsetNoticeProcessor(c, no_notices, NULL);
	if (!run_sql(s, "CREATE TABLE IF NOT EXISTS " TABLE " ("
			"principal text NOT NULL, session text NOT NULL, "
			"request_id text NOT NULL, fingerprint bytea NOT NULL, "
			"execution_id text NOT NULL, state text NOT NULL, "
			"status integer, result bytea, "
			"PRIMARY KEY (principal, session, request_id))"))
		return;
	for (int k = 0; k < ST_COUNT; k++) {
		PGresult *r = PQprepare(c, stmts[k].name, stmts[k].sql,
					stmts[k].nparams, NULL);

		if (PQresultStatus(r) != PGRES_COMMAND_OK) {
			peer_fail(s, "PQprepare %s: %s", stmts[k].name,
				  PQerrorMessage(c));
			PQclear(r);
			return;
		}
		PQclear(r);
	}
	s->ok = true;
}

/* Say how the server keeps its data: the settings that decide what a
 * commit costs. */
static void p_setup(struct peer_worker *s, struct peer_cfg *cfg)
{
	PGconn *c = s->conn;
	PGresult *r = PQexec(c, "SELECT current_setting('server_version'), "
			     "current_setting('fsync'), "
			     "current_setting('synchronous_commit'), "
			     "current_setting('wal_sync_method'), "
			     "current_setting('full_page_writes')");

	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
		peer_fail(s, "reading the settings: %s", PQerrorMessage(c));
		PQclear(r);
		return;
	}
	snprintf(cfg->settings, sizeof(cfg->settings),
		 "postgresql %s; fsync %s; synchronous_commit %s; "
		 "wal_sync_method %s; full_page_writes %s; one transaction "
		 "per statement", PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1),
		 PQgetvalue(r, 0, 2), PQgetvalue(r, 0, 3), PQgetvalue(r, 0, 4));
	PQclear(r);
	s->ok = true;
}

static void p_rt(struct peer_worker *s)
{
	PQclear(exec_stmt(s, ST_RT, NULL, NULL, PGRES_TUPLES_OK));
}

static void p_reserve(struct peer_worker *s)
{
	const char *vals[] = {
		PEER_PRINCIPAL, PEER_SESSION, s->rid, (const char *)s->fp,
		s->exec,
	};
	const int lens[] = {
		sizeof(PEER_PRINCIPAL) - 1, sizeof(PEER_SESSION) - 1,
		(int)s->rid_len, sizeof(s->fp), CARMY_EXECUTION_ID_LEN,
	};

	one_row_changed(s, exec_stmt(s, ST_RESERVE, vals, lens,
				     PGRES_COMMAND_OK),
			"INSERT: the identity is taken");
}

static void p_complete(struct peer_worker *s)
{
	uint32_t status = htonl(CARMY_STATUS_COMPLETED);
	const char *vals[] = {
		PEER_PRINCIPAL, PEER_SESSION, s->rid, s->exec,
		(const char *)&status, (const char *)s->cfg->result,
	};
	const int lens[] = {
		sizeof(PEER_PRINCIPAL) - 1, sizeof(PEER_SESSION) - 1,
		(int)s->rid_len, CARMY_EXECUTION_ID_LEN, sizeof(status),
		(int)s->cfg->result_len,
	};

	one_row_changed(s, exec_stmt(s, ST_COMPLETE, vals, lens,
				     PGRES_COMMAND_OK),
			"UPDATE: not running, or not ours");
}

static void p_replay(struct peer_worker *s)
{
	const char *vals[] = { PEER_PRINCIPAL, PEER_SESSION, s->rid };
	const int lens[] = {
		sizeof(PEER_PRINCIPAL) - 1, sizeof(PEER_SESSION) - 1,
		(int)s->rid_len,
	};
	PGresult *r = exec_stmt(s, ST_REPLAY, vals, lens, PGRES_TUPLES_OK);
	uint32_t status;
	int len;

	if (r == NULL)
		return;
	if (PQntuples(r) != 1 || PQgetlength(r, 0, 0) != sizeof(s->got_fp) ||
	    PQgetlength(r, 0, 1) != CARMY_EXECUTION_ID_LEN) {
		peer_fail(s, "SELECT: %d rows, not one recorded call",
			  PQntuples(r));
		PQclear(r);
		return;
	}
	memcpy(s->got_fp, PQgetvalue(r, 0, 0), sizeof(s->got_fp));
	memcpy(s->got_exec, PQgetvalue(r, 0, 1), CARMY_EXECUTION_ID_LEN);
	s->got_exec[CARMY_EXECUTION_ID_LEN] = '\0';
	s->got_completed = PQgetlength(r, 0, 2) == 9 &&
			   memcmp(PQgetvalue(r, 0, 2), "completed", 9) == 0;
	s->got_status = 0;
	s->got_result_len = 0;
	if (s->got_completed && !PQgetisnull(r, 0, 3) &&
	    PQgetlength(r, 0, 3) == sizeof(status)) {
		memcpy(&status, PQgetvalue(r, 0, 3), sizeof(status));
		s->got_status = (int)ntohl(status);
	}
	len = PQgetlength(r, 0, 4);
	if (s->got_completed && len > 0 && len <= PEER_RESULT_MAX) {
		memcpy(s->got_result, PQgetvalue(r, 0, 4), (size_t)len);
		s->got_result_len = (size_t)len;
	}
	PQclear(r);
}

static void p_close(struct peer_worker *s)
{
	PQfinish(s->conn);
	s->conn = NULL;
}

/* ------------------------------------------------------------ helpers */

/* One prepared statement, every parameter and result column binary.
 * Returns the result, or NULL with s->err set; s->ok is true on success. */
static PGresult *exec_stmt(struct peer_worker *s, int st, const char **vals,
			   const int *lens, ExecStatusType want)
{
	static const int binary[6] = { 1, 1, 1, 1, 1, 1 };
	PGconn *c = s->conn;
	PGresult *r = PQexecPrepared(c, stmts[st].name, stmts[st].nparams,
				     vals, lens, binary, 1);

	if (PQresultStatus(r) != want) {
		peer_fail(s, "%s: %s", stmts[st].name, PQerrorMessage(c));
		PQclear(r);
		return NULL;
	}
	s->ok = true;
	return r;
}

static void one_row_changed(struct peer_worker *s, PGresult *r,
			    const char *what)
{
	if (r == NULL)
		return;
	if (strcmp(PQcmdTuples(r), "1") != 0)
		peer_fail(s, "%s", what);
	PQclear(r);
}

static bool run_sql(struct peer_worker *s, const char *sql)
{
	PGresult *r = PQexec(s->conn, sql);
	bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;

	if (!ok)
		peer_fail(s, "%s", PQerrorMessage(s->conn));
	PQclear(r);
	return ok;
}

/* "relation already exists, skipping", once per worker: not news. */
static void no_notices(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}
