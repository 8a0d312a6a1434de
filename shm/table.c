/*
 * table.c - the lock-free reservation table, client side: reserve, look up,
 * replay and release, all directly in shared memory, without a system call.
 *
 * Memory ordering. liburcu's shm_cas() is a full barrier. A
 * reserving client fills its entry with plain stores, then publishes the
 * bucket with shm_cas(): every field of the entry is visible before
 * the bucket names it. A reader loads the bucket word, issues shm_rmb()
 * (so its entry loads cannot pass the word load), reads the entry, issues
 * shm_rmb() again and re-reads the word: if the word changed, what it
 * read may be torn and it looks again. carmyd completes the same way (result
 * first, then the COMPLETED word), so a replay never sees a partial result.
 *
 * Nothing read from the segment is trusted: entry indexes are bounds-checked
 * against the private geometry and lengths are clamped, so a scribbled
 * segment can make a lookup miss or fail, never read out of bounds.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "shm/atomic.h"
#include "shm/shm.h"

static uint32_t ticket_claim(const struct shm_view *v,
			     const struct shm_claim *c);
static void entry_fill(const struct shm_view *v, uint32_t e,
		       const struct shm_key *k, const struct shm_claim *c);
static bool entry_matches(const struct shm_view *v, uint32_t e, uint32_t b,
			  const struct shm_key *k);
static void result_fill(const struct shm_view *v, uint32_t e,
			const struct shm_restored *r, size_t len);

static bool pending_word(uint32_t p);

/* A claim that says nothing of its call. */
static const struct shm_summary no_call;

/* One part of the identity's hashed form: its length, 2 bytes big-endian,
 * then its bytes. Returns where the next part goes. */
static inline uint8_t *key_part(uint8_t *p, const void *part, size_t len)
{
	p[0] = (uint8_t)(len >> 8);
	p[1] = (uint8_t)len;
	memcpy(p + 2, part, len);
	return p + 2 + len;
}

static inline uint32_t key_tag(const struct shm_key *k)
{
	return (uint32_t)(k->hash >> 40);
}

/* ---------------------------------------------------------------- API */

/*
 * Check an identity and hash it. Each part must be 1..CARMY_ID_MAX bytes.
 * The parts are hashed length-delimited, so ("ab","c") and ("a","bc") are
 * different identities. Returns 0 or CARMY_EINVALID_ID.
 */
int shm_key_init(struct shm_key *k, uint64_t seed, const void *principal,
		 size_t plen, const void *session, size_t slen,
		 const void *request_id, size_t rlen)
{
	uint8_t buf[3 * (2 + CARMY_ID_MAX)], *p = buf;

	/* Straight-line, not a loop over the parts: every begin() runs it. */
	if (!principal || !session || !request_id || plen - 1 >= CARMY_ID_MAX ||
	    slen - 1 >= CARMY_ID_MAX || rlen - 1 >= CARMY_ID_MAX)
		return CARMY_EINVALID_ID;	/* (0 - 1 wraps: empty fails) */
	k->part[0] = principal;
	k->part[1] = session;
	k->part[2] = request_id;
	k->len[0] = (uint16_t)plen;
	k->len[1] = (uint16_t)slen;
	k->len[2] = (uint16_t)rlen;
	p = key_part(p, principal, plen);
	p = key_part(p, session, slen);
	p = key_part(p, request_id, rlen);
	k->hash = XXH3_64bits_withSeed(buf, (size_t)(p - buf), seed);
	return 0;
}

/*
 * Reserve k, or find the entry that already holds it.
 *
 * Probing is linear from the key's home bucket. A FREE bucket ends the
 * probe: the identity is absent, and this is where it goes. Buckets only
 * leave FREE by a CAS, and carmyd turns a TOMB back into FREE only while the
 * bucket after it is BLOCKED (its version bumped), so if our CAS on the
 * first FREE bucket succeeds, no bucket earlier in the probe can have taken
 * the same identity meanwhile: a second inserter either loses the CAS or
 * sees ours.
 *
 * carmyd also moves finished entries to earlier buckets of their probe
 * (compaction), under an odd sh_move_seq: a probe that overlapped a move
 * may have stepped over both places, so before trusting "absent" (to
 * publish, or to report the index full) the sequence is read again; a move
 * that starts later cannot hide an entry the probe has already missed,
 * since moves never create one.
 *
 * The ticket is taken lazily, only once the identity is known to be absent,
 * so replays and conflicts touch no ticket. After publishing, the ticket is
 * read again: if carmyd has meanwhile swept our owner id (we were declared
 * disconnected), we withdraw the bucket and report SHM_OUT_DEAD. carmyd
 * moves the ticket away from our id with a CAS before it looks at our
 * bucket, and both CASes are full barriers, so one of the two always sees
 * the other.
 */
enum shm_outcome shm_reserve(const struct shm_view *v, const struct shm_key *k,
			     const struct shm_claim *c, struct shm_found *out)
{
	const uint32_t mask = v->geo.nbuckets - 1;
	const uint32_t tag = key_tag(k) & 0xffffff;
	uint32_t *move_seq = &shm_header(v)->sh_move_seq;
	const uint64_t held = shm_ticket(c->owner, c->pid);
	uint32_t ticket = UINT32_MAX, seq;
	unsigned spins = 0;
	uint64_t since = 0;

restart:
	/* carmyd may be moving finished entries: a probe that overlaps a
	 * move could miss one, so an "absent" verdict stands only if the
	 * sequence is even and unchanged from start to finish. */
	seq = shm_load(move_seq);
	if (seq & 1) {
		if (!shm_busy_turn(&spins, &since) ||
		    (c->hasty && spins >= SHM_BUSY_TURNS))
			goto busy;
		goto restart;
	}
	shm_rmb();
	for (uint32_t n = 0, b = (uint32_t)k->hash & mask; n < v->geo.nbuckets;
	     n++, b = (b + 1) & mask) {
		uint64_t w = shm_load(&v->buckets[b]);
		unsigned st = SHM_W_STATE(w);

		if (st == SHM_FREE) {
			uint64_t nw;

			if (ticket == UINT32_MAX) {
				/* Absent: it would run now, and its entry
				 * needs the canonical fingerprint. */
				if (c->fp == NULL)
					return SHM_OUT_NEED_FP;
				/* Not without a carmyd to record it
				 * (replays need none). */
				if (!shm_daemon_alive(shm_header(v)))
					return SHM_OUT_NODAEMON;
				ticket = ticket_claim(v, c);
				if (ticket == UINT32_MAX) {
					/* "Full" is an absent verdict too: a
					 * move may have hidden the entry. */
					shm_rmb();
					if (shm_load(move_seq) != seq)
						goto restart;
					return SHM_OUT_FULL;
				}
				entry_fill(v, ticket, k, c);
			}
			shm_entry_at(v, ticket)->en_bucket = b;
			shm_rmb();
			if (shm_load(move_seq) != seq)
				goto restart;
			nw = shm_word(SHM_RUNNING, SHM_W_VER(w) + 1, tag, ticket);
			if (shm_cas(&v->buckets[b], w, nw) != w)
				goto restart;
			if (shm_load(&v->tickets[ticket]) != held) {
				/* Seen running meanwhile, maybe pending: who
				 * waits for it looks again. */
				shm_withdraw_pending(v, ticket, NULL);
				shm_cas(&v->buckets[b], nw,
						shm_next(nw, SHM_TOMB));
				return SHM_OUT_DEAD;
			}
			out->entry = ticket;
			out->bucket = b;
			out->word = nw;
			out->state = SHM_RUNNING;
			out->same_fp = true;
			out->pending = c->pending;
			memcpy(out->exec, shm_entry_at(v, ticket)->en_exec,
			       SHM_EXEC_LEN);
			return SHM_OUT_RESERVED;
		}
		if (st == SHM_BLOCKED) {
			if (!shm_busy_turn(&spins, &since) ||
			    (c->hasty && spins >= SHM_BUSY_TURNS))
				goto busy;
			goto restart;
		}
		if (st == SHM_TOMB || st > SHM_BLOCKED || SHM_W_TAG(w) != tag)
			continue;

		uint32_t e = SHM_W_ENTRY(w);
		const struct shm_entry *en;
		bool match, raw_same;

		if (e >= v->geo.capacity || e == ticket)
			continue;
		shm_rmb();
		en = shm_entry_at(v, e);
		match = entry_matches(v, e, b, k);
		raw_same = c->rawfp != NULL &&
			   memcmp(en->en_rawprint, c->rawfp, SHM_FP_LEN) == 0;
		out->same_fp = raw_same || (c->fp != NULL &&
			memcmp(en->en_fingerprint, c->fp, SHM_FP_LEN) == 0);
		memcpy(out->exec, en->en_exec, SHM_EXEC_LEN);
		out->pending = pending_word(shm_load(&en->en_pending));
		shm_rmb();
		if (shm_load(&v->buckets[b]) != w)
			goto restart;	/* changed under us: look again */
		if (!match)
			continue;
		/* Other bytes may still be the same call (keys in another
		 * order, say): only the canonical fingerprint can tell. No
		 * ticket is held yet: one is taken only once fp is set. */
		if (!raw_same && c->fp == NULL)
			return SHM_OUT_NEED_FP;
		if (ticket != UINT32_MAX)
			shm_cas(&v->tickets[ticket], held,
					SHM_TICKET_FREE);
		out->entry = e;
		out->bucket = b;
		out->word = w;
		out->state = st;
		return SHM_OUT_FOUND;
	}
	/* Every bucket is live or a tombstone: carmyd must reclaim first. */
	shm_rmb();
	if (shm_load(move_seq) != seq)
		goto restart;
	if (c->fp == NULL)
		return SHM_OUT_NEED_FP;	/* invalid args say so first */
	if (ticket != UINT32_MAX)
		shm_cas(&v->tickets[ticket], held, SHM_TICKET_FREE);
	return SHM_OUT_NOFREE;
busy:
	/* Without the fingerprint the args are not even validated yet:
	 * invalid ones must be told so, not sent away as "unavailable".
	 * (No ticket is held: one is taken only once fp is set.) */
	if (c->fp == NULL)
		return SHM_OUT_NEED_FP;
	if (ticket != UINT32_MAX)
		shm_cas(&v->tickets[ticket], held, SHM_TICKET_FREE);
	return SHM_OUT_BUSY;
}

/*
 * carmyd, at start-up: put back an execution that a durable store recorded
 * and the segment lacks (the segment is new: the machine rebooted), or give
 * a result to the segment's own entry of that execution (carmyd died after
 * the store recorded the result and before the segment had it).
 *
 * Runs before carmyd holds sh_alive, so no client reserves meanwhile; a
 * client of the dead carmyd half way through a reserve may still publish,
 * which the CASes below tolerate (a lost CAS looks again).
 *
 * A restored entry is final: COMPLETED with its result, or UNCERTAIN (the
 * store had no result: its process is gone, whatever it did). Its ticket
 * is LIVE, owned by nobody. An entry of the same identity with another
 * exec id is newer than the store's record and is left alone. Without
 * insert, an identity the segment lacks stays absent. Returns 0, or
 * CARMY_ECAPACITY when no entry is free.
 */
int shm_restore(const struct shm_view *v, const struct shm_key *k,
		const struct shm_restored *r, uint32_t *cursor, bool insert)
{
	const uint32_t mask = v->geo.nbuckets - 1;
	const uint32_t tag = key_tag(k) & 0xffffff;
	const unsigned state = r->completed ? SHM_COMPLETED : SHM_UNCERTAIN;
	uint32_t ticket = UINT32_MAX;
	size_t len = r->result_len;

	if (len > v->geo.max_result)
		len = 0;	/* cannot happen with the same geometry */
restart:
	for (uint32_t n = 0, b = (uint32_t)k->hash & mask; n < v->geo.nbuckets;
	     n++, b = (b + 1) & mask) {
		uint64_t w = shm_load(&v->buckets[b]);
		unsigned st = SHM_W_STATE(w);
		struct shm_entry *en;
		uint32_t e;

		if (st == SHM_FREE) {
			if (!insert)
				return 0;
			if (ticket == UINT32_MAX) {
				const uint32_t cap = v->geo.capacity;

				for (uint32_t i = 0, t = *cursor % cap; i < cap;
				     i++, t = t + 1 == cap ? 0 : t + 1) {
					if (shm_cas(&v->tickets[t],
						    SHM_TICKET_FREE,
						    SHM_TICKET_LIVE) ==
					    SHM_TICKET_FREE) {
						ticket = t;
						*cursor = t + 1;
						break;
					}
				}
				if (ticket == UINT32_MAX)
					return CARMY_ECAPACITY;
				en = shm_entry_at(v, ticket);
				for (int i = 0, off = 0; i < 3; i++) {
					en->en_len[i] = k->len[i];
					memcpy(en->en_ident + off, k->part[i],
					       k->len[i]);
					off += k->len[i];
				}
				memcpy(en->en_fingerprint, r->fp, SHM_FP_LEN);
				memcpy(en->en_rawprint, r->rawfp, SHM_FP_LEN);
				memcpy(en->en_exec, r->exec, SHM_EXEC_LEN);
				en->en_pid = r->pid;
				en->en_started_ns = r->started_ns;
				en->en_pending = 0;
				shm_call_fill(shm_call_at(v, ticket), &r->call);
				result_fill(v, ticket, r, len);
			}
			shm_entry_at(v, ticket)->en_bucket = b;
			if (shm_cas(&v->buckets[b], w,
				    shm_word(state, SHM_W_VER(w) + 1, tag,
					     ticket)) != w)
				goto restart;
			return 0;
		}
		if (st != SHM_RUNNING && st != SHM_COMPLETED &&
		    st != SHM_UNCERTAIN)
			continue;	/* TOMB, or BLOCKED by nobody now */
		e = SHM_W_ENTRY(w);
		if (SHM_W_TAG(w) != tag || e >= v->geo.capacity ||
		    e == ticket || !entry_matches(v, e, b, k))
			continue;
		/* The identity is in the segment already. */
		if (ticket != UINT32_MAX)
			shm_store(&v->tickets[ticket], SHM_TICKET_FREE);
		en = shm_entry_at(v, e);
		if (memcmp(en->en_exec, r->exec, SHM_EXEC_LEN) != 0 ||
		    st == SHM_COMPLETED || !r->completed)
			return 0;
		/* Ours, and the result only the store has: record it as a
		 * completion would (result first, then the word). */
		result_fill(v, e, r, len);
		if (shm_cas(&v->buckets[b], w, shm_next(w, SHM_COMPLETED)) != w)
			goto restart;
		return 0;
	}
	if (ticket != UINT32_MAX)
		shm_store(&v->tickets[ticket], SHM_TICKET_FREE);
	return CARMY_ECAPACITY;
}

/*
 * carmyd: where identity k stands, without claiming anything. Returns true
 * with the entry, bucket, word and state if it is RUNNING, COMPLETED or
 * UNCERTAIN; false if absent. Called under carmyd's store lock, so no move
 * of carmyd's own overlaps the probe.
 */
bool shm_lookup(const struct shm_view *v, const struct shm_key *k,
		struct shm_found *out)
{
	const uint32_t mask = v->geo.nbuckets - 1;
	const uint32_t tag = key_tag(k) & 0xffffff;

	for (uint32_t n = 0, b = (uint32_t)k->hash & mask; n < v->geo.nbuckets;
	     n++, b = (b + 1) & mask) {
		uint64_t w = shm_load(&v->buckets[b]);
		unsigned st = SHM_W_STATE(w);
		uint32_t e = SHM_W_ENTRY(w);

		if (st == SHM_FREE)
			return false;
		if ((st != SHM_RUNNING && st != SHM_COMPLETED &&
		     st != SHM_UNCERTAIN) || SHM_W_TAG(w) != tag ||
		    e >= v->geo.capacity || !entry_matches(v, e, b, k))
			continue;
		shm_rmb();
		out->entry = e;
		out->bucket = b;
		out->word = w;
		out->state = st;
		out->same_fp = false;
		memcpy(out->exec, shm_entry_at(v, e)->en_exec, SHM_EXEC_LEN);
		out->pending = pending_word(
			shm_load(&shm_entry_at(v, e)->en_pending));
		return true;
	}
	return false;
}

/*
 * carmyd, for an operator, under its store lock: settle entry e, which must
 * still be published UNCERTAIN as execution exec (UNCERTAIN is final, so
 * only carmyd changes it; compaction may have moved its bucket, so it is
 * found through en_bucket). r completed: the effect happened; record r's
 * result and who resolved it, then the word turns COMPLETED (result first,
 * as a completion). Else it did not: the bucket turns TOMB and the ticket
 * FREE, so the next call with the identity runs. Returns 0,
 * CARMY_ERESULT_TOO_LARGE, or CARMY_ENOT_INTERRUPTED if it is not so.
 */
int shm_resolve(const struct shm_view *v, uint32_t e, const uint8_t *exec,
		const struct shm_restored *r)
{
	struct shm_entry *en;
	size_t len = r->result_len;
	uint32_t b;
	uint64_t w;

	if (len > v->geo.max_result)
		return CARMY_ERESULT_TOO_LARGE;
	if (e >= v->geo.capacity)
		return CARMY_ENOT_INTERRUPTED;
	en = shm_entry_at(v, e);
	b = shm_load(&en->en_bucket);
	if (b >= v->geo.nbuckets)
		return CARMY_ENOT_INTERRUPTED;
	w = shm_load(&v->buckets[b]);
	if (SHM_W_STATE(w) != SHM_UNCERTAIN || SHM_W_ENTRY(w) != e ||
	    memcmp(en->en_exec, exec, SHM_EXEC_LEN) != 0)
		return CARMY_ENOT_INTERRUPTED;
	if (!r->completed) {
		if (shm_cas(&v->buckets[b], w, shm_next(w, SHM_TOMB)) != w)
			return CARMY_ENOT_INTERRUPTED;
		shm_store(&v->tickets[e], SHM_TICKET_FREE);
		(void)shm_add_return(&shm_header(v)->sh_tombs, 1);
		return 0;
	}
	result_fill(v, e, r, len);
	if (shm_cas(&v->buckets[b], w, shm_next(w, SHM_COMPLETED)) != w)
		return CARMY_ENOT_INTERRUPTED;
	return 0;
}

/* Is entry e published (running, completed or uncertain) as execution
 * exec? carmyd, under its store lock. */
bool shm_published_as(const struct shm_view *v, uint32_t e,
		      const uint8_t *exec)
{
	uint32_t b;
	uint64_t w;
	unsigned st;

	if (e >= v->geo.capacity)
		return false;
	b = shm_load(&shm_entry_at(v, e)->en_bucket);
	if (b >= v->geo.nbuckets)
		return false;
	w = shm_load(&v->buckets[b]);
	st = SHM_W_STATE(w);
	return (st == SHM_RUNNING || st == SHM_COMPLETED ||
		st == SHM_UNCERTAIN) && SHM_W_ENTRY(w) == e &&
	       memcmp(shm_entry_at(v, e)->en_exec, exec, SHM_EXEC_LEN) == 0;
}

/*
 * Copy out the recorded result of a COMPLETED entry seen in bucket `bucket`
 * with word `word`. The copy is validated by re-reading that bucket's word
 * afterwards: an entry is freed only after the bucket that publishes it has
 * changed, and a bucket's version only goes up, so the same word there
 * means the same execution's entry, whole. (Not the bucket the entry says
 * it is in now: after a purge, the entry may be reused by another call of
 * the same identity, published elsewhere with a word that is equal bit for
 * bit, and its result would be replayed for this one.) Returns 0, -ENOMEM,
 * or -EAGAIN if the entry changed or moved while it was read (the caller
 * looks it up again).
 */
int shm_read_result(const struct shm_view *v, uint32_t entry, uint32_t bucket,
		    uint64_t word, struct shm_result *out)
{
	const struct shm_entry *en;
	const uint64_t *bp;
	uint32_t len;

	if (entry >= v->geo.capacity)
		return -EINVAL;
	if (bucket >= v->geo.nbuckets)
		return -EAGAIN;
	en = shm_entry_at(v, entry);
	bp = &v->buckets[bucket];
	if (shm_load(bp) != word)
		return -EAGAIN;
	shm_rmb();
	len = shm_load(&en->en_result_len);
	if (len > v->geo.max_result)
		len = 0;	/* scribbled: replay an empty result */
	out->data = malloc((size_t)len + 1);
	if (out->data == NULL)
		return -ENOMEM;
	memcpy(out->data, shm_result_area(v, entry), len);
	((uint8_t *)out->data)[len] = 0;
	out->len = len;
	out->status = shm_load(&en->en_status);
	out->result_code = shm_load(&en->en_result_code);
	memcpy(out->exec, en->en_exec, SHM_EXEC_LEN);
	shm_rmb();
	if (shm_load(bp) != word) {
		free(out->data);
		out->data = NULL;
		return -EAGAIN;
	}
	return 0;
}

/*
 * Is entry still a RUNNING reservation of owner? Its bucket is found through
 * en_bucket, because carmyd's compaction may have moved it nearer home; the
 * two loads are made under an even, unchanged sh_move_seq so that a move
 * between them cannot make a live reservation look gone. *bucket and *word
 * get what was seen.
 */
bool shm_owns(const struct shm_view *v, uint32_t entry, uint32_t owner,
	      uint32_t *bucket, uint64_t *word)
{
	const uint32_t *seqp = &shm_header(v)->sh_move_seq;
	unsigned spins = 0;
	uint64_t since = 0;

	*word = 0;
	if (entry >= v->geo.capacity)
		return false;
	for (bool first = true; first || shm_busy_turn(&spins, &since);
	     first = false) {
		uint32_t seq = shm_load(seqp), b;
		uint64_t w;

		if (seq & 1)
			continue;
		shm_rmb();
		b = shm_load(&shm_entry_at(v, entry)->en_bucket);
		if (b >= v->geo.nbuckets)
			return false;
		w = shm_load(&v->buckets[b]);
		shm_rmb();
		if (shm_load(seqp) != seq)
			continue;
		*bucket = b;
		*word = w;
		return SHM_W_STATE(w) == SHM_RUNNING && SHM_W_ENTRY(w) == entry &&
		       SHM_T_WHAT(shm_load(&v->tickets[entry])) == owner;
	}
	return false;
}

/*
 * Give back a reservation whose tool did not run. The bucket turns TOMB
 * first (so no lookup finds the identity any more), then the ticket is freed.
 * If carmyd swept our owner meanwhile, its CAS on the bucket wins or ours
 * does; either way the result is consistent: UNCERTAIN (we report
 * CARMY_EDISCONNECTED) or TOMB (carmyd frees the ticket). If carmyd moved
 * the bucket between our look and our CAS, we look again.
 * Returns 0, CARMY_ENOT_RESERVED or CARMY_EDISCONNECTED.
 */
int shm_release(const struct shm_view *v, uint32_t entry, uint32_t owner)
{
	return shm_release_as(v, entry, owner, NULL);
}

/*
 * shm_release(), only if the entry still runs as execution exec (NULL: any).
 * For a release that may come after someone else let the entry go: carmyd
 * (a shared store found the identity taken) or a client whose answer was
 * lost. Owner ids are per handle, not per call, so the same owner may have
 * reserved the entry again since; its exec id is then another. exec is
 * written before the word is published and the CAS below is on the word
 * seen with it, so a match cannot be stale.
 */
int shm_release_as(const struct shm_view *v, uint32_t entry, uint32_t owner,
		   const uint8_t *exec)
{
	for (;;) {
		uint32_t b = 0;
		uint64_t w;

		if (!shm_owns(v, entry, owner, &b, &w)) {
			if (SHM_W_STATE(w) == SHM_UNCERTAIN &&
			    SHM_W_ENTRY(w) == entry)
				return CARMY_EDISCONNECTED;
			return CARMY_ENOT_RESERVED;
		}
		if (exec != NULL &&
		    memcmp(shm_entry_at(v, entry)->en_exec, exec,
			   SHM_EXEC_LEN) != 0)
			return CARMY_ENOT_RESERVED;
		if (shm_cas(&v->buckets[b], w, shm_next(w, SHM_TOMB)) == w)
			break;
	}
	{
		uint64_t t = shm_load(&v->tickets[entry]);

		if (SHM_T_WHAT(t) == owner)
			shm_cas(&v->tickets[entry], t, SHM_TICKET_FREE);
	}
	/* Tell carmyd a tombstone is waiting (a hint: it never trusts it). */
	(void)shm_add_return(&shm_header(v)->sh_tombs, 1);
	return 0;
}

/* An en_pending value a writer makes while a store has yet to answer (1,
 * 2) or the entry is being given back (3); any other a client may have
 * scribbled counts as settled. */
static bool pending_word(uint32_t p)
{
	return p == 1 || p == 2 || p == 3;
}

/*
 * en_pending is a futex word: 1 while a durable store has not answered the
 * reservation (or a shared store its release: shm_mark_pending()), 2 once
 * a caller waits for that answer, then 0 (it stands) or 3 (withdrawn:
 * refused, given back, or swept: look again). A waiter
 * moves 1 to 2 before it sleeps, so the one who ends it makes a system
 * call only if somebody sleeps. Whoever ends it does so while the entry is
 * still that execution's, before giving it back: a waiter that comes late
 * then sees 3, never a word about a call that has taken the entry since.
 */
static void end_pending(const struct shm_view *v, uint32_t e,
			const uint8_t *exec, uint32_t how)
{
	struct shm_entry *en;

	if (e >= v->geo.capacity)
		return;
	en = shm_entry_at(v, e);
	if ((exec != NULL &&
	     memcmp(en->en_exec, exec, SHM_EXEC_LEN) != 0) ||
	    shm_load(&en->en_pending) == 0)
		return;
	if (shm_xchg(&en->en_pending, how) == 2)
		syscall(SYS_futex, &en->en_pending, FUTEX_WAKE, INT32_MAX,
			NULL, NULL, 0);
}

/* The store recorded the reservation of entry e, execution exec: it
 * stands, and callers may name it. */
void shm_settle_pending(const struct shm_view *v, uint32_t e,
			const uint8_t *exec)
{
	end_pending(v, e, exec, 0);
}

/*
 * Entry e, running as execution exec and settled, is about to be released
 * in a shared store: pending again (1) until the store answers, so that a
 * call finding it waits to learn whether it is still held rather than
 * name an execution the store may already have let go (another instance
 * may run the identity from that commit on). carmyd only, under its lock,
 * on an entry its owner has handed it for the release. True if marked.
 */
bool shm_mark_pending(const struct shm_view *v, uint32_t e,
		      const uint8_t *exec)
{
	struct shm_entry *en;

	if (e >= v->geo.capacity)
		return false;
	en = shm_entry_at(v, e);
	if (memcmp(en->en_exec, exec, SHM_EXEC_LEN) != 0)
		return false;
	return shm_cas(&en->en_pending, 0, 1) == 0;
}

/* Entry e, execution exec (NULL: whatever it is), is about to be given
 * back or has turned uncertain: callers waiting on it look again. */
void shm_withdraw_pending(const struct shm_view *v, uint32_t e,
			  const uint8_t *exec)
{
	end_pending(v, e, exec, 3);
}

/*
 * A call found entry e RUNNING as execution exec: if a durable store has
 * not answered its reservation yet, wait for the answer, up to timeout_ms.
 * Until then the entry may yet be given back (a shared store found the
 * identity held by another execution, or failed), and its execution id
 * would name a call that never ran. Returns 0 if it is not pending: answer
 * now; or 1 once it was and is no longer, or timeout_ms passed, or the
 * entry is another execution's already: look at the table again. A value
 * no writer makes (a hostile client's) counts as not pending. 0 says how
 * the word is now: a caller that saw the entry pending (shm_found.pending)
 * looks again either way, as its state may have moved on meanwhile.
 */
int shm_wait_pending(const struct shm_view *v, uint32_t e, const uint8_t *exec,
		     int timeout_ms)
{
	struct timespec ts = { .tv_sec = timeout_ms / 1000,
			       .tv_nsec = (long)(timeout_ms % 1000) * 1000000 };
	struct shm_entry *en;
	uint32_t p;

	if (e >= v->geo.capacity)
		return 0;
	en = shm_entry_at(v, e);
	p = shm_load(&en->en_pending);
	shm_rmb();
	if (memcmp(en->en_exec, exec, SHM_EXEC_LEN) != 0 || p == 3)
		return 1;
	if (p != 1 && p != 2)
		return 0;
	if (p == 1 && shm_cas(&en->en_pending, 1, 2) != 1)
		return 1;	/* ended meanwhile */
	/* Woken, EAGAIN (no longer 2), ETIMEDOUT or EINTR: look again. */
	(void)syscall(SYS_futex, &en->en_pending, FUTEX_WAIT, 2, &ts, NULL, 0);
	return 1;
}

/*
 * Write summary s into cl, an entry's call that nobody else writes (its
 * entry is claimed and not yet published, or carmyd restores it). The
 * whole lengths are kept, saturated at what their words hold, and
 * exactly as many bytes as a reader takes from them (shm_call_tool_kept(),
 * shm_call_args_kept()): those s gives, then zeros if it gives fewer.
 * Plain stores, published with the entry.
 */
void shm_call_fill(struct shm_call *cl, const struct shm_summary *s)
{
	size_t tool_keep, args_keep, tk = s->tool_kept, ak = s->args_kept;

	cl->cl_tool_len = s->tool_len > UINT16_MAX ? UINT16_MAX :
						     (uint16_t)s->tool_len;
	cl->cl_args_len = s->args_len > UINT32_MAX ? UINT32_MAX :
						     (uint32_t)s->args_len;
	cl->cl_format = s->format;
	cl->cl_pad = 0;
	tool_keep = shm_call_tool_kept(cl);
	args_keep = shm_call_args_kept(cl);
	tk = tk < tool_keep ? tk : tool_keep;
	ak = ak < args_keep ? ak : args_keep;
	if (tk > 0)
		memcpy(cl->cl_data, s->tool, tk);
	if (tk < tool_keep)
		memset(cl->cl_data + tk, 0, tool_keep - tk);
	if (ak > 0)
		memcpy(cl->cl_data + tool_keep, s->args, ak);
	if (ak < args_keep)
		memset(cl->cl_data + tool_keep + ak, 0, args_keep - ak);
}

/*
 * A private copy of entry e's call (e < capacity), for carmyd and
 * carmyctl. Plain loads of memory any client may write: the copy's
 * lengths are read once, in it, and bound what is read of its bytes
 * (shm_call_tool_kept(), shm_call_args_kept()); whether the entry still
 * stood while it was copied is the caller's to check (the bucket word
 * read again, as a reader of the entry does).
 */
void shm_call_copy(const struct shm_view *v, uint32_t e,
		   struct shm_call *out)
{
	memcpy(out, shm_call_at(v, e), sizeof(*out));
}

/*
 * An ack slot carries carmyd's answer to a connection's client, for a
 * RESERVE or COMPLETE it sent a durable store: a success is told there
 * alone, with no reply on the socket. Each reply cost carmyd a send() and
 * the client a poll() and a recv() on top of the one wake-up it needs:
 * without them a journal's cycle with 64 clients is 9-14% faster (README,
 * Performance). Anything else (a refusal, another execution standing in a
 * shared store) comes on the socket as before, and the word says to read
 * it. A slot belongs to one open connection (carmyd hands it out at HELLO
 * and takes it back when the connection is gone), whose requests go one
 * at a time: nothing but that client and carmyd writes it meanwhile.
 *
 * The low two bits say where the answer is; the rest is a tag of the
 * execution the request names (30 bits of its id), so an answer lands
 * only on a word that awaits it: not on the next request's, nor on the
 * next connection's once the slot changed hands.
 *
 *   tag | 1   the client awaits the answer  (it stores this before it sends)
 *   tag | 2   ... and sleeps on the word    (the client, CAS from tag | 1)
 *   tag | 0   done: it stands, or is recorded  (carmyd, CAS from 1 or 2)
 *   tag | 3   the answer is on the socket      (carmyd, CAS from 1 or 2)
 *
 * If carmyd's CAS finds the word not awaiting that answer (a client that
 * does not use the slot, or a scribbled word), it answers on the socket
 * instead, success included.
 */
#define ACK_DONE 0u
#define ACK_WAIT 1u
#define ACK_SLEEP 2u
#define ACK_SOCKET 3u
#define ACK_STATE 3u

static int ack_tell(const struct shm_view *v, uint32_t slot,
		    const uint32_t *tag, uint32_t state);

static uint32_t ack_tag(const uint8_t *exec)
{
	uint32_t t;

	memcpy(&t, exec, sizeof(t));
	return t & ~ACK_STATE;
}

/*
 * The client is about to send a request naming execution exec, whose
 * answer it awaits in its slot: the word goes from *last (what the client
 * last saw there: carmyd's value when it handed out the slot, then each
 * answer) to awaiting. Returns false if the word holds anything else: the
 * slot is no longer this client's (carmyd took the connection for gone and
 * handed the slot to another, which it marks first), or was written over;
 * the client must not wait there.
 */
bool shm_ack_expect(const struct shm_view *v, uint32_t slot, uint32_t *last,
		    const uint8_t *exec)
{
	uint32_t want = ack_tag(exec) | ACK_WAIT;

	if (slot >= SHM_ACK_SLOTS ||
	    shm_cas(&v->acks[slot].ak_word, *last, want) != *last)
		return false;
	*last = want;
	return true;
}

/* carmyd hands slot to a new connection: mark it, so that nothing the
 * client that had it before still writes can land (shm_ack_expect()).
 * Returns the mark, which the new client reads as its first *last. */
uint32_t shm_ack_mark(const struct shm_view *v, uint32_t slot, uint32_t gen)
{
	uint32_t mark = (gen << 2) | ACK_SOCKET;

	if (slot < SHM_ACK_SLOTS)
		shm_store(&v->acks[slot].ak_word, mark);
	return mark;
}

/*
 * Wait up to timeout_ms for carmyd's answer to the request naming exec.
 * Returns SHM_ACK_DONE (it succeeded: nothing follows on the socket),
 * SHM_ACK_SOCKET (the answer is a reply on the socket), SHM_ACK_LOST (the
 * word holds what neither side wrote for this request: the answer is not
 * there, and may never come), -ETIMEDOUT (no answer yet: the caller sees
 * whether the connection is still there, and waits again), or another
 * -errno if futex() cannot wait here at all (the caller then waits on the
 * socket instead). *last gets the word last seen. The time is a deadline:
 * signals do not start it over.
 */
int shm_ack_wait(const struct shm_view *v, uint32_t slot, uint32_t *last,
		 const uint8_t *exec, int timeout_ms)
{
	const uint32_t tag = ack_tag(exec);
	struct timespec end;
	uint32_t *word;
	bool late = false;

	if (slot >= SHM_ACK_SLOTS)
		return SHM_ACK_LOST;
	word = &v->acks[slot].ak_word;
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += timeout_ms / 1000;
	end.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (end.tv_nsec >= 1000000000) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000;
	}
	for (;;) {
		uint32_t w = shm_load(word);

		*last = w;
		if ((w & ~ACK_STATE) != tag)
			return SHM_ACK_LOST;
		if ((w & ACK_STATE) == ACK_SOCKET)
			return SHM_ACK_SOCKET;
		if ((w & ACK_STATE) == ACK_DONE)
			return SHM_ACK_DONE;
		if ((w & ACK_STATE) == ACK_WAIT) {
			if (shm_cas(word, w, tag | ACK_SLEEP) != w)
				continue;	/* answered meanwhile */
			*last = tag | ACK_SLEEP;
		}
		if (late)
			return -ETIMEDOUT;
		/* Woken, EAGAIN (no longer asleep), EINTR: look again. At
		 * the deadline once more, then say so. */
		if (syscall(SYS_futex, word, FUTEX_WAIT_BITSET, tag | ACK_SLEEP,
			    &end, NULL, FUTEX_BITSET_MATCH_ANY) != 0 &&
		    errno != EINTR && errno != EAGAIN) {
			if (errno != ETIMEDOUT)
				return -errno;
			late = true;
		}
	}
}

/* carmyd: the answer to the request naming exec that came on slot's
 * connection is done (it stands, or is recorded: nothing follows on the
 * socket) or on the socket. Returns SHM_ACK_MISSED if the word did not
 * await it (then the answer, success included, goes on the socket),
 * SHM_ACK_TOLD, or SHM_ACK_TOLD_ASLEEP: then shm_ack_wake() is owed. */
int shm_ack(const struct shm_view *v, uint32_t slot, const uint8_t *exec,
	    bool done)
{
	const uint32_t tag = ack_tag(exec);

	return ack_tell(v, slot, &tag, done ? ACK_DONE : ACK_SOCKET);
}

/* Turn slot's word from awaiting (the answer about *tag, or any if tag is
 * NULL) to state. Returns like shm_ack(). */
static int ack_tell(const struct shm_view *v, uint32_t slot,
		    const uint32_t *tag, uint32_t state)
{
	uint32_t *word;

	if (slot >= SHM_ACK_SLOTS)
		return SHM_ACK_MISSED;
	word = &v->acks[slot].ak_word;
	/* The client moves the word once (1 -> 2), so a second try is all
	 * an honest one needs; a word that keeps changing is a scribbler's,
	 * and the answer goes on the socket. */
	for (int tries = 0; tries < 3; tries++) {
		uint32_t w = shm_load(word);

		if ((tag != NULL && (w & ~ACK_STATE) != *tag) ||
		    ((w & ACK_STATE) != ACK_WAIT && (w & ACK_STATE) != ACK_SLEEP))
			return SHM_ACK_MISSED;
		if (shm_cas(word, w, (w & ~ACK_STATE) | state) == w)
			return (w & ACK_STATE) == ACK_SLEEP ? SHM_ACK_TOLD_ASLEEP :
							      SHM_ACK_TOLD;
	}
	return SHM_ACK_MISSED;
}

/* Does slot's word await the answer to a request naming exec? carmyd: a
 * client posts a request only once its word awaits it (shm_post); the
 * client: carmyd has not answered yet. */
bool shm_ack_awaits(const struct shm_view *v, uint32_t slot,
		    const uint8_t *exec)
{
	uint32_t w;

	if (slot >= SHM_ACK_SLOTS)
		return false;
	w = shm_load(&v->acks[slot].ak_word);
	return (w & ~ACK_STATE) == ack_tag(exec) &&
	       ((w & ACK_STATE) == ACK_WAIT || (w & ACK_STATE) == ACK_SLEEP);
}

/* carmyd: the answer to whatever request slot's word awaits is on the
 * socket (the request, posted, was not whole: carmyd cannot know which
 * execution it named). Returns like shm_ack(). */
int shm_ack_any(const struct shm_view *v, uint32_t slot)
{
	return ack_tell(v, slot, NULL, ACK_SOCKET);
}

/* Wake the client asleep on slot's word. */
void shm_ack_wake(const struct shm_view *v, uint32_t slot)
{
	if (slot < SHM_ACK_SLOTS)
		syscall(SYS_futex, &v->acks[slot].ak_word, FUTEX_WAKE,
			INT32_MAX, NULL, NULL, 0);
}

/* ------------------------------------------------------------ helpers */

/*
 * Two owners whose cursors meet in one free stretch take its tickets by
 * turns, each finding its next one just taken by the other, and every
 * claim then pulls the tickets' line and the entries' lines from the
 * other's CPU: a reserve about twice as slow (docs/performance.md, "Owners
 * that claim side by side"). The sign of it: the ticket after an owner's
 * last claim was FREE then and is taken now. After SHM_CROWD_MOVE such
 * claims in a row the owner's cursor moves to a place picked by a hash of
 * its owner id and its ticket, so that two owners that move at once go
 * apart; a claim that finds its ticket FREE ends the count. skipped says
 * whether this claim found the cursor's ticket taken, i the ticket it
 * took, next where the search would go on. Returns where it goes on.
 */
static uint32_t crowd_step(const struct shm_view *v, const struct shm_claim *c,
			   bool skipped, uint32_t i, uint32_t next)
{
	uint32_t w = __atomic_load_n(c->crowd, __ATOMIC_RELAXED);
	uint32_t count = w & ~SHM_CROWD_FREE_NEXT;

	if (!skipped)
		count = 0;
	else if (w & SHM_CROWD_FREE_NEXT)
		count++;
	if (count >= SHM_CROWD_MOVE) {
		uint64_t h = XXH3_64bits_withSeed(&i, sizeof(i), c->owner);

		next = (uint32_t)(h % v->geo.capacity);
		count = 0;
	}
	if (shm_load(&v->tickets[next]) == SHM_TICKET_FREE)
		count |= SHM_CROWD_FREE_NEXT;
	__atomic_store_n(c->crowd, count, __ATOMIC_RELAXED);
	return next;
}

/*
 * Take a FREE ticket for the claimer. Tickets are the capacity: there are
 * exactly capacity of them, so the (capacity + 1)th concurrent entry finds
 * none. Each owner searches from its own cursor and moves it past what it
 * took, so one owner's entries sit side by side (fewer pages to fault in)
 * and owners starting apart rarely contend on a word. The cursor is a hint:
 * threads of one owner may race on it harmlessly. Returns the index or
 * UINT32_MAX when full.
 */
static uint32_t ticket_claim(const struct shm_view *v,
			     const struct shm_claim *c)
{
	const uint32_t cap = v->geo.capacity;
	uint32_t i = shm_load(c->cursor) % cap;

	for (uint32_t n = 0; n < cap; n++) {
		if (shm_load(&v->tickets[i]) == SHM_TICKET_FREE &&
		    shm_cas(&v->tickets[i], SHM_TICKET_FREE,
			    shm_ticket(c->owner, c->pid)) ==
			    SHM_TICKET_FREE) {
			uint32_t next = i + 1 == cap ? 0 : i + 1;

			if (c->crowd != NULL)
				next = crowd_step(v, c, n > 0, i, next);
			shm_store(c->cursor, next);
			/* This owner's next claim most likely takes the next
			 * ticket: have its entry's lines on their way by
			 * then. */
			shm_prefetch_entry(v, next);
			return i;
		}
		if (++i == cap)
			i = 0;
	}
	return UINT32_MAX;
}

/* carmyd: write r's result (len bytes, already checked against the
 * geometry) and who settled it into entry e. Plain stores, made visible by
 * the CAS that publishes the word after them. */
static void result_fill(const struct shm_view *v, uint32_t e,
			const struct shm_restored *r, size_t len)
{
	struct shm_entry *en = shm_entry_at(v, e);

	if (len > 0)
		memcpy(shm_result_area(v, e), r->result, len);
	en->en_result_len = (uint32_t)len;
	en->en_result_code = r->result_code;
	en->en_status = (uint8_t)r->status;
	en->en_finished_ns = r->finished_ns;
	en->en_resolved_ns = r->resolved_ns;
	en->en_resolved_uid = r->resolved_uid;
	en->en_resolved_pid = r->resolved_pid;
}

/* Fill a freshly claimed entry, and its call. Plain stores: the entry is
 * private to us until the publishing CAS, which orders them all before
 * it. */
static void entry_fill(const struct shm_view *v, uint32_t e,
		       const struct shm_key *k, const struct shm_claim *c)
{
	struct shm_entry *en = shm_entry_at(v, e);
	size_t off = 0;

	for (int i = 0; i < 3; i++) {
		en->en_len[i] = k->len[i];
		memcpy(en->en_ident + off, k->part[i], k->len[i]);
		off += k->len[i];
	}
	en->en_status = 0;
	en->en_result_len = 0;
	en->en_result_code = 0;
	en->en_pid = c->pid;
	memcpy(en->en_fingerprint, c->fp, SHM_FP_LEN);
	if (c->rawfp != NULL)
		memcpy(en->en_rawprint, c->rawfp, SHM_FP_LEN);
	else
		memset(en->en_rawprint, 0, SHM_FP_LEN);
	en->en_started_ns = c->make_exec(c->arg, en->en_exec);
	en->en_finished_ns = 0;
	en->en_pending = c->pending;
	shm_call_fill(shm_call_at(v, e), c->call != NULL ? c->call : &no_call);
}

/* Does entry e, found in bucket b, hold identity k? The lengths are read
 * once and bounded before the compare. */
static bool entry_matches(const struct shm_view *v, uint32_t e, uint32_t b,
			  const struct shm_key *k)
{
	const struct shm_entry *en = shm_entry_at(v, e);
	size_t off = 0;

	if (shm_load(&en->en_bucket) != b)
		return false;
	for (int i = 0; i < 3; i++) {
		uint16_t len = shm_load(&en->en_len[i]);

		if (len != k->len[i])
			return false;
		if (memcmp(en->en_ident + off, k->part[i], len) != 0)
			return false;
		off += len;
	}
	return true;
}
