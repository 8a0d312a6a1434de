/*
 * read.c - one run of a batch, its answers read back in the order sent, up
 * to and including the sync: each command's outcome, what a failure means
 * for the run (FENCED, RETRY, WAITED, ASKEW, LOST or -EIO), and each
 * statement's rows handed to pg_judge() or, for a set-based one,
 * pg_judge_set() (rows.c). An answer out of step with what was sent
 * (rows of another shape, a result of another kind, an error libpq made
 * of an answer) is ASKEW when the sync still comes: the server ran what
 * it received and may commit it there, so the run may have committed.
 * Answers that lose count of the commands (two results for one, one
 * before the sync, none where one is owed) are LOST: the connection is
 * reset.
 * The run committed if every statement succeeded and the sync came with
 * nothing before it (a commit that fails at the sync says so first).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <libpq-fe.h>

#include "stores/pg/pg.h"

/* The next result: taken from what libpq holds when it is there (a
 * pipeline's answers come together: waiting first would read the socket
 * for nothing, a system call a result), else waited for. */
static PGresult *get_result(PGconn *c)
{
	return PQisBusy(c) ? pg_get_result(c) : PQgetResult(c);
}

/* The result of the next command in the pipeline, having read the NULL
 * that ends it; the sync's; or NULL: the connection is gone (s->why
 * left to libpq) or the answers do not match the commands sent (said in
 * s->why). */
static PGresult *next_result(struct pg_worker *s)
{
	PGconn *c = s->conn;
	PGresult *r = get_result(c), *end;

	if (r != NULL && PQresultStatus(r) != PGRES_PIPELINE_SYNC &&
	    (end = get_result(c)) != NULL) {
		PQclear(end);
		PQclear(r);
		snprintf(s->why, sizeof(s->why), "a command answered with "
			 "more than one result");
		return NULL;
	}
	if (PQstatus(c) != CONNECTION_OK) {
		PQclear(r);
		return NULL;
	}
	if (r == NULL)
		snprintf(s->why, sizeof(s->why), "the answers ended before "
			 "the sync");
	return r;
}

/* Why a command failed: FENCED (the fence: superseded), RETRY or WAITED
 * for what a rerun resolves, ASKEW for an error libpq made itself (out of
 * memory for the answer, a malformed message: the server may have sent a
 * success, and the run may commit), else -EIO with the server's words in
 * s->why. */
static int failure(struct pg_worker *s, const PGresult *r)
{
	const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	const char *sev = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);

	pg_pq_error(PQresultErrorMessage(r), s->why, sizeof(s->why));
	/* Every error the server sends has a severity (field S). */
	if (PQresultErrorField(r, PG_DIAG_SEVERITY) == NULL)
		return ASKEW;
	if (state != NULL && strcmp(state, FENCE_STATE) == 0)
		return FENCED;
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

/* After a failure rc, read up to and including the sync, passing over
 * the answers before it: rc, or LOST if the connection went meanwhile
 * (its reason libpq's). */
static int to_sync(struct pg_worker *s, int rc)
{
	for (;;) {
		PGresult *r = next_result(s);
		ExecStatusType st = PQresultStatus(r);

		PQclear(r);
		if (r == NULL) {
			if (rc != LOST && PQstatus(s->conn) != CONNECTION_OK)
				s->why[0] = '\0';
			return LOST;
		}
		if (st == PGRES_PIPELINE_SYNC)
			return rc;
	}
}

/* One command's answer: rc 0 and the result, or why it failed. */
static int command(struct pg_worker *s, PGresult *r)
{
	ExecStatusType st = PQresultStatus(r);

	if (r == NULL)
		return LOST;
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		return 0;
	if (st == PGRES_FATAL_ERROR)
		return failure(s, r);
	/* Out of step with what was sent: the server may yet commit. */
	snprintf(s->why, sizeof(s->why), "unexpected %s", PQresStatus(st));
	return ASKEW;
}

int pg_read_to_sync(struct pg_worker *s, int rc)
{
	return to_sync(s, rc);
}

/* Every slot st carried: its statement failed, or was answered out of
 * step (slot.blamed). */
static void blame(const struct step *st)
{
	for (uint32_t k = 0; k < st->count; k++)
		st->sl[k]->blamed = true;
}

/* A statement of s->steps answered: judged, or why the run fails. A
 * set-based one that timed out cannot name its culprit: the batch runs
 * singly from then on (pg_worker.single). */
static int read_step(struct pg_worker *s, const struct step *st)
{
	PGresult *r = next_result(s);
	int rc = command(s, r);

	if (rc != 0) {
		PQclear(r);
		if (rc == WAITED && st->set)
			s->single = true;
		else if (rc == WAITED)
			s->culprit = st->sl[0];
		else if (rc == -EIO || rc == ASKEW)
			blame(st);
		return rc;
	}
	rc = st->set ? pg_judge_set(s, st, r) : pg_judge(s, st->sl[0], r);
	if (rc == 0)
		return 0;
	/* The server ran the statement and may commit it at the sync. */
	blame(st);
	snprintf(s->why, sizeof(s->why), "a statement's answer was not of "
		 "the shape it sends");
	return ASKEW;
}

/* The fence's (several connections), the withdrawals', then the steps'
 * answers, then the sync: with nothing before it, the implicit
 * transaction committed; an error there is the commit's own (a failure
 * as any statement's). */
int pg_read_batch(struct pg_worker *s)
{
	PGresult *r;
	int rc = 0;

	if (s->store->nworkers > 1) {
		r = next_result(s);
		rc = command(s, r);
		PQclear(r);
	}
	for (size_t i = 0; i < (s->wd_held ? 0 : s->nwd) && rc == 0; i++) {
		r = next_result(s);
		rc = command(s, r);
		PQclear(r);
		s->wd_waited = rc == WAITED;
	}
	for (size_t i = 0; i < s->nsteps && rc == 0; i++)
		rc = read_step(s, &s->steps[i]);
	if (rc != 0)
		return to_sync(s, rc);
	r = next_result(s);
	if (r == NULL)
		return LOST;
	if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
		PQclear(r);
		return 0;
	}
	rc = command(s, r);
	if (rc == 0) {
		snprintf(s->why, sizeof(s->why), "unexpected %s before the "
			 "sync", PQresStatus(PQresultStatus(r)));
		rc = LOST;	/* out of step with what was sent */
	}
	PQclear(r);
	return to_sync(s, rc);
}
