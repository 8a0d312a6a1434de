/*
 * sweep.c - the table operations only carmyd performs: recording a result,
 * forgetting completed entries, turning a dead owner's entries uncertain,
 * and reclaiming tombstones; and the readers they share with a client's
 * look at an entry carmyd may be moving (shm_look_as()).
 *
 * carmyd performs them from one thread, so they never race each other; they
 * race only with clients, and every step that a client could also take is a
 * CAS. Indexes read from the segment (en_bucket) are bounds-checked against
 * carmyd's private geometry before use.
 */
#include <errno.h>
#include <string.h>

#include "shm/atomic.h"

#include "shm/shm.h"

static bool published_at(const struct shm_view *v, uint32_t e, uint32_t *b,
			 uint64_t *w);
static uint32_t reclaim_cluster(struct shm_view *v, uint32_t s, uint32_t f);
static uint32_t reclaim_without_free(struct shm_view *v);
static void compact(struct shm_view *v, uint32_t from, uint32_t len,
		    bool tomb_before);
static void settle_orphan(const struct shm_view *v, uint32_t e, uint64_t t,
			  struct shm_sweep_stats *st);
static bool give_back(const struct shm_view *v, uint32_t e,
		      const uint8_t *exec);
static void seq_open(struct shm_view *v);
static void seq_close(struct shm_view *v);

/*
 * Record the result of entry e for owner, which must hold its ticket and
 * have it RUNNING with execution id exec. The result goes in first, then
 * the bucket turns COMPLETED with a CAS (a full barrier: readers that see
 * COMPLETED see the result), then the ticket becomes LIVE. A crash between
 * the last two steps leaves a COMPLETED bucket with an owner's ticket, which
 * the next sweep settles to LIVE.
 * Returns 0, CARMY_ENOT_OWNER if the ticket is not owner's, or
 * CARMY_ENOT_RESERVED if the entry is not RUNNING under that execution id.
 */
int shm_record_result(const struct shm_view *v, uint32_t e, uint32_t owner,
		      const uint8_t *exec, int status, int result_code,
		      const void *data, size_t len, uint64_t now_ns)
{
	struct shm_entry *en;
	uint32_t b;
	uint64_t w;

	uint64_t t;

	if (e >= v->geo.capacity || len > v->geo.max_result)
		return CARMY_ENOT_RESERVED;
	t = shm_load(&v->tickets[e]);
	if (SHM_T_WHAT(t) != owner)
		return CARMY_ENOT_OWNER;
	if (!published_at(v, e, &b, &w) || SHM_W_STATE(w) != SHM_RUNNING)
		return CARMY_ENOT_RESERVED;
	en = shm_entry_at(v, e);
	if (memcmp(en->en_exec, exec, SHM_EXEC_LEN) != 0)
		return CARMY_ENOT_RESERVED;

	if (len > 0)	/* data may be NULL then */
		memcpy(shm_result_area(v, e), data, len);
	en->en_result_len = (uint32_t)len;
	en->en_result_code = result_code;
	en->en_status = (uint8_t)status;
	en->en_finished_ns = now_ns;
	if (shm_cas(&v->buckets[b], w, shm_next(w, SHM_COMPLETED)) != w)
		return CARMY_ENOT_RESERVED;	/* released meanwhile */
	shm_cas(&v->tickets[e], t, SHM_TICKET_LIVE);
	return 0;
}

/*
 * Turn entry e, RUNNING as execution exec under owner's ticket, UNCERTAIN,
 * as a sweep turns a dead owner's: its owner has lost track of what the
 * tool did (carmy_abandon()). The bucket first, with a CAS, then the
 * ticket LIVE; a crash between the two leaves an UNCERTAIN bucket with an
 * owner's ticket, which the next sweep settles to LIVE. Returns 0 (also
 * if e is uncertain as exec already), CARMY_ENOT_OWNER or
 * CARMY_ENOT_RESERVED, as shm_record_result().
 */
int shm_abandon(const struct shm_view *v, uint32_t e, uint32_t owner,
		const uint8_t *exec)
{
	uint32_t b;
	uint64_t w, t;

	if (e >= v->geo.capacity)
		return CARMY_ENOT_RESERVED;
	t = shm_load(&v->tickets[e]);
	/* Sent again after a reconnect, when the first one got through:
	 * uncertain already as exec, and that is the answer. */
	if (SHM_T_WHAT(t) == SHM_TICKET_LIVE && published_at(v, e, &b, &w) &&
	    SHM_W_STATE(w) == SHM_UNCERTAIN &&
	    memcmp(shm_entry_at(v, e)->en_exec, exec, SHM_EXEC_LEN) == 0)
		return 0;
	if (SHM_T_WHAT(t) != owner)
		return CARMY_ENOT_OWNER;
	if (!published_at(v, e, &b, &w) || SHM_W_STATE(w) != SHM_RUNNING ||
	    memcmp(shm_entry_at(v, e)->en_exec, exec, SHM_EXEC_LEN) != 0)
		return CARMY_ENOT_RESERVED;
	if (shm_cas(&v->buckets[b], w, shm_next(w, SHM_UNCERTAIN)) != w)
		return CARMY_ENOT_RESERVED;	/* released meanwhile */
	shm_cas(&v->tickets[e], t, SHM_TICKET_LIVE);
	/* Callers waiting for its store's answer: none will come now. */
	shm_withdraw_pending(v, e, NULL);
	return 0;
}

/* carmyd, for a purge (an operator's, or its retention), under the store
 * lock: forget entry e if it is still COMPLETED as execution exec. The
 * bucket turns TOMB, then the ticket FREE, as in a release; a replay
 * reading it meanwhile sees the word change and looks again. Returns true
 * if it was forgotten. */
bool shm_purge(const struct shm_view *v, uint32_t e, const uint8_t *exec)
{
	uint32_t b;
	uint64_t w;

	if (e >= v->geo.capacity || !published_at(v, e, &b, &w) ||
	    SHM_W_STATE(w) != SHM_COMPLETED ||
	    memcmp(shm_entry_at(v, e)->en_exec, exec, SHM_EXEC_LEN) != 0 ||
	    shm_cas(&v->buckets[b], w, shm_next(w, SHM_TOMB)) != w)
		return false;
	shm_store(&v->tickets[e], SHM_TICKET_FREE);
	(void)shm_add_return(&shm_header(v)->sh_tombs, 1);
	return true;
}

/* carmyd, under the store lock, for retention and purges: is entry e
 * published COMPLETED, finished before before_ns? If so its execution id
 * goes in exec: what shm_purge() and the store are given. A completed
 * entry changes only by a purge, which takes the same lock, so what is
 * read here stands until the lock is let go. */
bool shm_completed_before(const struct shm_view *v, uint32_t e,
			  uint64_t before_ns, uint8_t exec[SHM_EXEC_LEN])
{
	const struct shm_entry *en;
	uint32_t b;
	uint64_t w;

	if (e >= v->geo.capacity || !published_at(v, e, &b, &w) ||
	    SHM_W_STATE(w) != SHM_COMPLETED)
		return false;
	en = shm_entry_at(v, e);
	if (shm_load(&en->en_finished_ns) >= before_ns)
		return false;
	memcpy(exec, en->en_exec, SHM_EXEC_LEN);
	return true;
}

/* The state entry e is published in as execution exec: SHM_RUNNING,
 * SHM_COMPLETED or SHM_UNCERTAIN, or SHM_FREE if it is not published as
 * exec (absent, or another execution's). */
unsigned shm_state_as(const struct shm_view *v, uint32_t e,
		      const uint8_t *exec)
{
	uint32_t b;
	uint64_t w;

	if (e >= v->geo.capacity || !published_at(v, e, &b, &w) ||
	    memcmp(shm_entry_at(v, e)->en_exec, exec, SHM_EXEC_LEN) != 0)
		return SHM_FREE;
	return SHM_W_STATE(w);
}

/* Is entry e published COMPLETED under execution id exec, with exactly
 * this status, code and result? A completion sent twice (again after a
 * reconnect) is then already recorded; anything else is not ours to say. */
bool shm_completed_as(const struct shm_view *v, uint32_t e,
		      const uint8_t *exec, int status, int result_code,
		      const void *data, size_t len)
{
	const struct shm_entry *en;
	uint32_t b;
	uint64_t w;

	if (e >= v->geo.capacity || len > v->geo.max_result ||
	    !published_at(v, e, &b, &w) || SHM_W_STATE(w) != SHM_COMPLETED)
		return false;
	en = shm_entry_at(v, e);
	return memcmp(en->en_exec, exec, SHM_EXEC_LEN) == 0 &&
	       en->en_status == status && en->en_result_code == result_code &&
	       en->en_result_len == len &&
	       (len == 0 || memcmp(shm_result_area(v, e), data, len) == 0);
}

/*
 * A client's look at entry e as execution exec: its state as
 * shm_state_as() gives it (SHM_FREE: not published as exec), and with same
 * (may be NULL) whether it is completed with exactly this status, code
 * and result (shm_completed_as()). Made, as shm_owns() is, under an even,
 * unchanged sh_move_seq: carmyd may move a finished entry meanwhile, and a
 * look between its steps would find it nowhere. Returns the state, or -1
 * when no steady look was had. (Here for the readers it is made of; a
 * client's, not carmyd's, which holds the lock moves are made under.)
 */
int shm_look_as(const struct shm_view *v, uint32_t e, const uint8_t *exec,
		int status, int result_code, const void *data, size_t len,
		bool *same)
{
	const uint32_t *seqp = &shm_header(v)->sh_move_seq;
	unsigned spins = 0;
	uint64_t since = 0;

	for (bool first = true; first || shm_busy_turn(&spins, &since);
	     first = false) {
		uint32_t seq = shm_load(seqp);
		unsigned state;
		bool eq = false;

		if (seq & 1)
			continue;
		shm_rmb();
		state = shm_state_as(v, e, exec);
		if (state == SHM_COMPLETED && same != NULL)
			eq = shm_completed_as(v, e, exec, status, result_code,
					      data, len);
		shm_rmb();
		if (shm_load(seqp) != seq)
			continue;
		if (same != NULL)
			*same = eq;
		return (int)state;
	}
	return -1;
}

/*
 * Was running entry e, of a dead owner, never confirmed by the store
 * (since_ns not 0: a shared store, and carmyd began then)? Its en_pending
 * is not 0 (1 or 2: the store has not answered; 3: being given back) and
 * it was claimed after this carmyd began: carmyd settles en_pending before it
 * tells a client its reservation stands, and keeps an owner registered
 * while a request of its is with the store, so no client ran its tool and
 * the store holds no row of it. Made uncertain, it would stay so here
 * alone, while the store lets another instance run the identity. One
 * claimed earlier may have reached a previous carmyd's store: uncertain,
 * as ever. Both words are the client's own to write: one that writes them
 * harms only its own calls.
 */
static bool unconfirmed(const struct shm_view *v, uint32_t e,
			uint64_t since_ns)
{
	const struct shm_entry *en = shm_entry_at(v, e);

	return since_ns != 0 && shm_load(&en->en_pending) != 0 &&
	       shm_load(&en->en_started_ns) > since_ns;
}

/*
 * Settle ticket e, seen as t, of a dead owner (or one already SWEEPING).
 * The ticket is first moved from the owner's id to SWEEPING with a CAS
 * (keeping the claimer's pid); only then is the bucket looked at. A client
 * publishing concurrently re-reads its ticket after its own CAS, so either
 * we see its bucket or it sees our SWEEPING and withdraws.
 *   published RUNNING  -> UNCERTAIN, ticket LIVE; or, never confirmed by
 *                         a shared store (unconfirmed()), TOMB, ticket FREE
 *   published final    -> ticket LIVE (a completion or sweep that crashed
 *                         half way)
 *   not published      -> FREE if the claimer's process is gone (the tool
 *                         never ran), else ORPHAN until it is
 */
static void sweep_ticket(const struct shm_view *v, uint32_t e, uint64_t t,
			 const struct shm_sweep_ops *ops, uint64_t since_ns,
			 struct shm_sweep_stats *st)
{
	uint64_t sw = shm_ticket(SHM_TICKET_SWEEPING, SHM_T_PID(t));
	uint32_t b;
	uint64_t w;

	bool gone;

	if (SHM_T_WHAT(t) != SHM_TICKET_SWEEPING &&
	    shm_cas(&v->tickets[e], t, sw) != t)
		return;
	/* Ask before looking: "not published, and the process is gone" is
	 * then final, since a dead process cannot publish afterwards. */
	gone = ops->pid_gone(SHM_T_PID(t), ops->arg);
	for (;;) {
		if (!published_at(v, e, &b, &w)) {
			if (gone) {
				shm_store(&v->tickets[e], SHM_TICKET_FREE);
				st->freed++;
			} else {
				shm_store(&v->tickets[e],
					  shm_ticket(SHM_TICKET_ORPHAN,
						     SHM_T_PID(t)));
				st->orphaned++;
			}
			return;
		}
		if (SHM_W_STATE(w) != SHM_RUNNING) {
			shm_store(&v->tickets[e], SHM_TICKET_LIVE);
			st->settled++;
			return;
		}
		if (unconfirmed(v, e, since_ns)) {
			/* Callers waiting for its store's answer look
			 * again, and find the identity free. */
			shm_withdraw_pending(v, e, NULL);
			if (shm_cas(&v->buckets[b], w,
				    shm_next(w, SHM_TOMB)) != w)
				continue;
			shm_store(&v->tickets[e], SHM_TICKET_FREE);
			(void)shm_add_return(&shm_header(v)->sh_tombs, 1);
			st->given_back++;
			return;
		}
		/* The owner's release may race this CAS; then look again. */
		if (shm_cas(&v->buckets[b], w, shm_next(w, SHM_UNCERTAIN)) == w) {
			shm_store(&v->tickets[e], SHM_TICKET_LIVE);
			/* Callers waiting for its store's answer: there will
			 * be none to wait for now. */
			shm_withdraw_pending(v, e, NULL);
			st->uncertain++;
			return;
		}
	}
}

/*
 * carmyd, at start-up with a shared store, once the store's executions of
 * this instance are loaded: entry e, whose execution the store does not
 * hold. If it is published RUNNING or UNCERTAIN with en_pending not 0, its
 * reservation was never confirmed (a sweep leaves en_pending as it found
 * it: 3 if it was pending), so no client ran its tool, and the store's
 * withholding it is final: the previous carmyd's session is gone. Give it
 * back (TOMB, ticket FREE), as the store lets any instance run the
 * identity. Its client, if it comes back, finds it gone and looks again.
 * Returns true if it was given back.
 */
bool shm_give_back_unrecorded(const struct shm_view *v, uint32_t e)
{
	return give_back(v, e, NULL);
}

/*
 * carmyd, at start-up with a shared store: entry e, published RUNNING or
 * UNCERTAIN as execution exec, whose reservation the store has just
 * released (no client was told it stands). Give it back (TOMB, ticket
 * FREE), whatever its en_pending. Returns true if it was given back.
 */
bool shm_give_back_as(const struct shm_view *v, uint32_t e,
		      const uint8_t *exec)
{
	return give_back(v, e, exec);
}

/* Both of the above: exec NULL for an entry with en_pending not 0. */
static bool give_back(const struct shm_view *v, uint32_t e,
		      const uint8_t *exec)
{
	uint32_t b;
	uint64_t w;

	if (e >= v->geo.capacity)
		return false;
	for (;;) {
		const struct shm_entry *en = shm_entry_at(v, e);
		unsigned st;

		if (!published_at(v, e, &b, &w))
			return false;
		st = SHM_W_STATE(w);
		if ((st != SHM_RUNNING && st != SHM_UNCERTAIN) ||
		    (exec == NULL && shm_load(&en->en_pending) == 0) ||
		    (exec != NULL &&
		     memcmp(en->en_exec, exec, SHM_EXEC_LEN) != 0))
			return false;
		shm_withdraw_pending(v, e, NULL);
		if (shm_cas(&v->buckets[b], w, shm_next(w, SHM_TOMB)) == w)
			break;
	}
	shm_store(&v->tickets[e], SHM_TICKET_FREE);
	(void)shm_add_return(&shm_header(v)->sh_tombs, 1);
	return true;
}

/*
 * Sweep every ticket held by an owner that ops declares dead, settle
 * tickets a crashed carmyd left SWEEPING (carmyd sweeps from one thread, so
 * any SWEEPING seen here is such a leftover), and free ORPHANs whose
 * process is gone.
 */
void shm_sweep(const struct shm_view *v, const struct shm_sweep_ops *ops,
	       struct shm_sweep_stats *st)
{
	shm_sweep_since(v, ops, 0, st);
}

/* shm_sweep(), for a shared store: a running entry it never confirmed,
 * claimed after unconfirmed_since_ns (CLOCK_REALTIME, when carmyd began),
 * is given back rather than made uncertain (unconfirmed()). */
void shm_sweep_since(const struct shm_view *v, const struct shm_sweep_ops *ops,
		     uint64_t unconfirmed_since_ns, struct shm_sweep_stats *st)
{
	shm_sweep_range(v, ops, unconfirmed_since_ns, 0, v->geo.capacity, st);
}

/* shm_sweep_since() of the tickets [from, to) only: carmyd's ticks sweep
 * the table a slice at a time. */
void shm_sweep_range(const struct shm_view *v, const struct shm_sweep_ops *ops,
		     uint64_t unconfirmed_since_ns, uint32_t from, uint32_t to,
		     struct shm_sweep_stats *st)
{
	if (to > v->geo.capacity)
		to = v->geo.capacity;
	for (uint32_t e = from; e < to; e++) {
		uint64_t t = shm_load(&v->tickets[e]);
		uint32_t what = SHM_T_WHAT(t);

		if (what == SHM_TICKET_SWEEPING ||
		    (what >= SHM_OWNER_MIN && ops->owner_dead(what, ops->arg)))
			sweep_ticket(v, e, t, ops, unconfirmed_since_ns, st);
		else if (what == SHM_TICKET_ORPHAN &&
			 ops->pid_gone(SHM_T_PID(t), ops->arg))
			settle_orphan(v, e, t, st);
	}
}

/*
 * The process behind an ORPHAN claim is gone. It may have published its
 * bucket after the sweep and died (or lost to a move) before withdrawing
 * it: that claimer saw its ticket changed after publishing, so it never
 * answered RESERVED and its tool never ran. Withdraw the bucket for it
 * (TOMB), then free the ticket.
 */
static void settle_orphan(const struct shm_view *v, uint32_t e, uint64_t t,
			  struct shm_sweep_stats *st)
{
	uint64_t sw = shm_ticket(SHM_TICKET_SWEEPING, SHM_T_PID(t));
	uint32_t b;
	uint64_t w;

	if (shm_cas(&v->tickets[e], t, sw) != t)
		return;
	for (;;) {
		if (published_at(v, e, &b, &w) && SHM_W_STATE(w) != SHM_RUNNING) {
			shm_store(&v->tickets[e], SHM_TICKET_LIVE);	/* keep it */
			st->settled++;
			return;
		}
		if (!published_at(v, e, &b, &w) ||
		    shm_cas(&v->buckets[b], w, shm_next(w, SHM_TOMB)) == w) {
			shm_store(&v->tickets[e], SHM_TICKET_FREE);
			st->freed++;
			return;
		}
	}
}

/*
 * Turn tombstones back into FREE buckets. A TOMB may become FREE when no
 * live entry's probe path crosses it (the path of an entry runs from its
 * home bucket up to the bucket it sits in): then no lookup needs to step
 * over it. Inserters in flight whose probe crosses a tombstone all aim at
 * the first FREE bucket after it, the end of its cluster, so that bucket is
 * held BLOCKED (its version bumped) while the cluster's tombstones are
 * freed: their CAS fails and they probe again.
 *
 * A cluster is walked backwards, remembering the lowest home of the live
 * entries after the current bucket; a TOMB below that lowest home is
 * crossed by nobody. An entry whose home cannot be computed (scribbled
 * identity) counts as crossing its whole cluster. Before that, a cluster
 * that holds a tombstone is compacted (compact()). Returns the number
 * freed.
 *
 * Without a tombstone there is nothing to move or free, and the index is
 * only looked at (shm_any_tomb()). With one, the whole ring is walked:
 * tens of milliseconds for millions of buckets, which carmyd's event loop
 * spends only when a client asks (RECLAIM: its probe found no room); its
 * ticks walk a stretch at a time (shm_reclaim_some()).
 */
uint32_t shm_reclaim(struct shm_view *v)
{
	uint32_t cursor = 0, walked;

	if (!shm_any_tomb(v, 0, v->geo.nbuckets))
		return 0;
	return shm_reclaim_some(v, &cursor, v->geo.nbuckets, &walked);
}

/*
 * shm_reclaim() of a stretch of the ring: from the last FREE bucket at or
 * before *cursor, cluster by cluster, until budget buckets or more were
 * walked (whole clusters: a cluster is never left half done) or the whole
 * ring was. *cursor is left at the FREE bucket that ended the last cluster
 * walked, where the next call goes on, and *walked says how far past the
 * old cursor that is (the whole ring: nbuckets). A cluster is what lies
 * between two FREE buckets at the time of the walk, so each stretch is
 * reclaimed as the whole ring would be: inserters aim at the FREE bucket
 * after the cluster, and entries' paths never leave theirs. Returns the
 * number freed.
 */
uint32_t shm_reclaim_some(struct shm_view *v, uint32_t *cursor,
			  uint32_t budget, uint32_t *walked)
{
	const uint32_t n = v->geo.nbuckets, mask = n - 1;
	const uint32_t start = *cursor & mask;
	uint32_t z, i, back, seen, freed = 0;

	/* Start just after a FREE bucket at or before the cursor: an insert
	 * may have taken the FREE bucket the last stretch ended at since,
	 * joining its cluster to the next one, which a start at the next FREE
	 * bucket would skip. */
	for (int tries = 0;; tries++) {
		for (back = 0; back < n; back++)
			if (SHM_W_STATE(shm_load(
				    &v->buckets[(start - back) & mask])) ==
			    SHM_FREE)
				break;
		if (back < n)
			break;
		/* No FREE bucket: the ring is one cluster, compacted whole
		 * (where it starts is unknown), then one tombstone freed the
		 * slow way gives the walk its start, and the walk the rest;
		 * three tries, should clients take each one first. Else
		 * every tombstone is crossed. */
		if (tries == 3) {
			*walked = n;
			return freed;
		}
		compact(v, 0, n, true);
		if (reclaim_without_free(v) == 0) {
			*walked = n;
			return freed;
		}
		freed++;
	}
	z = (start - back) & mask;

	/* Whole clusters from z, at least one (it reaches past the cursor:
	 * only carmyd frees a bucket), at most once round the ring. */
	i = (z + 1) & mask;
	seen = 1;
	do {
		uint32_t s = i;
		bool tombs = false;
		unsigned st;

		while (seen < n &&
		       (st = SHM_W_STATE(shm_load(&v->buckets[i]))) !=
			       SHM_FREE) {
			tombs |= st == SHM_TOMB;
			i = (i + 1) & mask;
			seen++;
		}
		if (tombs) {
			compact(v, s, (i - s) & mask, false);
			freed += reclaim_cluster(v, s, i);
		}
		*cursor = i;
		i = (i + 1) & mask;
		seen++;
	} while (seen < n && seen < budget);
	/* How far the cursor went on: what the call walked first. */
	*walked = seen >= n ? n : (*cursor - start) & mask;
	return freed;
}

/* Free the uncrossed tombstones of the cluster [s, f); f is FREE. */
static uint32_t reclaim_cluster(struct shm_view *v, uint32_t s, uint32_t f)
{
	const uint32_t mask = v->geo.nbuckets - 1;
	const uint32_t len = (f - s) & mask;
	uint64_t wf = shm_load(&v->buckets[f]), blocked;
	uint32_t lowest = UINT32_MAX, freed = 0;

	if (SHM_W_STATE(wf) != SHM_FREE)
		return 0;	/* taken meanwhile: next time */
	blocked = shm_next(wf, SHM_BLOCKED);
	if (shm_cas(&v->buckets[f], wf, blocked) != wf)
		return 0;
	seq_open(v);
	for (uint32_t k = len; k-- > 0;) {
		uint32_t b = (s + k) & mask, home;
		uint64_t w = shm_load(&v->buckets[b]);
		unsigned st = SHM_W_STATE(w);

		if (st == SHM_TOMB) {
			if (lowest > k &&
			    shm_cas(&v->buckets[b], w,
					    shm_next(w, SHM_FREE)) == w)
				freed++;
		} else if (st == SHM_RUNNING || st == SHM_COMPLETED ||
			   st == SHM_UNCERTAIN) {
			uint32_t rel = 0;	/* unknown home: crosses all */

			if (shm_entry_home(v, w, &home) &&
			    ((home - s) & mask) <= k)
				rel = (home - s) & mask;
			if (rel < lowest)
				lowest = rel;
		}
	}
	seq_close(v);
	shm_store(&v->buckets[f], shm_next(blocked, SHM_FREE));
	return freed;
}

/*
 * Every bucket is live or a tombstone, so no insert can be in flight (there
 * is nowhere to publish). Free one tombstone that no live entry's path
 * crosses; with a FREE bucket back in the ring, the walk of
 * shm_reclaim_some() does the rest the usual way. Worst case O(n x live),
 * only in this corner.
 */
static uint32_t reclaim_without_free(struct shm_view *v)
{
	const uint32_t n = v->geo.nbuckets, mask = n - 1;
	uint32_t freed = 0;

	seq_open(v);

	for (uint32_t t = 0; t < n; t++) {
		uint64_t wt = shm_load(&v->buckets[t]);
		bool crossed = false;

		if (SHM_W_STATE(wt) != SHM_TOMB)
			continue;
		for (uint32_t p = 0; p < n && !crossed; p++) {
			uint64_t w = shm_load(&v->buckets[p]);
			unsigned st = SHM_W_STATE(w);
			uint32_t home;

			if (st != SHM_RUNNING && st != SHM_COMPLETED &&
			    st != SHM_UNCERTAIN)
				continue;
			if (!shm_entry_home(v, w, &home))
				crossed = true;
			else	/* t lies in [home, p) around the ring */
				crossed = p != t &&
					  ((t - home) & mask) < ((p - home) & mask);
		}
		if (!crossed &&
		    shm_cas(&v->buckets[t], wt, shm_next(wt, SHM_FREE)) == wt) {
			freed = 1;
			break;
		}
	}
	seq_close(v);
	return freed;
}

/*
 * Move live entries to the earliest tombstone on their own probe path, so
 * that the tombstones they used to cross can be reclaimed: without this,
 * churn could leave tombstones that permanent (or long-running) entries
 * cross, and the index would fill while tickets are free. Only the bucket
 * moves; the entry record stays where it is, and clients find a RUNNING
 * entry's bucket through en_bucket.
 *
 * A move is: the TOMB takes the entry's word (two buckets name it for a
 * moment, both correct answers), en_bucket follows, the old bucket turns
 * TOMB. A probe that overlaps this could step over both places, so moves
 * happen under an odd sh_move_seq, and a client re-checks the sequence
 * before it trusts an "absent" verdict (see shm_reserve). The sequence is
 * odd for one move at a time, never while we scan, so clients never wait
 * long. If the owner of a RUNNING entry releases it through the old bucket
 * mid-move, the old bucket's CAS fails and the new copy is dropped.
 *
 * The scan is one pass over the len bucket words from from: a cluster
 * that holds a tombstone (without one nothing can move), just before
 * reclaim_cluster() frees what it can of it, or the whole ring when no
 * bucket is FREE. tomb_before says whether a tombstone may lie before
 * from in its cluster (true where from may be mid-cluster). An entry's
 * home is in its own cluster (no FREE bucket lies between home and entry:
 * reclaim frees only tombstones nobody's path crosses), so an entry with
 * no TOMB before it in its cluster has nowhere to go, and its home, which
 * costs a hash of its identity and a read of its entry record, is not
 * computed.
 */
static void compact(struct shm_view *v, uint32_t from, uint32_t len,
		    bool tomb_before)
{
	const uint32_t mask = v->geo.nbuckets - 1;

	for (uint32_t k = 0; k < len; k++) {
		const uint32_t p = (from + k) & mask;
		uint64_t w = shm_load(&v->buckets[p]), wt = 0, nw;
		unsigned st = SHM_W_STATE(w);
		uint32_t home, t, e = SHM_W_ENTRY(w);

		if (st == SHM_FREE || st == SHM_BLOCKED) {
			tomb_before = false;
			continue;
		}
		if (st == SHM_TOMB) {
			tomb_before = true;
			continue;
		}
		if ((st != SHM_RUNNING && st != SHM_COMPLETED &&
		     st != SHM_UNCERTAIN) || !tomb_before ||
		    !shm_entry_home(v, w, &home) || home == p)
			continue;
		for (t = home; t != p; t = (t + 1) & mask) {
			wt = shm_load(&v->buckets[t]);
			if (SHM_W_STATE(wt) == SHM_TOMB || SHM_W_STATE(wt) == SHM_FREE)
				break;
		}
		if (t == p || SHM_W_STATE(wt) != SHM_TOMB)
			continue;	/* nowhere earlier to go (or scribbled) */
		seq_open(v);
		nw = shm_word(st, SHM_W_VER(wt) + 1, SHM_W_TAG(w), e);
		if (shm_cas(&v->buckets[t], wt, nw) != wt) {
			seq_close(v);
			continue;
		}
		/* en_bucket moves only if it still names p: if the owner
		 * released meanwhile and the ticket went to a new claimer,
		 * en_bucket is the new entry's, and must not be touched. */
		if (shm_cas(&shm_entry_at(v, e)->en_bucket, p, t) != p ||
		    shm_cas(&v->buckets[p], w, shm_next(w, SHM_TOMB)) != w) {
			/* Released through p meanwhile: drop the copy; the
			 * release stands. */
			shm_cas(&shm_entry_at(v, e)->en_bucket, t, p);
			shm_cas(&v->buckets[t], nw, shm_next(nw, SHM_TOMB));
		}
		seq_close(v);
	}
}

/* Is any bucket FREE? Stops at the first. */
bool shm_any_free(const struct shm_view *v)
{
	for (uint32_t p = 0; p < v->geo.nbuckets; p++)
		if (SHM_W_STATE(shm_load(&v->buckets[p])) == SHM_FREE)
			return true;
	return false;
}

/*
 * Is any bucket of [from, to) a tombstone? A pass over the bucket words with
 * no branch on what each holds, so that it runs as fast as they can be read
 * (the walks of shm_reclaim() branch on states as random as a half-full
 * index makes them), stopping at the end of the first stretch that has
 * one. A tombstone made behind the pass is left for a later reclaim: the
 * next tick's where its maker counted it in sh_tombs, else the next pass
 * of carmyd's ticks over the index.
 */
bool shm_any_tomb(const struct shm_view *v, uint32_t from, uint32_t to)
{
	const uint32_t stretch = 4096;
	unsigned tombs = 0;

	if (to > v->geo.nbuckets)
		to = v->geo.nbuckets;
	for (uint32_t p = from; p < to && tombs == 0;) {
		uint32_t end = to - p > stretch ? p + stretch : to;

		for (; p < end; p++)
			tombs |= SHM_W_STATE(shm_load(&v->buckets[p])) ==
				 SHM_TOMB;
	}
	return tombs != 0;
}

/*
 * sh_move_seq is carmyd's: it keeps the value privately and only ever
 * stores it, so a client that scribbles on it cannot flip its parity for
 * long (store_check puts it back). Odd while buckets are being moved or
 * freed; the full barriers order it around those changes, so a client that
 * read it even and unchanged before and after its probe saw none of them.
 */
static void seq_open(struct shm_view *v)
{
	v->move_seq |= 1;	/* odd */
	shm_store(&shm_header(v)->sh_move_seq, v->move_seq);
	shm_mb();
}

static void seq_close(struct shm_view *v)
{
	shm_mb();
	v->move_seq = (v->move_seq | 1) + 1;	/* the next even */
	shm_store(&shm_header(v)->sh_move_seq, v->move_seq);
}

/*
 * At start-up, after a carmyd crash: finish or undo a move it was in the
 * middle of (a live entry named by two buckets keeps the one its en_bucket
 * names), and make the move sequence even again.
 */
void shm_repair_moves(struct shm_view *v)
{
	uint32_t *seq = &shm_header(v)->sh_move_seq;

	for (uint32_t b = 0; b < v->geo.nbuckets; b++) {
		uint64_t w = shm_load(&v->buckets[b]), wo;
		unsigned st = SHM_W_STATE(w);
		uint32_t e = SHM_W_ENTRY(w), other;

		if ((st != SHM_RUNNING && st != SHM_COMPLETED &&
		     st != SHM_UNCERTAIN) || e >= v->geo.capacity)
			continue;
		other = shm_load(&shm_entry_at(v, e)->en_bucket);
		if (other == b || other >= v->geo.nbuckets)
			continue;
		wo = shm_load(&v->buckets[other]);
		if (SHM_W_STATE(wo) == st && SHM_W_ENTRY(wo) == e)
			shm_cas(&v->buckets[b], w, shm_next(w, SHM_TOMB));
	}
	/* A RUNNING bucket whose ticket is free was a copy dropped too late,
	 * or a claim withdrawn too late: nobody holds it. */
	for (uint32_t b = 0; b < v->geo.nbuckets; b++) {
		uint64_t w = shm_load(&v->buckets[b]);
		uint32_t e = SHM_W_ENTRY(w);

		if (SHM_W_STATE(w) == SHM_RUNNING && e < v->geo.capacity &&
		    shm_load(&v->tickets[e]) == SHM_TICKET_FREE)
			shm_cas(&v->buckets[b], w, shm_next(w, SHM_TOMB));
	}
	/* Start our private copy past whatever the header says, even. */
	v->move_seq = (shm_load(seq) | 1) + 1;
	shm_store(seq, v->move_seq);
}

/*
 * Entry e's identity, copied once into id (the key's parts point into it),
 * as key k under the segment's seed. 0, or -EINVAL if e is out of the
 * table or its lengths are not an identity's (a free or scribbled entry).
 */
int shm_entry_key(const struct shm_view *v, uint32_t e,
		  uint8_t id[3 * CARMY_ID_MAX], struct shm_key *k)
{
	const struct shm_entry *en;
	size_t len[3], total = 0;

	if (e >= v->geo.capacity)
		return -EINVAL;
	en = shm_entry_at(v, e);
	for (int i = 0; i < 3; i++) {
		len[i] = shm_load(&en->en_len[i]);
		if (len[i] == 0 || len[i] > CARMY_ID_MAX)
			return -EINVAL;
		total += len[i];
	}
	memcpy(id, en->en_ident, total);	/* one snapshot, then hash it */
	return shm_key_init(k, v->seed, id, len[0], id + len[0], len[1],
			    id + len[0] + len[1], len[2]);
}

/*
 * The home bucket of the live entry a bucket word names, recomputed from
 * the entry's identity with the segment's seed. False if the entry index,
 * the lengths or the tag do not agree with the word (a scribbled entry):
 * the caller must then assume the worst.
 */
bool shm_entry_home(const struct shm_view *v, uint64_t w, uint32_t *home)
{
	uint8_t id[3 * CARMY_ID_MAX];
	struct shm_key k;

	if (shm_entry_key(v, SHM_W_ENTRY(w), id, &k) != 0 ||
	    ((uint32_t)(k.hash >> 40) & 0xffffff) != SHM_W_TAG(w))
		return false;
	*home = (uint32_t)k.hash & (v->geo.nbuckets - 1);
	return true;
}

/* At start-up: release any bucket a crashed carmyd left BLOCKED. */
void shm_unblock_all(const struct shm_view *v)
{
	for (uint32_t i = 0; i < v->geo.nbuckets; i++) {
		uint64_t w = shm_load(&v->buckets[i]);

		if (SHM_W_STATE(w) == SHM_BLOCKED)
			shm_cas(&v->buckets[i], w, shm_next(w, SHM_FREE));
	}
}

/*
 * While carmyd runs, between its reclaims (under the lock they take): no
 * bucket is BLOCKED by carmyd, and no bucket is ever in a state above
 * BLOCKED, so any such word is a client's write. A BLOCKED one makes every
 * probe that meets it start over until it gives up busy; one in no state
 * is stepped over as a tombstone is, but no reclaim frees it. Each turns
 * into a TOMB (version bumped): what it stood for before is unknown, and a
 * TOMB is safe whatever it was, since probes step over it as over a live
 * bucket, and reclaim frees it only where no live entry's probe crosses it.
 * Counts them into sh_tombs for the next reclaim. Returns how many.
 */
uint32_t shm_unblock_scribbled(const struct shm_view *v)
{
	return shm_unblock_scribbled_range(v, 0, v->geo.nbuckets, NULL);
}

/* Turn the scribbled words of [from, to) into tombstones; how many. */
static uint32_t unblock_stretch(const struct shm_view *v, uint32_t from,
				uint32_t to)
{
	uint32_t n = 0;

	for (uint32_t i = from; i < to; i++) {
		uint64_t w = shm_load(&v->buckets[i]);

		if (SHM_W_STATE(w) >= SHM_BLOCKED &&
		    shm_cas(&v->buckets[i], w, shm_next(w, SHM_TOMB)) == w)
			n++;
	}
	return n;
}

/*
 * shm_unblock_scribbled() of the buckets [from, to) only, and, if tomb is
 * not NULL, whether any of them is a tombstone (one made here included):
 * carmyd's ticks ask both of each slice. The words are read a stretch at
 * a time (counted from from) with no branch on what each holds, as
 * shm_any_tomb() reads them; only a stretch with a scribbled word in it
 * is read again, to turn that word.
 */
uint32_t shm_unblock_scribbled_range(const struct shm_view *v, uint32_t from,
				     uint32_t to, bool *tomb)
{
	const uint32_t stretch = 4096;
	unsigned tombs = 0;
	uint32_t n = 0;

	if (to > v->geo.nbuckets)
		to = v->geo.nbuckets;
	for (uint32_t p = from; p < to;) {
		uint32_t start = p, end = to - p > stretch ? p + stretch : to;
		unsigned odd = 0;

		for (; p < end; p++) {
			unsigned st = SHM_W_STATE(shm_load(&v->buckets[p]));

			odd |= st >= SHM_BLOCKED;
			tombs |= st == SHM_TOMB;
		}
		if (odd)
			n += unblock_stretch(v, start, end);
	}
	if (n != 0)
		(void)shm_add_return(&shm_header(v)->sh_tombs, n);
	if (tomb != NULL)
		*tomb = tombs != 0 || n != 0;
	return n;
}

/* Where is entry e published? Reads en_bucket once, bounds-checks it, and
 * accepts it only if that bucket names e in a published state. */
static bool published_at(const struct shm_view *v, uint32_t e, uint32_t *b,
			 uint64_t *w)
{
	uint32_t bb = shm_load(&shm_entry_at(v, e)->en_bucket);
	uint64_t ww;
	unsigned st;

	if (bb >= v->geo.nbuckets)
		return false;
	ww = shm_load(&v->buckets[bb]);
	st = SHM_W_STATE(ww);
	if ((st != SHM_RUNNING && st != SHM_COMPLETED && st != SHM_UNCERTAIN) ||
	    SHM_W_ENTRY(ww) != e)
		return false;
	*b = bb;
	*w = ww;
	return true;
}
