/*
 * send.c - one run of a batch, sent: BEGIN, what is left to withdraw, the
 * unanswered requests' statements in the worker's order, COMMIT and a
 * sync, queued in libpq's pipeline and flushed together. Every value is a
 * bound parameter, bytea and integers in binary. read.c reads the answers.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <libpq-fe.h>

#include "carmy_store.h"
#include "stores/pg/pg.h"

static void put_be(uint8_t *out, uint64_t v, int size)
{
	for (int i = size - 1; i >= 0; i--, v >>= 8)
		out[i] = (uint8_t)v;
}

static int send_reserve(PGconn *c, const struct carmy_store_record *r,
			const char *instance)
{
	uint8_t pid[8], started[8], tool_len[4], args_len[8], format[2];
	const char *v[14];
	int len[14], fmt[14];

	put_be(pid, r->pid, 8);
	put_be(started, r->started_ns, 8);
	put_be(tool_len, r->tool_len, 4);
	put_be(args_len, r->args_len, 8);
	put_be(format, r->result_format, 2);
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
	/* The call (check_req() bounded it): never NULL, so that a row
	 * written here tells "nothing kept" from a row of an older one. */
	v[9] = r->tool_kept > 0 ? (const char *)r->tool : "";
	len[9] = (int)r->tool_kept;
	v[10] = (const char *)tool_len;
	len[10] = 4;
	v[11] = r->args_kept > 0 ? (const char *)r->args : "";
	len[11] = (int)r->args_kept;
	v[12] = (const char *)args_len;
	len[12] = 8;
	v[13] = (const char *)format;
	len[13] = 2;
	for (int k = 0; k < 14; k++)
		fmt[k] = 1;
	return PQsendQueryPrepared(c, pg_stmts[ST_RESERVE].name, 14, v, len,
				   fmt, 1);
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
	return PQsendQueryPrepared(c, pg_stmts[ST_SETTLE].name, 9, v, len, fmt,
				   1);
}

/* RELEASE (with instance) or PURGE (without). */
static int send_exec(PGconn *c, int st, const uint8_t exec[16],
		     const char *instance)
{
	const char *v[2] = { (const char *)exec, instance };
	int len[2] = { 16, instance ? (int)strlen(instance) : 0 };
	int fmt[2] = { 1, 1 };

	return PQsendQueryPrepared(c, pg_stmts[st].name, instance ? 2 : 1, v,
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

	return PQsendQueryPrepared(c, pg_stmts[ST_WITHDRAW].name, 5, v, len,
				   fmt, 1);
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
int pg_send_batch(struct pg_store *s, size_t n)
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
