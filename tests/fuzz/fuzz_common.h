/*
 * fuzz_common.h - what the libFuzzer targets and the seed-corpus generator
 * (gen_corpus.c) must agree on: the geometry of each target's segment, the
 * reservations made in it, and the segment template fuzz_segment starts
 * every input from. Everything here is deterministic, so that a seed written
 * by gen_corpus means the same thing to the target that reads it.
 *
 * Test code only: nothing here is linked into carmyd or libcarmy.
 */
#ifndef CARMY_FUZZ_COMMON_H
#define CARMY_FUZZ_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carmy.h"
#include "shm/shm.h"

/* An invariant of the code under test does not hold: say which, then die
 * so that libFuzzer records the input as a crash. */
#define FUZZ_CHECK(cond)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s:%d: invariant failed: %s\n",     \
				__FILE__, __LINE__, #cond);                  \
			abort();                                             \
		}                                                            \
	} while (0)

/* ------------------------------------------------------------ fuzz_wire */

/* The segment behind the connection: small, so that resetting it for every
 * input is cheap. carmyd's message cap is max_result + WIRE_OVERHEAD. */
#define FW_CAPACITY 8
#define FW_MAX_RESULT 256
#define FW_SEED UINT64_C(0x0123456789abcdef)
#define FW_SHM_NAME "/carmy-fuzz"
/* A fresh carmyd hands out owner ids from SHM_OWNER_MIN: the first HELLO on
 * the connection gets FW_OWNER, which the reservations below were made
 * under. FW_OTHER is another (connected) client. */
#define FW_OWNER SHM_OWNER_MIN
#define FW_OTHER (SHM_OWNER_MIN + 1)
#define FW_PID 4242u
#define FW_NOW UINT64_C(1000000000)

/* The entries made before each input, in this order (fuzz_wire checks the
 * indexes it gets):
 *   FW_E_LIVE   FW_OWNER's reservation, RUNNING: a COMPLETE can record it
 *   FW_E_DONE   FW_OWNER's, already completed: a COMPLETE is refused
 *   FW_E_LIVE2  FW_OWNER's second RUNNING reservation
 *   FW_E_OTHER  FW_OTHER's RUNNING reservation: NOT_OWNER for us
 *   FW_E_TOMB   FW_OWNER's, released: its bucket is a tombstone, its
 *               ticket free (a RECLAIM reclaims it)
 *   FW_E_CLAIM  FW_OWNER's unpublished claim (ticket held, no bucket) from
 *               FW_PID, which still runs: the end of the connection makes
 *               it an ORPHAN
 *   FW_E_CLAIM_GONE  the same from a process that is gone: freed */
enum {
	FW_E_LIVE = 0,
	FW_E_DONE = 1,
	FW_E_LIVE2 = 2,
	FW_E_OTHER = 3,
	FW_E_TOMB = 4,
	FW_E_CLAIM = 5,
	FW_E_CLAIM_GONE = 6,
	FW_NENTRIES = 7,
};

/* The execution id of entry i: what a COMPLETE must carry to be recorded. */
static inline void fw_exec(uint32_t i, uint8_t exec[SHM_EXEC_LEN])
{
	memset(exec, 0xa0 + (int)i, SHM_EXEC_LEN);
	exec[0] = 'x';
}

/* The request id of entry i (principal "p", session "s"). */
static inline void fw_rid(uint32_t i, char rid[8])
{
	snprintf(rid, 8, "r%u", (unsigned)i);
}

/* ------------------------------------------------------------ fuzz_segment */

#define FS_CAPACITY 8
#define FS_MAX_RESULT 64
#define FS_SEED UINT64_C(0xfeedfacecafebeef)
/* A liveness word that says "carmyd alive" to shm_daemon_alive(): a
 * non-zero thread id without FUTEX_OWNER_DIED. No thread of the targets
 * holds it (no keeper, no robust list: its bytes are the fuzzer's); they
 * only write it so that clients may reserve. */
#define FS_FAKE_TID 0x1234u

/*
 * The first input byte of fuzz_segment chooses how the rest is applied:
 *   FS_MODE_BODY     1: leave the header alone, overwrite what follows it
 *                       (else the input starts at offset 0, header included)
 *   FS_MODE_PACKED   2: write the input into the regions the code reads
 *                       (header, tickets, buckets, entries, calls, results)
 *                       after the other, skipping the alignment padding, so
 *                       that short inputs reach the entries (else: raw, at
 *                       the same offset in the segment)
 *   FS_MODE_PRIVATE  4: with the header included, do not attach through
 *                       shm_sane's verdict: act like a carmyd (and clients)
 *                       that validated the segment earlier and keep their
 *                       private geometry while the header is scribbled
 *   FS_MODE_ORPHANS  8: the first sweep says every pid is still running, so
 *                       unpublished claims become ORPHANs before the second
 *                       sweep frees them
 */
#define FS_MODE_BODY 1u
#define FS_MODE_PACKED 2u
#define FS_MODE_PRIVATE 4u
#define FS_MODE_ORPHANS 8u

static inline void fs_fake_alive(void *base)
{
	struct shm_header *h = base;

	__atomic_store_n(&h->sh_alive, FS_FAKE_TID, __ATOMIC_RELEASE);
}

static inline uint64_t fs_make_exec(void *arg, uint8_t exec[SHM_EXEC_LEN])
{
	memset(exec, *(const uint8_t *)arg, SHM_EXEC_LEN);
	return 1;
}

static inline bool fs_dead(uint32_t owner, void *arg)
{
	return owner == *(const uint32_t *)arg;
}

static inline bool fs_never_gone(uint32_t pid, void *arg)
{
	(void)pid;
	(void)arg;
	return false;
}

static inline enum shm_outcome fs_reserve(struct shm_view *v, const char *rid,
					  uint32_t owner, uint32_t pid,
					  uint32_t *cursor, struct shm_found *f)
{
	uint8_t fp[SHM_FP_LEN], tag = (uint8_t)rid[0];
	struct shm_claim c = { .owner = owner, .pid = pid, .fp = fp,
			       .make_exec = fs_make_exec, .arg = &tag,
			       .cursor = cursor };
	struct shm_key k;

	memset(fp, tag, sizeof(fp));
	if (shm_key_init(&k, v->seed, "p", 1, "s", 1, rid, strlen(rid)) != 0)
		abort();
	return shm_reserve(v, &k, &c, f);
}

static inline uint32_t fs_home(const struct shm_view *v, const char *rid)
{
	struct shm_key k;

	if (shm_key_init(&k, v->seed, "p", 1, "s", 1, rid, strlen(rid)) != 0)
		abort();
	return (uint32_t)k.hash & (v->geo.nbuckets - 1);
}

/*
 * Build fuzz_segment's template in mem (geo->size bytes, zeroed), through
 * the real API, so that every input starts from a segment in every state
 * the protocol knows:
 *   "a"  owner 16, RUNNING                (a sweep turns it UNCERTAIN)
 *   "b"  owner 16, COMPLETED, ticket LIVE
 *   "c"  owner 17, swept: UNCERTAIN, ticket LIVE
 *   "d"  released: a tombstone at its home bucket, ticket FREE
 *   X    owner 16, COMPLETED one bucket past its home, which is "d"'s: the
 *        next compaction moves it home over the tombstone
 *   an unpublished claim of owner 19 (ticket held, entry filled, no bucket)
 *   an ORPHAN ticket of pid 400
 *   one free ticket
 * and the liveness word says "carmyd alive". Returns 0, or -1 if the
 * template did not come out as described (the shm code changed).
 */
static inline int fs_build_template(void *mem, const struct shm_geometry *geo,
				    struct shm_view *v)
{
	static const uint8_t result[] = "hello, fuzzer";
	struct shm_sweep_stats st = { 0 };
	uint32_t dead = 17, cur16 = 0, cur17 = 0, cur19 = 0;
	struct shm_sweep_ops ops = { fs_dead, fs_never_gone, &dead };
	struct shm_found f, d;
	char x[16];
	uint32_t e;

	shm_format(mem, geo, FS_SEED, 1);
	if (shm_view_init(v, mem, geo->size) != 0)
		return -1;
	fs_fake_alive(mem);

	if (fs_reserve(v, "a", 16, 100, &cur16, &f) != SHM_OUT_RESERVED)
		return -1;
	if (fs_reserve(v, "b", 16, 100, &cur16, &f) != SHM_OUT_RESERVED ||
	    shm_record_result(v, f.entry, 16, f.exec, CARMY_STATUS_COMPLETED,
			      0, result, sizeof(result) - 1, 2) != 0)
		return -1;
	if (fs_reserve(v, "c", 17, 200, &cur17, &f) != SHM_OUT_RESERVED)
		return -1;
	shm_sweep(v, &ops, &st);
	if (st.uncertain != 1)
		return -1;

	/* X: another identity with "d"'s home, published right after it. */
	if (fs_reserve(v, "d", 16, 100, &cur16, &d) != SHM_OUT_RESERVED)
		return -1;
	for (unsigned i = 0;; i++) {
		if (i == 100000)
			return -1;
		snprintf(x, sizeof(x), "x%u", i);
		if (fs_home(v, x) == fs_home(v, "d"))
			break;
	}
	if (fs_reserve(v, x, 16, 100, &cur16, &f) != SHM_OUT_RESERVED ||
	    f.bucket == d.bucket ||
	    shm_record_result(v, f.entry, 16, f.exec, CARMY_STATUS_FAILED, 0,
			      "x", 1, 3) != 0 ||
	    shm_release(v, d.entry, 16) != 0)
		return -1;

	/* An unpublished claim: what a client killed between taking its
	 * ticket and publishing leaves behind. */
	if (fs_reserve(v, "f", 19, 300, &cur19, &f) != SHM_OUT_RESERVED ||
	    shm_release(v, f.entry, 19) != 0)
		return -1;
	v->tickets[f.entry] = shm_ticket(19, 300);
	e = f.entry;
	/* An ORPHAN in the next free ticket. */
	for (uint32_t i = 0; i < geo->capacity; i++) {
		if (i != e && v->tickets[i] == SHM_TICKET_FREE) {
			v->tickets[i] = shm_ticket(SHM_TICKET_ORPHAN, 400);
			break;
		}
	}
	/* Forget the tombstone hint a client left: the fuzzer's to set. */
	shm_header(v)->sh_tombs = 0;
	return 0;
}

/* ------------------------------------------------------------ fuzz_journal */

/* A fuzz_journal input is a recipe for a journal file (see fuzz_journal.c):
 * a flags byte, then records as op, back, blen (LE16) and body. */
enum {
	FJ_ZEROS = 0x01,	/* zeros after the records */
	FJ_FLIP = 0x02,		/* one byte flipped after sealing */
	FJ_LIE = 0x04,		/* sequence numbers from the input */
	FJ_COMPACT = 0x08,	/* compact at start whenever it would */
	FJ_SUBMIT = 0x10,	/* append an execution after recovery */
	FJ_ACKED = 0x20,	/* with FJ_FLIP: 1-3 bits flipped in the
				 * journal the store accepted and wrote */
	FJ_HOLE = 0x40,		/* sectors of the records never written */
};

#endif /* CARMY_FUZZ_COMMON_H */
