/*
 * send.c - one run of a batch, sent: what is left to withdraw, the
 * unanswered requests' statements in the worker's order and a sync,
 * queued in libpq's pipeline and flushed together. Without a BEGIN, the
 * server runs everything up to the sync as one transaction, and commits
 * it at the sync if every statement succeeded (rolls it back if one
 * failed): the protocol's implicit transaction, in READ COMMITTED, read
 * write (the session's defaults, conn.c). Consecutive
 * RESERVEs, and consecutive settles (COMPLETE, RESOLVE as committed), go
 * as one set-based statement (conn.c: ST_RESERVES, ST_SETTLES) whose
 * parameters are arrays, an element a request; a group under SET_MIN,
 * every other request, the store's copy of a COMPLETE (slot.alone), and
 * every request once the batch runs singly (pg_worker.single), as a
 * statement of its own. A RESERVE or settle, alone or in a group, goes in
 * its bare form (the ST_*_PLAIN statements; step.plain for a group) until
 * a run finds it took nothing (slot.full).
 * The statements sent are listed in s->steps for read.c. Every value is
 * a bound parameter, bytea and integers in binary.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "carmy_store.h"
#include "stores/pg/pg.h"

static void put_be(uint8_t *out, uint64_t v, int size)
{
	for (int i = size - 1; i >= 0; i--, v >>= 8)
		out[i] = (uint8_t)v;
}

/* RESERVE_PLAIN_SQL, or with full RESERVE_SQL (conn.c). */
static int send_reserve(PGconn *c, const struct carmy_store_record *r,
			const char *instance, bool full)
{
	uint8_t pid[8], started[8], tool_len[4], args_len[8], format[2];
	const char *v[14];
	int len[14], fmt[14], st = full ? ST_RESERVE : ST_RESERVE_PLAIN;

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
	return PQsendQueryPrepared(c, pg_stmts[st].name, 14, v, len, fmt, 1);
}

/* COMPLETE, or RESOLVE as committed (resolved: with who settled it):
 * SETTLE_PLAIN_SQL, or with full SETTLE_SQL (conn.c). */
static int send_settle(PGconn *c, const struct carmy_store_record *r,
		       bool resolved, const char *instance, bool full)
{
	int st = full ? ST_SETTLE : ST_SETTLE_PLAIN;
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
	return PQsendQueryPrepared(c, pg_stmts[st].name, 9, v, len, fmt, 1);
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

static int send_one(PGconn *c, const struct slot *sl, const char *instance)
{
	const struct carmy_store_req *req = sl->req;
	const struct carmy_store_record *r = req->rec;

	switch (req->op) {
	case CARMY_STORE_RESERVE:
		return send_reserve(c, r, instance, sl->full);
	case CARMY_STORE_COMPLETE:
		return send_settle(c, r, false, instance, sl->full);
	case CARMY_STORE_RESOLVE:
		if (r->state == CARMY_STORE_COMPLETED)
			return send_settle(c, r, true, instance, sl->full);
		return send_exec(c, ST_RELEASE, r->exec, instance);
	case CARMY_STORE_RELEASE:
		return send_exec(c, ST_RELEASE, r->exec, instance);
	default:
		return send_exec(c, ST_PURGE, r->exec, NULL);
	}
}

/* ------------------------------------------------------------ arrays */

/* A one-dimension array's header: ndim, has-nulls, element type, size,
 * lower bound, 4 bytes each. */
#define ARR_HEAD 20

static bool arr_room(struct pg_arr *a, size_t more)
{
	size_t cap = a->cap ? a->cap : 256;
	uint8_t *p;

	if (a->len + more <= a->cap)
		return true;
	while (cap < a->len + more)
		cap *= 2;
	p = realloc(a->p, cap);
	if (p == NULL)
		return false;
	a->p = p;
	a->cap = cap;
	return true;
}

static void arr_start(struct pg_arr *a, uint32_t oid)
{
	a->len = ARR_HEAD;	/* arr_room(a, ARR_HEAD) was made sure of */
	a->n = 0;
	put_be(a->p, 1, 4);
	put_be(a->p + 4, 0, 4);
	put_be(a->p + 8, oid, 4);
	put_be(a->p + 16, 1, 4);
}

/* An element of len bytes (v NULL: a NULL element). False: no memory. */
static bool arr_put(struct pg_arr *a, const void *v, uint32_t len)
{
	if (!arr_room(a, 4 + (size_t)len))
		return false;
	if (v == NULL) {
		put_be(a->p + 4, 1, 4);		/* has NULLs */
		put_be(a->p + a->len, UINT32_MAX, 4);	/* length -1 */
		a->len += 4;
	} else {
		put_be(a->p + a->len, len, 4);
		if (len > 0)
			memcpy(a->p + a->len + 4, v, len);
		a->len += 4 + (size_t)len;
	}
	a->n++;
	put_be(a->p + 12, a->n, 4);
	return true;
}

static bool arr_int(struct pg_arr *a, uint64_t v, int size)
{
	uint8_t b[8];

	put_be(b, v, size);
	return arr_put(a, b, (uint32_t)size);
}

void pg_free_arrays(struct pg_worker *s)
{
	for (int k = 0; k < RESERVE_COLS; k++) {
		free(s->arr[k].p);
		s->arr[k].p = NULL;
		s->arr[k].cap = 0;
	}
}

/* The arrays' headers, after making room for them. */
static bool arrs_start(struct pg_worker *s, const uint32_t *oids, int n)
{
	for (int k = 0; k < n; k++) {
		s->arr[k].len = 0;
		if (!arr_room(&s->arr[k], ARR_HEAD))
			return false;
		arr_start(&s->arr[k], oids[k]);
	}
	return true;
}

static int send_arrays(struct pg_worker *s, int st, int narr)
{
	const char *v[RESERVE_COLS + 1];
	int len[RESERVE_COLS + 1], fmt[RESERVE_COLS + 1];

	for (int k = 0; k < narr; k++) {
		v[k] = (const char *)s->arr[k].p;
		len[k] = (int)s->arr[k].len;
		fmt[k] = 1;
	}
	v[narr] = s->instance;
	len[narr] = (int)strlen(s->instance);
	fmt[narr] = 1;
	return PQsendQueryPrepared(s->conn, pg_stmts[st].name, narr + 1, v,
				   len, fmt, 1) ? 0 : LOST;
}

/* ST_RESERVES, or its bare form, for a group: 0, LOST or -ENOMEM. */
static int send_reserves(struct pg_worker *s, const struct step *st)
{
	static const uint32_t oids[RESERVE_COLS] = { BYTEAOID, BYTEAOID,
		BYTEAOID, BYTEAOID, BYTEAOID, BYTEAOID, INT8OID, INT8OID,
		BYTEAOID, INT4OID, BYTEAOID, INT8OID, INT2OID };
	struct pg_arr *a = s->arr;
	bool ok = arrs_start(s, oids, RESERVE_COLS);

	for (uint32_t i = 0; i < st->count && ok; i++) {
		const struct carmy_store_record *r = st->sl[i]->req->rec;

		ok = arr_put(&a[0], r->part[0], r->len[0]) &&
		     arr_put(&a[1], r->part[1], r->len[1]) &&
		     arr_put(&a[2], r->part[2], r->len[2]) &&
		     arr_put(&a[3], r->exec, 16) &&
		     arr_put(&a[4], r->fingerprint, 16) &&
		     arr_put(&a[5], r->rawprint, 16) &&
		     arr_int(&a[6], r->pid, 8) &&
		     arr_int(&a[7], r->started_ns, 8) &&
		     arr_put(&a[8], r->tool_kept ? r->tool : (const void *)"",
			     r->tool_kept) &&
		     arr_int(&a[9], r->tool_len, 4) &&
		     arr_put(&a[10], r->args_kept ? r->args : (const void *)"",
			     r->args_kept) &&
		     arr_int(&a[11], r->args_len, 8) &&
		     arr_int(&a[12], r->result_format, 2);
	}
	if (!ok)
		return -ENOMEM;
	return send_arrays(s, st->plain ? ST_RESERVES_PLAIN : ST_RESERVES,
			   RESERVE_COLS);
}

/* ST_SETTLES, or its bare form, for a group: 0, LOST or -ENOMEM.
 * COMPLETE's resolved_* are NULL. */
static int send_settles(struct pg_worker *s, const struct step *st)
{
	static const uint32_t oids[8] = { BYTEAOID, INT8OID, INT4OID,
		INT4OID, BYTEAOID, INT8OID, INT8OID, INT8OID };
	struct pg_arr *a = s->arr;
	bool ok = arrs_start(s, oids, 8);

	for (uint32_t i = 0; i < st->count && ok; i++) {
		const struct carmy_store_req *req = st->sl[i]->req;
		const struct carmy_store_record *r = req->rec;
		bool resolved = req->op == CARMY_STORE_RESOLVE;

		ok = arr_put(&a[0], r->exec, 16) &&
		     arr_int(&a[1], r->finished_ns, 8) &&
		     arr_int(&a[2], (uint32_t)r->status, 4) &&
		     arr_int(&a[3], (uint32_t)r->result_code, 4) &&
		     arr_put(&a[4], r->result_len ? r->result :
			     (const void *)"", r->result_len);
		if (ok && resolved)
			ok = arr_int(&a[5], r->resolved_ns, 8) &&
			     arr_int(&a[6], r->resolved_uid, 8) &&
			     arr_int(&a[7], r->resolved_pid, 8);
		else if (ok)
			ok = arr_put(&a[5], NULL, 0) &&
			     arr_put(&a[6], NULL, 0) &&
			     arr_put(&a[7], NULL, 0);
	}
	if (!ok)
		return -ENOMEM;
	return send_arrays(s, st->plain ? ST_SETTLES_PLAIN : ST_SETTLES, 8);
}

/* ------------------------------------------------------------ steps */

enum { K_OTHER, K_RESERVE, K_SETTLE };

static int kind(const struct carmy_store_req *req)
{
	if (req->op == CARMY_STORE_RESERVE)
		return K_RESERVE;
	if (req->op == CARMY_STORE_COMPLETE ||
	    (req->op == CARMY_STORE_RESOLVE &&
	     req->rec->state == CARMY_STORE_COMPLETED))
		return K_SETTLE;
	return K_OTHER;
}

/* The bytes a request puts in a set-based statement, near enough. */
static size_t weight(const struct carmy_store_req *req)
{
	const struct carmy_store_record *r = req->rec;

	if (req->op == CARMY_STORE_RESERVE)
		return (size_t)r->len[0] + r->len[1] + r->len[2] +
		       r->tool_kept + r->args_kept + 128;
	return (size_t)r->result_len + 96;
}

/* Groups under SET_MIN become a statement a request, in place (from the
 * end, as the steps only grow in number); the others set-based, in their
 * bare form unless a slot of theirs must be sent full. */
static void split_small(struct pg_worker *s)
{
	size_t total = 0, to;

	for (size_t i = 0; i < s->nsteps; i++)
		total += s->steps[i].count < SET_MIN ? s->steps[i].count : 1;
	to = total;
	for (size_t i = s->nsteps; i-- > 0;) {
		struct step st = s->steps[i];

		if (st.count >= SET_MIN) {
			st.set = st.plain = true;
			for (uint32_t k = 0; k < st.count; k++)
				st.plain &= !st.sl[k]->full;
			s->steps[--to] = st;
			continue;
		}
		for (uint32_t k = st.count; k-- > 0;)
			s->steps[--to] = (struct step){ .sl = st.sl + k,
							.count = 1 };
	}
	s->nsteps = total;
}

/* s->live and s->steps for this run: the unanswered slots in s->order,
 * consecutive ones of a kind grouped (never across a request that may
 * free an identity, answered or not), up to SET_BYTES_MAX a group. */
static void make_steps(struct pg_worker *s, size_t n)
{
	size_t nlive = 0, bytes = 0;
	struct step *open = NULL;
	int open_kind = K_OTHER;

	s->nsteps = 0;
	for (size_t i = 0; i < n; i++) {
		struct slot *sl = s->order[i];
		size_t w;
		int k;

		/* An answered slot's req may be freed: only its kind, noted
		 * in a run before it was answered, is read. */
		if (sl->answered) {
			if (sl->kind == K_OTHER)
				open = NULL;
			continue;
		}
		k = sl->kind = kind(sl->req);
		w = weight(sl->req);
		s->live[nlive] = sl;
		if (open != NULL && k == open_kind && !s->single &&
		    !sl->alone && bytes + w <= SET_BYTES_MAX) {
			open->count++;
			bytes += w;
		} else {
			open = &s->steps[s->nsteps++];
			open->sl = &s->live[nlive];
			open->count = 1;
			open_kind = k;
			bytes = w;
			if (k == K_OTHER || sl->alone)
				open = NULL;
		}
		nlive++;
	}
	split_small(s);
}

/* The fence (conn.c: carmy_fence()): the batch commits only while this
 * store's generation is the instance's. With one connection there is
 * none: it holds the name whenever it runs a batch (store_pg.c,
 * Fencing). */
static bool send_fence(struct pg_worker *s)
{
	uint8_t key[8], gen[8];
	const char *v[3] = { (const char *)key, s->instance,
			     (const char *)gen };
	int len[3] = { 8, (int)strlen(s->instance), 8 };
	int fmt[3] = { 1, 1, 1 };

	put_be(key, (uint64_t)s->store->fence_key, 8);
	put_be(gen, (uint64_t)s->store->gen, 8);
	return PQsendQueryPrepared(s->conn, pg_stmts[ST_FENCE].name, 3, v, len,
				   fmt, 1);
}

/* The fence (several connections), the withdrawals, the unanswered
 * slots' statements (s->steps) and the sync that commits them: queued,
 * then flushed by the sync. 0; LOST (the connection is reset after);
 * -ENOMEM with a failing statement queued before the sync, so that
 * nothing commits (read to the sync). */
int pg_send_batch(struct pg_worker *s, size_t n)
{
	PGconn *c = s->conn;
	int rc = 0;

	make_steps(s, n);
	if (s->store->nworkers > 1 && !send_fence(s))
		return LOST;
	for (size_t i = 0; i < (s->wd_held ? 0 : s->nwd); i++)
		if (!send_withdraw(c, &s->wd[i], s->instance))
			return LOST;
	for (size_t i = 0; i < s->nsteps && rc == 0; i++) {
		const struct step *st = &s->steps[i];

		if (!st->set)
			rc = send_one(c, st->sl[0], s->instance) ? 0 :
			     LOST;
		else if (kind(st->sl[0]->req) == K_RESERVE)
			rc = send_reserves(s, st);
		else
			rc = send_settles(s, st);
	}
	if (rc == -ENOMEM) {
		/* What was queued must not commit at the sync: a statement
		 * that fails (division by zero) rolls it all back. */
		s->nsteps = 0;
		if (!PQsendQueryParams(c, "SELECT 1 / 0", 0, NULL, NULL, NULL,
				       NULL, 1) || !PQpipelineSync(c))
			return LOST;
		snprintf(s->why, sizeof(s->why), "out of memory for a "
			 "set-based statement's arrays");
		return -ENOMEM;
	}
	if (rc != 0 || !PQpipelineSync(c))
		return LOST;
	return 0;
}
