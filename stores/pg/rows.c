/*
 * rows.c - what the PostgreSQL store reads back, none of it trusted: the
 * columns of a record (load() and a RESERVE that finds a row standing),
 * checked for lengths, states and ranges, and what each statement found,
 * judged into its request's answer.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <libpq-fe.h>

#include "carmy_store.h"
#include "stores/pg/pg.h"

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

/* The call of a record (NULL throughout in a row written before the
 * store kept it: none), its kept bytes within the bounds and the whole
 * lengths. */
static int decode_call(const PGresult *r, int row, int base,
		       struct carmy_store_record *rec)
{
	int64_t tool_len, args_len, format;

	if (get_opt_int(r, row, base + C_TOOL_LEN, 4, 0, UINT16_MAX,
			&tool_len) ||
	    get_opt_int(r, row, base + C_ARGS_LEN, 8, 0, UINT32_MAX,
			&args_len) ||
	    get_opt_int(r, row, base + C_FORMAT, 2, 0, UINT8_MAX, &format))
		return -EBADMSG;
	rec->tool_len = (uint32_t)tool_len;
	rec->args_len = (uint32_t)args_len;
	rec->result_format = PQgetisnull(r, row, base + C_FORMAT) ?
			     CARMY_STORE_FORMAT_UNKNOWN : (uint8_t)format;
	if (!PQgetisnull(r, row, base + C_TOOL) &&
	    get_bytes(r, row, base + C_TOOL, 0,
		      tool_len < CARMY_STORE_TOOL_MAX ? tool_len :
							CARMY_STORE_TOOL_MAX,
		      &rec->tool, &rec->tool_kept))
		return -EBADMSG;
	if (!PQgetisnull(r, row, base + C_ARGS) &&
	    get_bytes(r, row, base + C_ARGS, 0,
		      args_len < CARMY_STORE_ARGS_MAX ? args_len :
							CARMY_STORE_ARGS_MAX,
		      &rec->args, &rec->args_kept))
		return -EBADMSG;
	return 0;
}

/* Row row of r, its ROW_COLS from column base, into rec (pointing into
 * r): 0, or -EBADMSG for anything this store would not have written. */
int pg_decode_row(const PGresult *r, int row, int base,
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
	if (decode_call(r, row, base, rec) != 0)
		return -EBADMSG;
	if (state == CARMY_STORE_COMPLETED)
		return decode_result(r, row, base, rec);
	return 0;
}

/* RESERVE, row row of r, its columns from base: inserted, its own row,
 * taken, an exec id another identity holds, or look again. sl->kept when
 * taken: sl->standing points into r, which must be kept. Its own: this
 * exec and this instance, told before the rest of the row is read (a
 * RESERVE run again after its commit was lost recorded that row, and is
 * answered so, whatever else the row reads); a row of another instance
 * with req's exec id (a client named it) is a row like any other. -EIO if
 * the statement's own flags are not booleans: an answer out of step with
 * the statement (a standing row this store would not have written is
 * -EBADMSG, its answer). */
static int judge_reserve(struct slot *sl, const PGresult *r, int row,
			 int base)
{
	int64_t inserted, found, mine, used;
	uint8_t exec[16];

	sl->kept = false;
	if (get_int(r, row, base, 1, 0, 1, &inserted) ||
	    get_int(r, row, base + 1, 1, 0, 1, &found) ||
	    get_opt_int(r, row, base + 2, 1, 0, 1, &mine) ||
	    get_int(r, row, base + 3, 1, 0, 1, &used))
		return -EIO;
	if (inserted) {
		sl->rc = 0;
	} else if (!found && used) {
		sl->rc = -EEXIST;	/* UNIQUE (exec), not the identity */
	} else if (!found) {
		sl->again = sl->full = true;
	} else if (mine && get_id16(r, row, base + 4 + C_EXEC, exec) == 0 &&
		   memcmp(exec, sl->req->rec->exec, 16) == 0) {
		sl->rc = 0;
	} else if ((sl->rc = pg_decode_row(r, row, base + 4,
					   &sl->standing)) != 0) {
		/* damage stands for the identity: nothing recorded */
	} else if (sl->req->taken == NULL) {
		sl->rc = -EEXIST;
	} else {
		sl->kept = true;
	}
	return 0;
}

/* COMPLETE, RESOLVE as committed, row row of r, its columns from base:
 * updated, already holding exactly this result, stale, or look again.
 * -EIO if the statement's flags are not booleans, as judge_reserve(). */
static int judge_settle(struct slot *sl, const PGresult *r, int row,
			int base)
{
	int64_t updated, found, state, same;

	if (get_int(r, row, base, 1, 0, 1, &updated) ||
	    get_int(r, row, base + 1, 1, 0, 1, &found))
		return -EIO;
	if (updated)
		sl->rc = 0;
	else if (!found)
		sl->rc = -ESTALE;
	else if (get_int(r, row, base + 2, 2, INT16_MIN, INT16_MAX, &state))
		sl->rc = -EBADMSG;
	else if (state == CARMY_STORE_RUNNING)
		/* settled or deleted since the snapshot */
		sl->again = sl->full = true;
	else if (state != CARMY_STORE_COMPLETED)
		sl->rc = -EBADMSG;
	else
		sl->rc = get_opt_int(r, row, base + 3, 1, 0, 1, &same) == 0 &&
			 same ? 0 : -ESTALE;
	return 0;
}

static bool settles(const struct carmy_store_req *req)
{
	return req->op == CARMY_STORE_COMPLETE ||
	       (req->op == CARMY_STORE_RESOLVE &&
		req->rec->state == CARMY_STORE_COMPLETED);
}

/* The columns of req's full statement's answer (conn.c: RESERVE_SQL,
 * SETTLE_SQL), a set-based one's after its ordinal: the four flags, and
 * for a RESERVE the standing row's ROW_COLS. Any other number is an
 * answer out of step, not a row to read. */
static int full_cols(const struct carmy_store_req *req)
{
	return req->op == CARMY_STORE_RESERVE ? 4 + C_NCOLS : 4;
}

/* Row row of r, columns from base, for sl (sl->kept if it keeps r): 0,
 * or -EIO for an answer out of step. */
static int judge_row(struct slot *sl, const PGresult *r, int row, int base)
{
	if (sl->req->op == CARMY_STORE_RESERVE)
		return judge_reserve(sl, r, row, base);
	return judge_settle(sl, r, row, base);
}

/* r kept for the slots that point into it, or cleared. */
static void keep_or_clear(struct pg_worker *s, PGresult *r, bool keep)
{
	if (keep)
		s->held[s->nheld++] = r;	/* at most one a step */
	else
		PQclear(r);
}

/* What sl's statement found: sl->rc and sl->again, tentatively. Takes r.
 * A lone RESERVE or settle not yet sl->full ran its plain form: took, or
 * the full statement in the next transaction. Returns 0, or -EIO if r is
 * not the shape its statement has. */
int pg_judge(struct pg_worker *s, struct slot *sl, PGresult *r)
{
	const struct carmy_store_req *req = sl->req;

	if ((req->op == CARMY_STORE_RESERVE || settles(req)) && !sl->full) {
		const char *n = PQcmdTuples(r);

		if (PQresultStatus(r) != PGRES_COMMAND_OK ||
		    (strcmp(n, "1") != 0 && strcmp(n, "0") != 0)) {
			PQclear(r);
			return -EIO;
		}
		if (n[0] == '1')
			sl->rc = 0;
		else
			sl->again = sl->full = true;
		PQclear(r);
		return 0;
	}
	if (req->op == CARMY_STORE_RESERVE || settles(req)) {
		if (PQresultStatus(r) != PGRES_TUPLES_OK ||
		    PQntuples(r) != 1 || PQnfields(r) != full_cols(req) ||
		    judge_row(sl, r, 0, 0) != 0) {
			PQclear(r);
			return -EIO;
		}
		keep_or_clear(s, r, sl->kept);
		return 0;
	}
	sl->rc = 0;	/* a DELETE: there or not, it is gone */
	PQclear(r);
	return 0;
}

/* A bare set-based statement: the ordinals (from 1) of the slots whose
 * insert or update took, ascending; every other slot looks again, as
 * its full statement, in the next transaction. Takes r. */
static int judge_plain_set(const struct step *st, PGresult *r)
{
	int n = PQntuples(r);
	int64_t i, last = 0;

	if (PQresultStatus(r) != PGRES_TUPLES_OK || n > (int)st->count ||
	    PQnfields(r) != 1) {
		PQclear(r);
		return -EIO;
	}
	/* (A slot left full by an -EIO below is sent full, if ever again,
	 * which is right in any run.) */
	for (uint32_t k = 0; k < st->count; k++)
		st->sl[k]->again = st->sl[k]->full = true;
	for (int row = 0; row < n; row++) {
		struct slot *sl;

		if (get_int(r, row, 0, 8, last + 1, st->count, &i) != 0) {
			PQclear(r);
			return -EIO;
		}
		last = i;
		sl = st->sl[i - 1];
		sl->again = sl->full = false;
		sl->rc = 0;
	}
	PQclear(r);
	return 0;
}

/* What a set-based statement found for each slot of st: one row a slot,
 * in their order, its ordinal first (from 1); for a bare one,
 * judge_plain_set(). Takes r. Returns 0, or -EIO if r is not that
 * shape. */
int pg_judge_set(struct pg_worker *s, const struct step *st, PGresult *r)
{
	bool keep = false;
	int64_t i;

	if (st->plain)
		return judge_plain_set(st, r);

	if (PQresultStatus(r) != PGRES_TUPLES_OK ||
	    PQntuples(r) != (int)st->count ||
	    PQnfields(r) != 1 + full_cols(st->sl[0]->req)) {
		PQclear(r);
		return -EIO;
	}
	for (uint32_t k = 0; k < st->count; k++) {
		if (get_int(r, (int)k, 0, 8, (int64_t)k + 1, (int64_t)k + 1,
			    &i) != 0) {
			PQclear(r);
			return -EIO;
		}
	}
	for (uint32_t k = 0; k < st->count; k++) {
		if (judge_row(st->sl[k], r, (int)k, 1) != 0) {
			/* none may point into r now */
			for (uint32_t j = 0; j < k; j++)
				st->sl[j]->kept = false;
			PQclear(r);
			return -EIO;
		}
		keep |= st->sl[k]->kept;
	}
	keep_or_clear(s, r, keep);
	return 0;
}

/* The results kept for answered or forgotten slots. */
void pg_drop_held(struct pg_worker *s)
{
	for (size_t i = 0; i < s->nheld; i++)
		PQclear(s->held[i]);
	s->nheld = 0;
}
