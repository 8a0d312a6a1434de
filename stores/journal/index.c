/*
 * index.c - struct jidx (internal.h): which executions stand
 * and where their records are, and how each record read or written
 * changes that (jidx_record()). It holds no copy of a record: an identity
 * is read back from the file (or recovery's mapping of it) when its hash
 * matches.
 *
 * Two open-addressing tables over the executions, by exec id (random
 * already, so its first 8 bytes are the hash) and by identity (XXH3 of its
 * parts), kept at most half full.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "carmy_store.h"
#include "stores/journal/internal.h"

static uint64_t ident_hash(const uint8_t *ident, const uint16_t len[3]);

static uint64_t exec_hash(const uint8_t exec[16])
{
	uint64_t h;

	memcpy(&h, exec, 8);	/* random already */
	return h;
}

/* An execution by exec id; NULL if unknown. */
static struct jexec *find_exec(const struct jidx *ix, const uint8_t exec[16])
{
	if (ix->by_exec.slot == NULL)
		return NULL;
	for (uint32_t b = (uint32_t)exec_hash(exec) & ix->by_exec.mask;;
	     b = (b + 1) & ix->by_exec.mask) {
		uint32_t s = ix->by_exec.slot[b];

		if (s == 0)
			return NULL;
		if (memcmp(ix->ex[s - 1].exec, exec, 16) == 0)
			return &ix->ex[s - 1];
	}
}

/* Does the RESERVE record at off in ix's file name identity (ident, len)?
 * 1 or 0, or -errno if it cannot be read. Only bytes of that record are
 * read: its fixed part, then as many identity bytes as it has. */
static int same_ident(const struct jidx *ix, uint64_t off, const uint8_t *ident,
		      const uint16_t len[3])
{
	uint8_t buf[3 * CARMY_STORE_ID_MAX];
	size_t total = (size_t)len[0] + len[1] + len[2];
	struct jrec_reserve rv;
	int rc;

	off += sizeof(struct jrec_head);
	if (ix->map != NULL && off < ix->map_end) {
		memcpy(&rv, ix->map + off, sizeof(rv));
		return memcmp(rv.rv_len, len, sizeof(rv.rv_len)) == 0 &&
		       memcmp(ix->map + off + sizeof(rv), ident, total) == 0;
	}
	rc = jnl_read_all(ix->fd, &rv, sizeof(rv), off);
	if (rc != 0)
		return rc;
	if (memcmp(rv.rv_len, len, sizeof(rv.rv_len)) != 0)
		return 0;
	rc = jnl_read_all(ix->fd, buf, total, off + sizeof(rv));
	if (rc != 0)
		return rc;
	return memcmp(buf, ident, total) == 0;
}

/* The slot of identity (ident, len): naming its latest execution, or
 * empty (0) where it would go. Released executions keep their slot (an
 * empty one would cut other identities' probes); a later reservation of
 * the same identity takes it over. */
static int find_ident(const struct jidx *ix, uint64_t hash,
		      const uint8_t *ident, const uint16_t len[3],
		      uint32_t **slotp)
{
	for (uint32_t b = (uint32_t)hash & ix->by_ident.mask;;
	     b = (b + 1) & ix->by_ident.mask) {
		uint32_t s = ix->by_ident.slot[b];
		int rc;

		if (s == 0) {
			*slotp = &ix->by_ident.slot[b];
			return 0;
		}
		if (ix->ex[s - 1].ident_hash != hash)
			continue;
		rc = same_ident(ix, ix->ex[s - 1].reserve_off, ident, len);
		if (rc < 0)
			return rc;
		if (rc > 0) {
			*slotp = &ix->by_ident.slot[b];
			return 0;
		}
	}
}

/* x no longer stands. */
static void retire(struct jidx *ix, struct jexec *x)
{
	if (x->gone)
		return;
	x->gone = true;
	ix->live--;
	if (x->complete_off != 0)
		ix->results--;
}

/* Apply the record at p, which is at off in ix's file: what recovery does
 * for every record read, a commit for every record written, a compaction
 * for every record it copies. 0, or -errno (out of memory, or an identity
 * that cannot be read back). */
int jidx_record(struct jidx *ix, const uint8_t *p, uint64_t off)
{
	struct jrec_head h;
	struct jexec *x;

	memcpy(&h, p, sizeof(h));
	p += sizeof(h);
	switch (h.jr_op) {
	case CARMY_STORE_RESERVE: {
		struct jrec_reserve rv;
		const uint8_t *ident = p + sizeof(rv);
		uint32_t *slot;
		uint64_t ih;
		int rc;

		memcpy(&rv, p, sizeof(rv));
		if (find_exec(ix, rv.rv_exec) != NULL)
			return 0;	/* an exec id never comes twice */
		rc = jidx_room(ix);
		if (rc != 0)
			return rc;
		ih = ident_hash(ident, rv.rv_len);
		rc = find_ident(ix, ih, ident, rv.rv_len, &slot);
		if (rc != 0)
			return rc;
		/* A later reservation of the same identity stands: the
		 * earlier one was released (its RELEASE may be lost). */
		if (*slot != 0)
			retire(ix, &ix->ex[*slot - 1]);
		jidx_add(ix, rv.rv_exec, ih, off, slot);
		return 0;
	}
	case CARMY_STORE_COMPLETE: {
		struct jrec_complete cp;

		memcpy(&cp, p, sizeof(cp));
		x = find_exec(ix, cp.cp_exec);
		/* The first result stands; one for an execution we never
		 * saw reserved (or one released) is ignored. */
		if (x != NULL && !x->gone && x->complete_off == 0) {
			x->complete_off = off;
			ix->results++;
		}
		return 0;
	}
	case CARMY_STORE_RESOLVE: {
		struct jrec_resolve rs;

		memcpy(&rs, p, sizeof(rs));
		x = find_exec(ix, rs.rs_exec);
		/* Only an execution without a result can be resolved. */
		if (x == NULL || x->gone || x->complete_off != 0)
			return 0;
		if (rs.rs_committed) {
			x->complete_off = off;
			ix->results++;
		} else {
			retire(ix, x);
		}
		return 0;
	}
	default: {
		struct jrec_release rl;

		memcpy(&rl, p, sizeof(rl));
		x = find_exec(ix, rl.rl_exec);
		/* RELEASE retires a running execution, PURGE one with a
		 * result. */
		if (x != NULL && !x->gone &&
		    (x->complete_off != 0) == (h.jr_op == CARMY_STORE_PURGE))
			retire(ix, x);
		return 0;
	}
	}
}

/* Room for one more execution: the tables stay at most half full. */
int jidx_room(struct jidx *ix)
{
	uint32_t n;
	struct jexec *ex;
	uint32_t *se, *si;

	if ((uint64_t)(ix->nex + 1) * 2 <= ix->by_exec.mask)
		return 0;
	if (ix->by_exec.mask >= (1u << 31) - 1)
		return -ENOMEM;
	n = ix->by_exec.mask ? (ix->by_exec.mask + 1) * 2 : 1024;
	ex = realloc(ix->ex, (size_t)n / 2 * sizeof(*ex));
	se = calloc(n, sizeof(uint32_t));
	si = calloc(n, sizeof(uint32_t));
	if (ex == NULL || se == NULL || si == NULL) {
		if (ex != NULL)
			ix->ex = ex;
		free(se);
		free(si);
		return -ENOMEM;
	}
	ix->ex = ex;
	free(ix->by_exec.slot);
	free(ix->by_ident.slot);
	ix->by_exec.slot = se;
	ix->by_ident.slot = si;
	ix->by_exec.mask = ix->by_ident.mask = n - 1;
	/* Every execution keeps its exec slot; only those that stand get an
	 * identity slot (a released one's identity has none to take over). */
	for (uint32_t i = 0; i < ix->nex; i++) {
		const struct jexec *x = &ix->ex[i];
		uint32_t b = (uint32_t)exec_hash(x->exec) & (n - 1);

		while (se[b] != 0)
			b = (b + 1) & (n - 1);
		se[b] = i + 1;
		if (x->gone)
			continue;
		b = (uint32_t)x->ident_hash & (n - 1);
		while (si[b] != 0)
			b = (b + 1) & (n - 1);
		si[b] = i + 1;
	}
	return 0;
}

/* A new execution, standing, whose RESERVE is at off; after jidx_room().
 * Its identity takes ident_slot (from find_ident()) or, if NULL, the first
 * free slot: a compaction adds only standing executions, whose identities
 * are all different. */
struct jexec *jidx_add(struct jidx *ix, const uint8_t exec[16],
		       uint64_t ih, uint64_t off, uint32_t *ident_slot)
{
	struct jexec *x = &ix->ex[ix->nex];
	uint32_t b;

	memset(x, 0, sizeof(*x));
	memcpy(x->exec, exec, 16);
	x->reserve_off = off;
	x->ident_hash = ih;
	if (ident_slot == NULL) {
		for (b = (uint32_t)ih & ix->by_ident.mask;
		     ix->by_ident.slot[b] != 0; b = (b + 1) & ix->by_ident.mask)
			;
		ident_slot = &ix->by_ident.slot[b];
	}
	*ident_slot = ix->nex + 1;
	for (b = (uint32_t)exec_hash(exec) & ix->by_exec.mask;
	     ix->by_exec.slot[b] != 0; b = (b + 1) & ix->by_exec.mask)
		;
	ix->by_exec.slot[b] = ix->nex + 1;
	ix->nex++;
	ix->live++;
	return x;
}

void jidx_free(struct jidx *ix)
{
	free(ix->ex);
	free(ix->by_exec.slot);
	free(ix->by_ident.slot);
	ix->ex = NULL;
	ix->by_exec = ix->by_ident = (struct jindex){ NULL, 0 };
	ix->nex = ix->live = ix->results = 0;
	ix->map = NULL;
	ix->map_end = 0;
}

/* Execution x as a record: identity, fingerprints, exec id, its call if
 * its RESERVE keeps one and, if it has one, its result (from a COMPLETE
 * or a committed RESOLVE), pointing into map, a mapping of the file its
 * offsets are in (whose records recovery checked). */
void jidx_standing(const uint8_t *map, const struct jexec *x,
		   struct carmy_store_record *r)
{
	const uint8_t *p = map + x->reserve_off + sizeof(struct jrec_head);
	struct jrec_reserve rv;
	size_t off = 0;

	memset(r, 0, sizeof(*r));
	memcpy(&rv, p, sizeof(rv));
	p += sizeof(rv);
	for (int k = 0; k < 3; k++) {
		r->part[k] = p + off;
		r->len[k] = rv.rv_len[k];
		off += rv.rv_len[k];
	}
	memcpy(r->fingerprint, rv.rv_fingerprint, 16);
	memcpy(r->rawprint, rv.rv_rawprint, 16);
	memcpy(r->exec, rv.rv_exec, 16);
	r->pid = rv.rv_pid;
	r->started_ns = rv.rv_started_ns;
	if (rv.rv_flags & JRV_CALL) {
		struct jrec_call jc;

		p += off;
		memcpy(&jc, p, sizeof(jc));
		p += sizeof(jc);
		r->tool = p;
		r->tool_kept = jc.jc_tool_kept;
		r->tool_len = jc.jc_tool_len;
		r->args = p + jc.jc_tool_kept;
		r->args_kept = jc.jc_args_kept;
		r->args_len = jc.jc_args_len;
		r->result_format = jc.jc_format;
	} else {
		r->result_format = CARMY_STORE_FORMAT_UNKNOWN;
	}
	r->state = CARMY_STORE_RUNNING;
	if (x->complete_off == 0)
		return;
	p = map + x->complete_off + sizeof(struct jrec_head);
	r->state = CARMY_STORE_COMPLETED;
	if (map[x->complete_off + offsetof(struct jrec_head, jr_op)] ==
	    CARMY_STORE_RESOLVE) {
		struct jrec_resolve rs;

		memcpy(&rs, p, sizeof(rs));
		r->finished_ns = rs.rs_finished_ns;
		r->status = rs.rs_status;
		r->result_code = rs.rs_result_code;
		r->result = p + sizeof(rs);
		r->result_len = rs.rs_result_len;
		r->resolved_ns = rs.rs_resolved_ns;
		r->resolved_uid = rs.rs_uid;
		r->resolved_pid = rs.rs_pid;
	} else {
		struct jrec_complete cp;

		memcpy(&cp, p, sizeof(cp));
		r->finished_ns = cp.cp_finished_ns;
		r->status = cp.cp_status;
		r->result_code = cp.cp_result_code;
		r->result = p + sizeof(cp);
		r->result_len = cp.cp_result_len;
	}
}

static uint64_t ident_hash(const uint8_t *ident, const uint16_t len[3])
{
	return XXH3_64bits_withSeed(ident, (size_t)len[0] + len[1] + len[2],
				    ((uint64_t)len[0] << 32) |
					    ((uint64_t)len[1] << 16) | len[2]);
}
