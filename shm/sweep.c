/*
 * sweep.c - the table operations only carmyd performs: recording a result,
 * turning a dead owner's entries uncertain, and reclaiming tombstones.
 *
 * carmyd performs them from one thread, so they never race each other; they
 * race only with clients, and every step that a client could also take is a
 * CAS. Indexes read from the segment (en_bucket) are bounds-checked against
 * carmyd's private geometry before use.
 */
#include <string.h>

#include <urcu/arch.h>
#include <urcu/uatomic.h>

#include "shm/shm.h"

static bool published_at(const struct shm_view *v, uint32_t e, uint32_t *b,
			 uint64_t *w);

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

	if (e >= v->geo.capacity || len > v->geo.max_result)
		return CARMY_ENOT_RESERVED;
	if (uatomic_read(&v->tickets[e]) != owner)
		return CARMY_ENOT_OWNER;
	if (!published_at(v, e, &b, &w) || SHM_W_STATE(w) != SHM_RUNNING)
		return CARMY_ENOT_RESERVED;
	en = shm_entry_at(v, e);
	if (memcmp(en->en_exec, exec, SHM_EXEC_LEN) != 0)
		return CARMY_ENOT_RESERVED;

	memcpy(shm_result_area(v, e), data, len);
	en->en_result_len = (uint32_t)len;
	en->en_result_code = result_code;
	en->en_status = (uint8_t)status;
	en->en_finished_ns = now_ns;
	if (uatomic_cmpxchg(&v->buckets[b], w, shm_next(w, SHM_COMPLETED)) != w)
		return CARMY_ENOT_RESERVED;	/* released meanwhile */
	uatomic_cmpxchg(&v->tickets[e], owner, SHM_TICKET_LIVE);
	return 0;
}

/*
 * Settle ticket e of a dead owner (or one already SWEEPING). The ticket is first moved from the
 * owner's id to SWEEPING with a CAS; only then is the bucket looked at. A
 * client publishing concurrently re-reads its ticket after its own CAS, so
 * either we see its bucket or it sees our SWEEPING and withdraws.
 *   published RUNNING        -> UNCERTAIN, ticket LIVE
 *   published final          -> ticket LIVE (a completion or sweep that
 *                               crashed half way)
 *   not published, withdrawn -> ticket FREE (the tool never ran)
 */
void shm_sweep_ticket(const struct shm_view *v, uint32_t e, uint32_t owner,
		      struct shm_sweep_stats *st)
{
	uint32_t b;
	uint64_t w;

	if (e >= v->geo.capacity)
		return;
	if (owner != SHM_TICKET_SWEEPING &&
	    uatomic_cmpxchg(&v->tickets[e], owner, SHM_TICKET_SWEEPING) != owner)
		return;
	for (;;) {
		if (!published_at(v, e, &b, &w)) {
			uatomic_set(&v->tickets[e], SHM_TICKET_FREE);
			st->freed++;
			return;
		}
		if (SHM_W_STATE(w) != SHM_RUNNING) {
			uatomic_set(&v->tickets[e], SHM_TICKET_LIVE);
			st->settled++;
			return;
		}
		/* The owner's release may race this CAS; then look again. */
		if (uatomic_cmpxchg(&v->buckets[b], w,
				    shm_next(w, SHM_UNCERTAIN)) == w) {
			uatomic_set(&v->tickets[e], SHM_TICKET_LIVE);
			st->uncertain++;
			return;
		}
	}
}

/*
 * Sweep every ticket held by an owner that dead() declares dead, and settle
 * tickets a crashed carmyd left SWEEPING.
 */
void shm_sweep(const struct shm_view *v, bool (*dead)(uint32_t owner, void *),
	       void *arg, struct shm_sweep_stats *st)
{
	for (uint32_t e = 0; e < v->geo.capacity; e++) {
		uint32_t t = uatomic_read(&v->tickets[e]);

		/* SWEEPING here was left by a carmyd that died mid-sweep
		 * (carmyd sweeps from one thread): finish that sweep. */
		if (t == SHM_TICKET_SWEEPING)
			shm_sweep_ticket(v, e, t, st);
		else if (t >= SHM_OWNER_MIN && dead(t, arg)) {
			shm_sweep_ticket(v, e, t, st);
		}
	}
}

/*
 * Turn tombstones back into FREE buckets where that cannot break a probe:
 * a TOMB whose next bucket is FREE ends every probe that reaches it anyway.
 * The next bucket is held BLOCKED (version bumped) while the TOMB turns
 * FREE, so a client that saw the old FREE word fails its CAS and probes
 * again from the start. Walking backwards lets a run of tombstones collapse
 * in one pass. Returns the number reclaimed.
 */
uint32_t shm_reclaim(const struct shm_view *v)
{
	const uint32_t mask = v->geo.nbuckets - 1;
	uint32_t n = 0;

	for (uint32_t i = v->geo.nbuckets; i-- > 0;) {
		uint32_t nx = (i + 1) & mask;
		uint64_t w = uatomic_read(&v->buckets[i]);
		uint64_t wn, blocked;

		if (SHM_W_STATE(w) != SHM_TOMB)
			continue;
		wn = uatomic_read(&v->buckets[nx]);
		if (SHM_W_STATE(wn) != SHM_FREE)
			continue;
		blocked = shm_next(wn, SHM_BLOCKED);
		if (uatomic_cmpxchg(&v->buckets[nx], wn, blocked) != wn)
			continue;
		if (uatomic_cmpxchg(&v->buckets[i], w, shm_next(w, SHM_FREE)) == w)
			n++;
		uatomic_set(&v->buckets[nx], shm_next(blocked, SHM_FREE));
	}
	return n;
}

/* At start-up: release any bucket a crashed carmyd left BLOCKED. */
void shm_unblock_all(const struct shm_view *v)
{
	for (uint32_t i = 0; i < v->geo.nbuckets; i++) {
		uint64_t w = uatomic_read(&v->buckets[i]);

		if (SHM_W_STATE(w) == SHM_BLOCKED)
			uatomic_cmpxchg(&v->buckets[i], w, shm_next(w, SHM_FREE));
	}
}

/* Where is entry e published? Reads en_bucket once, bounds-checks it, and
 * accepts it only if that bucket names e in a published state. */
static bool published_at(const struct shm_view *v, uint32_t e, uint32_t *b,
			 uint64_t *w)
{
	uint32_t bb = CMM_LOAD_SHARED(shm_entry_at(v, e)->en_bucket);
	uint64_t ww;
	unsigned st;

	if (bb >= v->geo.nbuckets)
		return false;
	ww = uatomic_read(&v->buckets[bb]);
	st = SHM_W_STATE(ww);
	if ((st != SHM_RUNNING && st != SHM_COMPLETED && st != SHM_UNCERTAIN) ||
	    SHM_W_ENTRY(ww) != e)
		return false;
	*b = bb;
	*w = ww;
	return true;
}
