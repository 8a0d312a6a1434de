/*
 * check_table.c - the segment and its lock-free table, in one process:
 * geometry, the sanity check, the slot state machine, sweeps and tombstone
 * reclaim, and threads racing on one identity.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <urcu/uatomic.h>

#include "shm/shm.h"

#define OWNER_A 100u
#define OWNER_B 101u

static struct shm_view view;
static struct shm_alive alive;
static void *mem;

static void setup_cap(uint32_t capacity, uint32_t max_result)
{
	struct shm_geometry geo;

	ck_assert_int_eq(shm_geometry(capacity, max_result, &geo), 0);
	ck_assert_int_eq(posix_memalign(&mem, 4096, geo.size), 0);
	memset(mem, 0, geo.size);
	shm_format(mem, &geo, 0x1234, 1);
	ck_assert_int_eq(shm_view_init(&view, mem, geo.size), 0);
	ck_assert_int_eq(shm_hold_alive(&alive, &view), 0);	/* we play carmyd */
}

static void setup(void)
{
	setup_cap(16, 256);
}

static void teardown(void)
{
	shm_let_go_alive(&alive);
	free(mem);
	mem = NULL;
}

static void key(struct shm_key *k, const char *rid)
{
	ck_assert_int_eq(shm_key_init(k, view.seed, "p", 1, "s", 1, rid,
				      strlen(rid)), 0);
}

static uint64_t make_exec(void *arg, uint8_t out[SHM_EXEC_LEN])
{
	memcpy(out, arg, SHM_EXEC_LEN);
	return 1;
}

static enum shm_outcome reserve(const char *rid, uint32_t owner, uint8_t fpb,
				struct shm_found *f)
{
	uint8_t fp[SHM_FP_LEN], exec[SHM_EXEC_LEN];
	static __thread uint32_t cursor;
	struct shm_claim c = { .owner = owner, .pid = 1, .fp = fp,
			       .make_exec = make_exec, .arg = exec,
			       .cursor = &cursor };
	struct shm_key k;

	memset(fp, fpb, sizeof(fp));
	memset(exec, (int)strlen(rid), sizeof(exec));
	exec[0] = (uint8_t)rid[0];
	key(&k, rid);
	return shm_reserve(&view, &k, &c, f);
}

/* A reservation of rid by owner whose ticket search starts at *cursor and
 * keeps its crowd count in *crowd: the entry it took, or UINT32_MAX. */
static uint32_t claim_at(const char *rid, uint32_t owner, uint32_t *cursor,
			 uint32_t *crowd)
{
	uint8_t fp[SHM_FP_LEN], exec[SHM_EXEC_LEN];
	struct shm_claim c = { .owner = owner, .pid = 1, .fp = fp,
			       .make_exec = make_exec, .arg = exec,
			       .cursor = cursor, .crowd = crowd };
	struct shm_found f;
	struct shm_key k;

	memset(fp, 1, sizeof(fp));
	memset(exec, 3, sizeof(exec));
	key(&k, rid);
	if (shm_reserve(&view, &k, &c, &f) != SHM_OUT_RESERVED)
		return UINT32_MAX;
	return f.entry;
}

static bool dead_a(uint32_t owner, void *arg)
{
	(void)arg;
	return owner == OWNER_A;
}

/* Pids 1000 and up are "gone"; below, "still running". */
static bool gone_from_1000(uint32_t pid, void *arg)
{
	(void)arg;
	return pid >= 1000;
}

static const struct shm_sweep_ops sweep_a = { dead_a, gone_from_1000, NULL };

/* ------------------------------------------------------------ geometry */

/* ------------------------------------------------------------ tickets */

/* Two owners whose cursors meet take turns on the tickets (each finds its
 * next one just taken by the other) only until one of them has found that
 * SHM_CROWD_MOVE times in a row: then its cursor moves away, and from
 * there on each owner's entries sit side by side again. */
START_TEST(test_owners_claiming_side_by_side_move_apart)
{
	uint32_t cur_a = 100, cur_b = 100, crowd_a = 0, crowd_b = 0;
	uint32_t a[24], b[24];
	char rid[16];

	teardown();
	setup_cap(1000, 64);
	for (int i = 0; i < 24; i++) {
		snprintf(rid, sizeof(rid), "a%d", i);
		a[i] = claim_at(rid, OWNER_A, &cur_a, &crowd_a);
		snprintf(rid, sizeof(rid), "b%d", i);
		b[i] = claim_at(rid, OWNER_B, &cur_b, &crowd_b);
		ck_assert_uint_ne(a[i], UINT32_MAX);
		ck_assert_uint_ne(b[i], UINT32_MAX);
	}
	/* They met: the first claims alternate. */
	ck_assert_uint_eq(a[0], 100);
	ck_assert_uint_eq(b[0], 101);
	ck_assert_uint_eq(a[1], 102);
	/* And parted: the last ten of each are a run of their own. */
	for (int i = 15; i < 24; i++) {
		ck_assert_uint_eq(a[i], (a[i - 1] + 1) % 1000);
		ck_assert_uint_eq(b[i], (b[i - 1] + 1) % 1000);
	}
}
END_TEST

/* The count behind a move: a claim that finds the ticket after the
 * owner's last one, FREE then, taken since (here taken by the test, as
 * another owner would) counts one; a claim that finds its ticket FREE
 * ends the count; the cursor moves at the SHM_CROWD_MOVEth (4th). */
START_TEST(test_a_crowd_is_counted_until_a_free_ticket)
{
	uint32_t cur = 100, crowd = 0, e, last;
	char rid[16];
	int n = 0;

	teardown();
	setup_cap(1000, 64);
	snprintf(rid, sizeof(rid), "a%d", n++);
	last = claim_at(rid, OWNER_A, &cur, &crowd);
	ck_assert_uint_eq(last, 100);
	for (int round = 0; round < 2; round++) {
		/* Three taken behind its back: counted, no move. */
		for (int i = 0; i < 3; i++) {
			view.tickets[last + 1] = shm_ticket(OWNER_B, 1);
			snprintf(rid, sizeof(rid), "a%d", n++);
			e = claim_at(rid, OWNER_A, &cur, &crowd);
			ck_assert_uint_eq(e, last + 2);
			ck_assert_uint_eq(cur, e + 1);
			last = e;
		}
		/* One FREE: the count ends. */
		snprintf(rid, sizeof(rid), "a%d", n++);
		e = claim_at(rid, OWNER_A, &cur, &crowd);
		ck_assert_uint_eq(e, last + 1);
		last = e;
	}
	/* Four in a row: the fourth claim moves the cursor away. */
	for (int i = 0; i < 4; i++) {
		view.tickets[last + 1] = shm_ticket(OWNER_B, 1);
		snprintf(rid, sizeof(rid), "a%d", n++);
		e = claim_at(rid, OWNER_A, &cur, &crowd);
		ck_assert_uint_eq(e, last + 2);
		last = e;
	}
	ck_assert_uint_ne(cur, last + 1);
}
END_TEST

/* An owner walking through tickets that others took long ago (every other
 * one here) skips one at each claim, but never one that was FREE at its
 * last claim: its cursor stays on its way. */
START_TEST(test_an_owner_among_old_entries_keeps_its_way)
{
	uint32_t cur = 0, crowd = 0, e;
	char rid[16];

	teardown();
	setup_cap(1000, 64);
	for (uint32_t i = 1; i < 40; i += 2)
		view.tickets[i] = shm_ticket(OWNER_B, 1);
	for (uint32_t i = 0; i < 20; i++) {
		snprintf(rid, sizeof(rid), "a%u", i);
		e = claim_at(rid, OWNER_A, &cur, &crowd);
		ck_assert_uint_eq(e, 2 * i);
	}
}
END_TEST

START_TEST(test_geometry_rejects_out_of_range)
{
	struct shm_geometry g;

	ck_assert_int_eq(shm_geometry(0, 10, &g), -EINVAL);
	ck_assert_int_eq(shm_geometry(SHM_CAPACITY_MAX + 1, 10, &g), -EINVAL);
	ck_assert_int_eq(shm_geometry(1, SHM_MAX_RESULT_MAX + 1, &g), -EINVAL);
	ck_assert_int_eq(shm_geometry(10000, 16384, &g), 0);
	ck_assert_uint_ge(g.nbuckets, 20000);
	ck_assert_uint_eq(g.nbuckets & (g.nbuckets - 1), 0);
	ck_assert_uint_eq(g.result_stride, 16384);
	ck_assert_uint_eq(g.entries_off % 4096, 0);
	ck_assert_uint_ge(g.calls_off, g.entries_off +
			  10000 * sizeof(struct shm_entry));
	ck_assert_uint_eq(g.calls_off % 4096, 0);
	ck_assert_uint_ge(g.results_off, g.calls_off +
			  10000 * sizeof(struct shm_call));
	ck_assert_uint_ge(g.size, g.results_off + 10000ull * 16384);
}
END_TEST

/* The call a reservation carries lands in its entry's struct shm_call,
 * the whole lengths with it, and no more bytes than a reader takes. */
START_TEST(test_a_reservation_writes_its_call)
{
	uint8_t fp[SHM_FP_LEN], exec[SHM_EXEC_LEN], args[300];
	static uint32_t cursor;
	struct shm_summary sum = { .tool = "create", .tool_kept = 6,
				   .tool_len = 6, .args = args,
				   .args_kept = sizeof(args),
				   .args_len = sizeof(args), .format = 1 };
	struct shm_claim c = { .owner = OWNER_A, .pid = 1, .fp = fp,
			       .make_exec = make_exec, .arg = exec,
			       .cursor = &cursor, .call = &sum };
	struct shm_call cl;
	struct shm_found f;
	struct shm_key k;

	memset(fp, 1, sizeof(fp));
	memset(exec, 2, sizeof(exec));
	for (size_t i = 0; i < sizeof(args); i++)
		args[i] = (uint8_t)i;
	key(&k, "call");
	ck_assert_int_eq(shm_reserve(&view, &k, &c, &f), SHM_OUT_RESERVED);
	shm_call_copy(&view, f.entry, &cl);
	ck_assert_uint_eq(cl.cl_tool_len, 6);
	ck_assert_uint_eq(cl.cl_args_len, 300);
	ck_assert_uint_eq(cl.cl_format, 1);
	ck_assert_uint_eq(shm_call_tool_kept(&cl), 6);
	ck_assert_uint_eq(shm_call_args_kept(&cl), SHM_ARGS_KEEP);
	ck_assert_mem_eq(cl.cl_data, "create", 6);
	ck_assert_mem_eq(cl.cl_data + 6, args, SHM_ARGS_KEEP);
	/* Without a call: lengths 0, format 0, whatever was there. */
	c.call = NULL;
	key(&k, "no call");
	ck_assert_int_eq(shm_reserve(&view, &k, &c, &f), SHM_OUT_RESERVED);
	shm_call_copy(&view, f.entry, &cl);
	ck_assert_uint_eq(cl.cl_tool_len + cl.cl_args_len + cl.cl_format, 0);
}
END_TEST

/* shm_call_fill(): lengths past what the words hold saturate; fewer bytes
 * given than a reader takes are zeros, never an earlier call's. */
START_TEST(test_call_fill_saturates_and_zeroes)
{
	struct shm_call cl;
	struct shm_summary s = { .tool = "ab", .tool_kept = 2,
				 .tool_len = UINT64_C(1) << 20,
				 .args = "xyz", .args_kept = 3,
				 .args_len = UINT64_C(1) << 33, .format = 9 };

	memset(&cl, 0xee, sizeof(cl));
	shm_call_fill(&cl, &s);
	ck_assert_uint_eq(cl.cl_tool_len, UINT16_MAX);
	ck_assert_uint_eq(cl.cl_args_len, UINT32_MAX);
	ck_assert_uint_eq(cl.cl_format, 9);
	ck_assert_uint_eq(shm_call_tool_kept(&cl), SHM_TOOL_KEEP);
	ck_assert_uint_eq(shm_call_args_kept(&cl), SHM_ARGS_KEEP);
	ck_assert_mem_eq(cl.cl_data, "ab", 2);
	for (size_t i = 2; i < SHM_TOOL_KEEP; i++)
		ck_assert_uint_eq(cl.cl_data[i], 0);
	ck_assert_mem_eq(cl.cl_data + SHM_TOOL_KEEP, "xyz", 3);
	for (size_t i = SHM_TOOL_KEEP + 3; i < sizeof(cl.cl_data); i++)
		ck_assert_uint_eq(cl.cl_data[i], 0);
	/* Kept more than the whole: only the whole. */
	s.tool_len = 1;
	s.args_len = 2;
	memset(&cl, 0xee, sizeof(cl));
	shm_call_fill(&cl, &s);
	ck_assert_uint_eq(shm_call_tool_kept(&cl), 1);
	ck_assert_uint_eq(shm_call_args_kept(&cl), 2);
	ck_assert_mem_eq(cl.cl_data, "axy", 3);
	ck_assert_uint_eq(cl.cl_data[3], 0xee);	/* not a reader's */
}
END_TEST

START_TEST(test_sane_rejects_mismatched_layout_and_corruption)
{
	struct shm_header *h = mem;
	struct shm_geometry g;

	ck_assert_int_eq(shm_sane(mem, view.mapped, &g), 0);
	ck_assert_int_eq(shm_sane(mem, view.mapped - 1, &g), CARMY_ECORRUPT);
	ck_assert_int_eq(shm_sane(mem, 8, &g), CARMY_ECORRUPT);
	h->sh_layout ^= 1;
	ck_assert_int_eq(shm_sane(mem, view.mapped, &g), CARMY_ELAYOUT);
	h->sh_layout ^= 1;
	h->sh_buckets_off += 64;
	ck_assert_int_eq(shm_sane(mem, view.mapped, &g), CARMY_ECORRUPT);
	h->sh_buckets_off -= 64;
	h->sh_capacity = 0;
	ck_assert_int_eq(shm_sane(mem, view.mapped, &g), CARMY_ECORRUPT);
	h->sh_capacity = 16;
	h->sh_magic = 0;
	ck_assert_int_eq(shm_sane(mem, view.mapped, &g), CARMY_ECORRUPT);
}
END_TEST

START_TEST(test_sane_never_accepts_random_headers)
{
	struct shm_header *h = mem;
	struct shm_geometry g;
	unsigned seed = 7;

	/* The liveness word is about to be overwritten: let go of it
	 * first, as carmyd does before it is gone. */
	shm_let_go_alive(&alive);

	for (int i = 0; i < 20000; i++) {
		uint8_t *b = mem;

		for (size_t j = 0; j < sizeof(*h); j++)
			b[j] = (uint8_t)rand_r(&seed);
		h->sh_magic = SHM_MAGIC;
		h->sh_layout = shm_layout_signature();
		if (i % 2)
			h->sh_capacity = 16;
		if (shm_sane(mem, view.mapped, &g) == 0)
			ck_assert_uint_le(g.size, view.mapped);
	}
	/* Put a whole header back for teardown. */
	memset(mem, 0, sizeof(*h));
	shm_format(mem, &view.geo, view.seed, 1);
	ck_assert_int_eq(shm_hold_alive(&alive, &view), 0);
}
END_TEST

/* ------------------------------------------------------------ the table */

START_TEST(test_reserve_then_same_identity_is_found_running)
{
	struct shm_found f, g;

	ck_assert_int_eq(reserve("r1", OWNER_A, 1, &f), SHM_OUT_RESERVED);
	ck_assert_uint_eq(view.tickets[f.entry], shm_ticket(OWNER_A, 1));
	ck_assert_int_eq(reserve("r1", OWNER_B, 1, &g), SHM_OUT_FOUND);
	ck_assert_uint_eq(g.state, SHM_RUNNING);
	ck_assert(g.same_fp);
	ck_assert_uint_eq(g.entry, f.entry);
	ck_assert_mem_eq(g.exec, f.exec, SHM_EXEC_LEN);
	ck_assert_int_eq(reserve("r1", OWNER_B, 2, &g), SHM_OUT_FOUND);
	ck_assert(!g.same_fp);
}
END_TEST

/* Reserve rid with a raw print of byte rawb and, unless fpb is 0, a
 * fingerprint of byte fpb (0: not computed yet). */
static enum shm_outcome reserve_raw(const char *rid, uint8_t rawb, uint8_t fpb,
				    struct shm_found *f)
{
	uint8_t fp[SHM_FP_LEN], raw[SHM_FP_LEN], exec[SHM_EXEC_LEN];
	static __thread uint32_t cursor;
	struct shm_claim c = { .owner = OWNER_A, .pid = 1,
			       .fp = fpb ? fp : NULL, .rawfp = raw,
			       .make_exec = make_exec, .arg = exec,
			       .cursor = &cursor };
	struct shm_key k;

	memset(fp, fpb, sizeof(fp));
	memset(raw, rawb, sizeof(raw));
	memset(exec, 7, sizeof(exec));
	key(&k, rid);
	return shm_reserve(&view, &k, &c, f);
}

/* Equal raw prints decide without the fingerprint; anything else needs it,
 * and then the fingerprint alone decides. */
START_TEST(test_raw_print_decides_only_when_equal)
{
	struct shm_found f;

	/* A new identity cannot be reserved without its fingerprint. */
	ck_assert_int_eq(reserve_raw("r", 1, 0, &f), SHM_OUT_NEED_FP);
	ck_assert_int_eq(reserve_raw("r", 1, 9, &f), SHM_OUT_RESERVED);
	/* The same bytes again: found, same call, no fingerprint needed. */
	ck_assert_int_eq(reserve_raw("r", 1, 0, &f), SHM_OUT_FOUND);
	ck_assert(f.same_fp);
	/* Same bytes, even with a stray fingerprint: the bytes decide. */
	ck_assert_int_eq(reserve_raw("r", 1, 5, &f), SHM_OUT_FOUND);
	ck_assert(f.same_fp);
	/* Other bytes: the fingerprint is needed, and then decides. */
	ck_assert_int_eq(reserve_raw("r", 2, 0, &f), SHM_OUT_NEED_FP);
	ck_assert_int_eq(reserve_raw("r", 2, 9, &f), SHM_OUT_FOUND);
	ck_assert(f.same_fp);
	ck_assert_int_eq(reserve_raw("r", 2, 8, &f), SHM_OUT_FOUND);
	ck_assert(!f.same_fp);
	/* A claim without a raw print (rawfp NULL) compares fingerprints. */
	ck_assert_int_eq(reserve("r", OWNER_B, 9, &f), SHM_OUT_FOUND);
	ck_assert(f.same_fp);
	ck_assert_int_eq(reserve("r", OWNER_B, 1, &f), SHM_OUT_FOUND);
	ck_assert(!f.same_fp);
	/* Busy (a move that never ends, say): still NEED_FP first, so
	 * that invalid args are refused as such, then BUSY. */
	shm_header(&view)->sh_move_seq |= 1;
	ck_assert_int_eq(reserve_raw("other", 3, 0, &f), SHM_OUT_NEED_FP);
	ck_assert_int_eq(reserve_raw("other", 3, 9, &f), SHM_OUT_BUSY);
	shm_header(&view)->sh_move_seq += 1;
	/* NEED_FP took nothing: exactly one ticket is held. */
	{
		uint32_t held = 0;

		for (uint32_t i = 0; i < view.geo.capacity; i++)
			held += view.tickets[i] != SHM_TICKET_FREE;
		ck_assert_uint_eq(held, 1);
	}
}
END_TEST

START_TEST(test_complete_then_replay_reads_result)
{
	struct shm_found f, g;
	struct shm_result r;

	ck_assert_int_eq(reserve("r1", OWNER_A, 1, &f), SHM_OUT_RESERVED);
	ck_assert_int_eq(shm_record_result(&view, f.entry, OWNER_B, f.exec,
					   CARMY_STATUS_COMPLETED, 0, "x", 1, 5),
			 CARMY_ENOT_OWNER);
	uint8_t wrong[SHM_EXEC_LEN] = { 0 };

	ck_assert_int_eq(shm_record_result(&view, f.entry, OWNER_A, wrong,
					   CARMY_STATUS_COMPLETED, 0, "x", 1, 5),
			 CARMY_ENOT_RESERVED);
	ck_assert_int_eq(shm_record_result(&view, f.entry, OWNER_A, f.exec,
					   CARMY_STATUS_TIMED_OUT, 0, "a\0b", 3, 5),
			 0);
	ck_assert_uint_eq(view.tickets[f.entry], SHM_TICKET_LIVE);
	ck_assert_int_eq(reserve("r1", OWNER_B, 1, &g), SHM_OUT_FOUND);
	ck_assert_uint_eq(g.state, SHM_COMPLETED);
	ck_assert_int_eq(shm_read_result(&view, g.entry, g.bucket, g.word, &r), 0);
	ck_assert_int_eq(r.status, CARMY_STATUS_TIMED_OUT);
	ck_assert_uint_eq(r.len, 3);
	ck_assert_mem_eq(r.data, "a\0b", 3);
	free(r.data);
	/* A second completion of a finished entry is refused. */
	ck_assert_int_ne(shm_record_result(&view, f.entry, OWNER_A, f.exec,
					   CARMY_STATUS_COMPLETED, 0, "y", 1, 5),
			 0);
}
END_TEST

/*
 * A replay stalled between finding a completed call and copying its result,
 * while an operator purges that call and another call of the same identity
 * (other arguments) takes the same entry, is published in another bucket
 * with a word equal bit for bit (same tag, entry and version), and
 * completes: the copy must be refused, never the other call's result
 * handed over as this one's. Looked up again, it is a conflict.
 */
START_TEST(test_a_stalled_replay_never_reads_a_reused_entry)
{
	struct shm_found f, g, h;
	struct shm_result r;

	teardown();
	setup_cap(1, 256);	/* one entry: a new call must reuse it */
	ck_assert_int_eq(reserve("r", OWNER_A, 0xaa, &f), SHM_OUT_RESERVED);
	ck_assert_int_eq(shm_record_result(&view, f.entry, OWNER_A, f.exec,
					   CARMY_STATUS_COMPLETED, 0, "A", 1, 5),
			 0);
	ck_assert_int_eq(reserve("r", OWNER_B, 0xaa, &g), SHM_OUT_FOUND);
	ck_assert_uint_eq(g.state, SHM_COMPLETED);
	/* The replay stalls here. */
	ck_assert(shm_purge(&view, g.entry, g.exec));
	ck_assert_int_eq(reserve("r", OWNER_A, 0xbb, &h), SHM_OUT_RESERVED);
	ck_assert_uint_eq(h.entry, g.entry);
	ck_assert_uint_ne(h.bucket, g.bucket);
	ck_assert_int_eq(shm_record_result(&view, h.entry, OWNER_A, h.exec,
					   CARMY_STATUS_COMPLETED, 0, "B", 1, 5),
			 0);
	/* The trap: the entry's bucket now holds the very word seen. */
	ck_assert_uint_eq(view.buckets[view.entries[h.entry].en_bucket],
			  g.word);
	ck_assert_int_eq(shm_read_result(&view, g.entry, g.bucket, g.word, &r),
			 -EAGAIN);
	ck_assert_int_eq(reserve("r", OWNER_B, 0xaa, &g), SHM_OUT_FOUND);
	ck_assert(!g.same_fp);
}
END_TEST

START_TEST(test_capacity_is_exact_and_release_frees_room)
{
	struct shm_found f[17], g;
	char rid[32];

	for (int i = 0; i < 16; i++) {
		snprintf(rid, sizeof(rid), "id%d", i);
		ck_assert_int_eq(reserve(rid, OWNER_A, 1, &f[i]),
				 SHM_OUT_RESERVED);
	}
	ck_assert_int_eq(reserve("one-too-many", OWNER_A, 1, &g), SHM_OUT_FULL);
	/* Existing entries still answer while full. */
	ck_assert_int_eq(reserve("id3", OWNER_B, 1, &g), SHM_OUT_FOUND);
	ck_assert_int_eq(shm_release(&view, f[3].entry, OWNER_B),
			 CARMY_ENOT_RESERVED);
	ck_assert_int_eq(shm_release(&view, f[3].entry, OWNER_A), 0);
	ck_assert_int_eq(reserve("id3", OWNER_B, 1, &g), SHM_OUT_RESERVED);
	ck_assert_int_eq(reserve("one-too-many", OWNER_A, 1, &g), SHM_OUT_FULL);
}
END_TEST

START_TEST(test_no_carmyd_reserves_nothing_but_replays)
{
	struct shm_found f;

	ck_assert_int_eq(reserve("done", OWNER_A, 1, &f), SHM_OUT_RESERVED);
	ck_assert_int_eq(shm_record_result(&view, f.entry, OWNER_A, f.exec,
					   CARMY_STATUS_COMPLETED, 0, "r", 1, 1),
			 0);
	/* carmyd exits: a new identity would run with nobody to record it. */
	shm_let_go_alive(&alive);
	ck_assert(!shm_daemon_alive(shm_header(&view)));
	ck_assert_int_eq(reserve("new", OWNER_A, 1, &f), SHM_OUT_NODAEMON);
	for (uint32_t e = 0; e < view.geo.capacity; e++)
		ck_assert_uint_ne(SHM_T_WHAT(view.tickets[e]), OWNER_A);
	ck_assert_int_eq(reserve("done", OWNER_B, 1, &f), SHM_OUT_FOUND);
	ck_assert_uint_eq(f.state, SHM_COMPLETED);
	ck_assert_int_eq(shm_hold_alive(&alive, &view), 0);
	ck_assert(shm_daemon_alive(shm_header(&view)));
}
END_TEST

/*
 * A holder of the liveness word in another process, on a segment in memory
 * shared with it: it holds the word, says so through a pipe, and when told
 * to (*go closed) leaves as told: 'k' waits to be killed, 'x' exits without
 * letting go, 'a' aborts. Our own hold is let go first: a child forked from
 * a process with threads must not start any (and TSan, under CK_FORK=no,
 * forbids it).
 */
static pid_t holder_start(struct shm_view *sv, char how, int *go)
{
	int up[2], down[2];
	pid_t pid;
	char ready = 0;

	shm_let_go_alive(&alive);
	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct shm_alive a;

		close(up[0]);
		close(down[1]);
		if (shm_hold_alive(&a, sv) != 0 || write(up[1], "r", 1) != 1)
			_exit(2);
		if (read(down[0], &ready, 1) != 0)
			_exit(3);
		if (how == 'x')
			exit(0);
		if (how == 'a') {
			struct rlimit none = { 0, 0 };

			setrlimit(RLIMIT_CORE, &none);	/* no core file */
			abort();
		}
		for (;;)
			pause();
	}
	close(up[1]);
	close(down[0]);
	ck_assert_int_eq(read(up[0], &ready, 1), 1);
	ck_assert_int_eq(ready, 'r');
	close(up[0]);
	*go = down[1];
	return pid;
}

static void shared_segment(struct shm_view *sv)
{
	struct shm_geometry geo;
	void *m;

	ck_assert_int_eq(shm_geometry(16, 256, &geo), 0);
	m = mmap(NULL, geo.size, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert(m != MAP_FAILED);
	shm_format(m, &geo, 0x1234, 1);
	ck_assert_int_eq(shm_view_init(sv, m, geo.size), 0);
	ck_assert(!shm_daemon_alive(shm_header(sv)));	/* zero: nobody */
}

/* However its holder goes, the word reads "no carmyd" by the time its
 * parent has reaped it: one load, no timer. */
START_TEST(test_liveness_word_reads_dead_once_its_holder_is_gone)
{
	static const char hows[] = { 'k', 'x', 'a' };
	struct shm_view sv;

	shared_segment(&sv);
	for (size_t i = 0; i < sizeof(hows); i++) {
		int go, st;
		pid_t pid = holder_start(&sv, hows[i], &go);
		uint32_t w;

		ck_assert(shm_daemon_alive(shm_header(&sv)));
		w = __atomic_load_n(&shm_header(&sv)->sh_alive,
				    __ATOMIC_ACQUIRE);
		ck_assert_uint_ne(w & FUTEX_TID_MASK, 0);
		close(go);
		if (hows[i] == 'k')
			kill(pid, SIGKILL);
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert_msg(!shm_daemon_alive(shm_header(&sv)),
			      "holder gone ('%c', status %#x) and the word "
			      "still says alive: %#x", hows[i], st,
			      shm_header(&sv)->sh_alive);
		ck_assert_uint_ne(shm_header(&sv)->sh_alive & FUTEX_OWNER_DIED,
				  0);
		ck_assert_int_eq(shm_hold_alive(&alive, &view), 0);
	}
	munmap(sv.base, sv.mapped);
}
END_TEST

/* A word that is not the keeper's id, exactly, is a client's: carmyd's check
 * puts the id back and says what it found. */
START_TEST(test_restore_alive_puts_back_only_a_scribbled_word)
{
	struct shm_header *h = shm_header(&view);
	const uint32_t tid = alive.tid;
	const uint32_t scribbles[] = { 0, tid | FUTEX_OWNER_DIED,
				       FUTEX_OWNER_DIED, tid + 1,
				       tid | FUTEX_WAITERS, 0xffffffffu };
	uint32_t was = 7;

	ck_assert_uint_ne(tid, 0);
	ck_assert_uint_eq(h->sh_alive, tid);
	ck_assert(!shm_restore_alive(&alive, &was));
	ck_assert_uint_eq(was, 7);
	for (size_t i = 0; i < sizeof(scribbles) / sizeof(scribbles[0]); i++) {
		h->sh_alive = scribbles[i];
		if (scribbles[i] != tid + 1 &&
		    scribbles[i] != (tid | FUTEX_WAITERS))
			ck_assert(!shm_daemon_alive(h));
		ck_assert(shm_restore_alive(&alive, &was));
		ck_assert_uint_eq(was, scribbles[i]);
		ck_assert_uint_eq(h->sh_alive, tid);
		ck_assert(shm_daemon_alive(h));
		ck_assert(!shm_restore_alive(&alive, &was));
	}
}
END_TEST

/* Buckets BLOCKED (or in no state) by no reclaim: every probe meeting one
 * gives up busy, or the index fills. carmyd's check makes tombstones of them,
 * and the entries already there stay where their probes find them. */
START_TEST(test_blocked_buckets_nobody_holds_become_tombstones)
{
	struct shm_found f[4], g;
	uint32_t n = 0, want = 0;
	char rid[16];

	for (int i = 0; i < 4; i++) {
		snprintf(rid, sizeof(rid), "kept%d", i);
		ck_assert_int_eq(reserve(rid, OWNER_A, 1, &f[i]),
				 SHM_OUT_RESERVED);
	}
	ck_assert_int_eq(shm_record_result(&view, f[0].entry, OWNER_A,
					   f[0].exec, CARMY_STATUS_COMPLETED,
					   0, "r", 1, 1), 0);
	for (uint32_t b = 0; b < view.geo.nbuckets; b++) {
		uint64_t w = view.buckets[b];

		if (SHM_W_STATE(w) != SHM_FREE)
			continue;
		/* Every free bucket: BLOCKED, but some in states 6 and 7. */
		view.buckets[b] = shm_word(b % 5 == 0 ? 6 + b % 2 :
					   SHM_BLOCKED, b, b, b);
		want++;
	}
	ck_assert_int_eq(reserve("new", OWNER_B, 1, &g), SHM_OUT_BUSY);
	n = shm_unblock_scribbled(&view);
	ck_assert_uint_eq(n, want);
	ck_assert_uint_ge(shm_header(&view)->sh_tombs, want);
	for (uint32_t b = 0; b < view.geo.nbuckets; b++)
		ck_assert_uint_lt(SHM_W_STATE(view.buckets[b]), SHM_BLOCKED);
	ck_assert_uint_eq(shm_unblock_scribbled(&view), 0);
	while (shm_reclaim(&view) != 0)
		;
	for (int i = 0; i < 4; i++) {
		snprintf(rid, sizeof(rid), "kept%d", i);
		ck_assert_int_eq(reserve(rid, OWNER_B, 1, &g), SHM_OUT_FOUND);
		ck_assert_uint_eq(g.entry, f[i].entry);
		ck_assert_uint_eq(g.state, i == 0 ? SHM_COMPLETED : SHM_RUNNING);
	}
	ck_assert_int_eq(reserve("new", OWNER_B, 1, &g), SHM_OUT_RESERVED);
}
END_TEST

/* carmyd's ticks walk the table a slice at a time: each walk over a range
 * looks at that range only, ranges running past the end stop there, and
 * slices that cover the table do what one walk of it does. */
START_TEST(test_the_walks_over_a_range_keep_to_it)
{
	const uint32_t nb = view.geo.nbuckets, cap = view.geo.capacity;
	const uint32_t half = nb / 2, tick = cap / 2;
	struct shm_sweep_stats st = { 0 };
	uint32_t blocked = 0, low = 0, t, tomb;
	bool seen = true;

	for (uint32_t b = 0; b < nb; b += 3) {
		if (SHM_W_STATE(view.buckets[b]) != SHM_FREE)
			continue;
		view.buckets[b] = shm_word(SHM_BLOCKED, b, b, b);
		blocked++;
		low += b < half;
	}
	ck_assert_uint_gt(low, 0);
	ck_assert_uint_gt(blocked, low);
	ck_assert(!shm_any_tomb(&view, 0, nb));
	ck_assert_uint_eq(shm_unblock_scribbled_range(&view, half, nb + 99,
						      &seen),
			  blocked - low);
	ck_assert(seen);	/* the tombstones it made */
	for (uint32_t b = 0; b < nb; b += 3)
		ck_assert_uint_eq(SHM_W_STATE(view.buckets[b]),
				  b < half ? SHM_BLOCKED : SHM_TOMB);
	ck_assert_uint_eq(shm_unblock_scribbled_range(&view, 0, half, NULL),
			  low);
	ck_assert_uint_eq(shm_unblock_scribbled(&view), 0);
	ck_assert_uint_eq(shm_header(&view)->sh_tombs, blocked);

	/* Tombstones now at 0, 3, 6...: a range between two has none. */
	for (tomb = 1; SHM_W_STATE(view.buckets[tomb]) != SHM_TOMB; tomb++)
		;
	ck_assert(!shm_any_tomb(&view, 1, tomb));
	ck_assert(shm_any_tomb(&view, tomb, tomb + 1));
	ck_assert(!shm_any_tomb(&view, tomb + 1, tomb + 3));
	ck_assert(!shm_any_tomb(&view, nb, nb + 10));
	ck_assert(shm_any_tomb(&view, nb - 1, nb + 10) ==
		  (SHM_W_STATE(view.buckets[nb - 1]) == SHM_TOMB));
	/* The tick's one read of each word says the same, with nothing
	 * left to turn; a range with none says so whatever came before. */
	ck_assert_uint_eq(shm_unblock_scribbled_range(&view, 1, tomb, &seen),
			  0);
	ck_assert(!seen);
	ck_assert_uint_eq(shm_unblock_scribbled_range(&view, tomb, tomb + 1,
						      &seen), 0);
	ck_assert(seen);
	ck_assert_uint_eq(shm_unblock_scribbled_range(&view, tomb + 1,
						      tomb + 3, &seen), 0);
	ck_assert(!seen);
	ck_assert_uint_eq(shm_unblock_scribbled_range(&view, 0, nb, &seen), 0);
	ck_assert(seen);

	/* A dead owner's unpublished claims at both ends of both halves of
	 * the tickets. */
	view.tickets[0] = view.tickets[tick - 1] = view.tickets[tick] =
		view.tickets[cap - 1] = shm_ticket(OWNER_A, 4242);
	shm_sweep_range(&view, &sweep_a, 0, tick, cap + 99, &st);
	ck_assert_uint_eq(st.freed, 2);
	ck_assert_uint_eq(view.tickets[tick], SHM_TICKET_FREE);
	ck_assert_uint_eq(view.tickets[0], shm_ticket(OWNER_A, 4242));
	ck_assert_uint_eq(view.tickets[tick - 1], shm_ticket(OWNER_A, 4242));
	shm_sweep_range(&view, &sweep_a, 0, 0, tick, &st);
	ck_assert_uint_eq(st.freed, 4);
	ck_assert_uint_eq(view.tickets[cap - 1], SHM_TICKET_FREE);
	for (t = 0; t < cap; t++)
		ck_assert_uint_eq(view.tickets[t], SHM_TICKET_FREE);
}
END_TEST

/* The tick reads the buckets a stretch (4,096, counted from the range's
 * start) at a time: a scribbled word or a tombstone in any stretch of a
 * range, first, middle or last, is found, whatever the stretches after
 * it hold, and a word just outside the range is not. */
START_TEST(test_the_ticks_read_of_the_buckets_spans_stretches)
{
	const uint32_t s = 4096, scribbled = 2 * s + 7, tomb = s + 5;
	uint32_t nb;
	bool seen = false;

	teardown();
	setup_cap(8192, 64);
	nb = view.geo.nbuckets;
	ck_assert_uint_ge(nb, 4 * s);
	view.buckets[tomb] = shm_word(SHM_TOMB, tomb, tomb, tomb);
	view.buckets[scribbled] = shm_word(SHM_BLOCKED, 1, 1, 1);
	view.buckets[nb - 1] = shm_word(7, 2, 2, 2);

	ck_assert_uint_eq(shm_unblock_scribbled_range(&view, tomb + 1,
						      scribbled, &seen), 0);
	ck_assert(!seen);
	ck_assert_uint_eq(shm_unblock_scribbled_range(&view, s + 1, tomb + 1,
						      &seen), 0);
	ck_assert(seen);
	/* The tombstone in the middle stretch of three, then in the first
	 * of two. */
	seen = false;
	ck_assert_uint_eq(shm_unblock_scribbled_range(&view, 0, scribbled,
						      &seen), 0);
	ck_assert(seen);
	seen = false;
	ck_assert_uint_eq(shm_unblock_scribbled_range(&view, s, scribbled,
						      &seen), 0);
	ck_assert(seen);
	ck_assert_uint_eq(shm_unblock_scribbled_range(&view, tomb + 1, nb,
						      &seen), 2);
	ck_assert(seen);
	ck_assert_uint_eq(SHM_W_STATE(view.buckets[scribbled]), SHM_TOMB);
	ck_assert_uint_eq(SHM_W_STATE(view.buckets[nb - 1]), SHM_TOMB);
	ck_assert_uint_eq(shm_header(&view)->sh_tombs, 2);
	ck_assert_uint_eq(shm_unblock_scribbled(&view), 0);
}
END_TEST

START_TEST(test_sweep_turns_running_uncertain_and_frees_unpublished)
{
	struct shm_sweep_stats st = { 0 };
	struct shm_found f, g;

	ck_assert_int_eq(reserve("run", OWNER_A, 1, &f), SHM_OUT_RESERVED);
	ck_assert_int_eq(reserve("other", OWNER_B, 1, &g), SHM_OUT_RESERVED);
	/* Claims that died before publishing: ticket held, no bucket. One
	 * process is gone; the other still runs and may still write into
	 * its entry, so that one is held (ORPHAN) until it is gone too. */
	uint32_t gone = 0, runs;

	while (view.tickets[gone] != SHM_TICKET_FREE)
		gone++;
	runs = gone + 1;
	while (view.tickets[runs] != SHM_TICKET_FREE)
		runs++;

	view.tickets[gone] = shm_ticket(OWNER_A, 4242);
	view.tickets[runs] = shm_ticket(OWNER_A, 7);
	shm_sweep(&view, &sweep_a, &st);
	ck_assert_uint_eq(st.uncertain, 1);
	ck_assert_uint_eq(st.freed, 1);
	ck_assert_uint_eq(st.orphaned, 1);
	ck_assert_uint_eq(view.tickets[gone], SHM_TICKET_FREE);
	ck_assert_uint_eq(view.tickets[runs], shm_ticket(SHM_TICKET_ORPHAN, 7));
	/* The orphan's process exits: the next sweep frees it. */
	view.tickets[runs] = shm_ticket(SHM_TICKET_ORPHAN, 7007);
	shm_sweep(&view, &sweep_a, &st);
	ck_assert_uint_eq(view.tickets[runs], SHM_TICKET_FREE);
	ck_assert_int_eq(reserve("run", OWNER_B, 1, &g), SHM_OUT_FOUND);
	ck_assert_uint_eq(g.state, SHM_UNCERTAIN);
	ck_assert_int_eq(reserve("other", OWNER_A, 1, &g), SHM_OUT_FOUND);
	ck_assert_uint_eq(g.state, SHM_RUNNING);
	/* The dead owner can no longer release or complete it. */
	ck_assert_int_eq(shm_release(&view, f.entry, OWNER_A),
			 CARMY_EDISCONNECTED);
}
END_TEST

/* With a shared store, a dead owner's running entry that the store never
 * confirmed (en_pending not 0), claimed since carmyd began, is given back:
 * nobody was told it stands, and the store holds no row of it. One it
 * confirmed, or one claimed before carmyd began (a previous carmyd's store
 * may hold it), turns uncertain; so does every one without a shared store. */
START_TEST(test_sweep_gives_back_what_was_never_confirmed)
{
	static const char *const rid[] = { "unconf", "waited", "conf", "old",
					   "going" };
	static const uint32_t pending[] = { 1, 2, 0, 1, 3 };
	static const uint64_t started[] = { 200, 300, 200, 50, 200 };
	struct shm_sweep_stats st = { 0 };
	struct shm_found f[5], g;

	for (int i = 0; i < 5; i++) {
		struct shm_entry *en;

		ck_assert_int_eq(reserve(rid[i], OWNER_A, 1, &f[i]),
				 SHM_OUT_RESERVED);
		en = shm_entry_at(&view, f[i].entry);
		en->en_pending = pending[i];
		en->en_started_ns = started[i];
	}
	ck_assert_int_eq(reserve("alive", OWNER_B, 1, &g), SHM_OUT_RESERVED);
	shm_entry_at(&view, g.entry)->en_started_ns = 200;
	shm_entry_at(&view, g.entry)->en_pending = 1;
	shm_sweep_since(&view, &sweep_a, 100, &st);
	ck_assert_uint_eq(st.given_back, 3);
	ck_assert_uint_eq(st.uncertain, 2);
	for (int i = 0; i < 5; i++) {
		bool back = pending[i] != 0 && started[i] > 100;

		ck_assert_int_eq(shm_state_as(&view, f[i].entry, f[i].exec),
				 back ? SHM_FREE : SHM_UNCERTAIN);
		if (back) {
			ck_assert_uint_eq(view.tickets[f[i].entry],
					  SHM_TICKET_FREE);
			ck_assert_uint_eq(shm_entry_at(&view, f[i].entry)->
						  en_pending, 3);
		}
	}
	/* The identity given back is free again; a live owner's pending
	 * entry is left alone. */
	ck_assert_int_eq(reserve("unconf", OWNER_B, 1, &g), SHM_OUT_RESERVED);
	ck_assert_int_eq(reserve("alive", OWNER_A, 1, &g), SHM_OUT_FOUND);
	ck_assert_uint_eq(g.state, SHM_RUNNING);
	/* Without a shared store, a pending entry turns uncertain. */
	memset(&st, 0, sizeof(st));
	ck_assert_int_eq(reserve("mem", OWNER_A, 1, &g), SHM_OUT_RESERVED);
	shm_entry_at(&view, g.entry)->en_pending = 1;
	shm_entry_at(&view, g.entry)->en_started_ns = 200;
	shm_sweep(&view, &sweep_a, &st);
	ck_assert_uint_eq(st.given_back, 0);
	ck_assert_uint_eq(st.uncertain, 1);
	ck_assert_int_eq(shm_state_as(&view, g.entry, g.exec), SHM_UNCERTAIN);
}
END_TEST

/* carmyd's load gives back an entry whose reservation the store has just
 * released: running or uncertain, whatever its en_pending, only as the
 * execution named; a completed one, or another execution's, stays. */
START_TEST(test_give_back_as_frees_only_that_running_execution)
{
	static const uint8_t other[SHM_EXEC_LEN] = { 0x5a };
	struct shm_sweep_stats st = { 0 };
	struct shm_found run, unc, done, g;

	ck_assert_int_eq(reserve("run", OWNER_B, 1, &run), SHM_OUT_RESERVED);
	ck_assert_int_eq(reserve("unc", OWNER_A, 1, &unc), SHM_OUT_RESERVED);
	ck_assert_int_eq(reserve("done", OWNER_B, 1, &done), SHM_OUT_RESERVED);
	ck_assert_int_eq(shm_record_result(&view, done.entry, OWNER_B,
					   done.exec, 0, 0, NULL, 0, 1), 0);
	shm_entry_at(&view, run.entry)->en_pending = 0;
	shm_sweep(&view, &sweep_a, &st);
	ck_assert_uint_eq(st.uncertain, 1);
	ck_assert_int_eq(shm_state_as(&view, unc.entry, unc.exec),
			 SHM_UNCERTAIN);

	ck_assert(!shm_give_back_as(&view, run.entry, other));
	ck_assert(!shm_give_back_as(&view, done.entry, done.exec));
	ck_assert(shm_give_back_as(&view, run.entry, run.exec));
	ck_assert(shm_give_back_as(&view, unc.entry, unc.exec));
	ck_assert(!shm_give_back_as(&view, unc.entry, unc.exec));
	ck_assert_int_eq(shm_state_as(&view, run.entry, run.exec), SHM_FREE);
	ck_assert_uint_eq(view.tickets[run.entry], SHM_TICKET_FREE);
	ck_assert_int_eq(shm_state_as(&view, done.entry, done.exec),
			 SHM_COMPLETED);
	ck_assert_int_eq(reserve("run", OWNER_A, 1, &g), SHM_OUT_RESERVED);
	ck_assert_int_eq(reserve("unc", OWNER_B, 1, &g), SHM_OUT_RESERVED);
	ck_assert(!shm_give_back_as(&view, view.geo.capacity, run.exec));
}
END_TEST

START_TEST(test_bucket_left_blocked_is_busy_until_unblocked)
{
	struct shm_found f;
	struct shm_key k;

	/* A carmyd killed while reclaiming leaves a bucket BLOCKED: clients
	 * give up with BUSY instead of spinning forever, and the next carmyd
	 * releases it at start-up. */
	key(&k, "blocked");
	view.buckets[k.hash & (view.geo.nbuckets - 1)] =
		shm_word(SHM_BLOCKED, 3, 0, 0);
	ck_assert_int_eq(reserve("blocked", OWNER_A, 1, &f), SHM_OUT_BUSY);
	for (uint32_t e = 0; e < view.geo.capacity; e++)
		ck_assert_uint_eq(view.tickets[e], SHM_TICKET_FREE);
	shm_unblock_all(&view);
	ck_assert_int_eq(reserve("blocked", OWNER_A, 1, &f), SHM_OUT_RESERVED);
}
END_TEST

START_TEST(test_reclaim_keeps_entries_reachable)
{
	struct shm_found f[64], g;
	char rid[32];
	uint32_t tombs = 0, n;

	teardown();
	setup_cap(32, 64);	/* 64 buckets */
	for (int round = 0; round < 50; round++) {
		for (int i = 0; i < 24; i++) {
			snprintf(rid, sizeof(rid), "r%d-%d", round, i);
			ck_assert_int_eq(reserve(rid, OWNER_A, 1, &f[i]),
					 SHM_OUT_RESERVED);
		}
		/* Release every other one: tombstones between live entries. */
		for (int i = 0; i < 24; i += 2)
			ck_assert_int_eq(shm_release(&view, f[i].entry, OWNER_A), 0);
		n = shm_reclaim(&view);
		tombs += n;
		for (int i = 1; i < 24; i += 2) {
			snprintf(rid, sizeof(rid), "r%d-%d", round, i);
			ck_assert_int_eq(reserve(rid, OWNER_B, 1, &g),
					 SHM_OUT_FOUND);
			ck_assert_uint_eq(g.entry, f[i].entry);
			ck_assert_int_eq(shm_release(&view, f[i].entry, OWNER_A), 0);
		}
		shm_reclaim(&view);
	}
	ck_assert_uint_gt(tombs, 0);
	/* After 50 rounds of churn through a 64-bucket index nothing is
	 * left: every tombstone was reclaimed. */
	shm_reclaim(&view);
	for (uint32_t b = 0; b < view.geo.nbuckets; b++)
		ck_assert_uint_eq(SHM_W_STATE(view.buckets[b]), SHM_FREE);
}
END_TEST

START_TEST(test_index_full_of_tombstones_is_reclaimed)
{
	struct shm_found f;
	char rid[32];
	int i;

	teardown();
	setup_cap(32, 64);	/* 64 buckets */
	/* Reserve and release until no FREE bucket is left. */
	for (i = 0; i < 1000; i++) {
		snprintf(rid, sizeof(rid), "t%d", i);
		enum shm_outcome o = reserve(rid, OWNER_A, 1, &f);

		if (o == SHM_OUT_NOFREE)
			break;
		ck_assert_int_eq(o, SHM_OUT_RESERVED);
		ck_assert_int_eq(shm_release(&view, f.entry, OWNER_A), 0);
	}
	ck_assert_int_eq(i, 64);
	for (uint32_t b = 0; b < view.geo.nbuckets; b++)
		ck_assert_uint_eq(SHM_W_STATE(view.buckets[b]), SHM_TOMB);
	ck_assert_uint_eq(shm_header(&view)->sh_tombs, 64);
	/* One pass frees one (no FREE bucket to guard), then walks the ring
	 * from it and frees the rest: a RECLAIM leaves room for more than
	 * the next call. */
	ck_assert_uint_eq(shm_reclaim(&view), 64);
	ck_assert_uint_eq(shm_reclaim(&view), 0);
	ck_assert_int_eq(reserve("after", OWNER_A, 1, &f), SHM_OUT_RESERVED);
}
END_TEST

/* A request id whose identity's home bucket is b. */
static void homed_at(char rid[32], uint32_t b)
{
	struct shm_key k;

	for (int i = 0; i < 10000000; i++) {
		snprintf(rid, 32, "h%d", i);
		key(&k, rid);
		if (((uint32_t)k.hash & (view.geo.nbuckets - 1)) == b)
			return;
	}
	ck_abort_msg("no identity found homed at bucket %u", b);
}

/* carmyd's ticks reclaim a stretch of the ring at a time: whole clusters
 * from the first FREE bucket at or after the cursor, until the budget is
 * walked; the cursor is left on the FREE bucket that ended the stretch.
 * Stretch after stretch frees what one whole reclaim frees, and compacts
 * on the way: every entry is still found where its probe looks. */
START_TEST(test_reclaim_goes_a_stretch_at_a_time)
{
	struct shm_found f[96], g;
	uint32_t cursor = 5, walked, freed = 0, calls = 0, tombs = 0;
	char rid[32];

	teardown();
	setup_cap(128, 64);	/* 256 buckets */
	ck_assert_uint_eq(view.geo.nbuckets, 256);
	for (int i = 0; i < 96; i++) {
		snprintf(rid, sizeof(rid), "s%d", i);
		ck_assert_int_eq(reserve(rid, OWNER_A, 1, &f[i]),
				 SHM_OUT_RESERVED);
	}
	/* Two in three released: tombstones before live entries, which
	 * compaction moves back towards their homes. */
	for (int i = 0; i < 96; i++)
		if (i % 3 != 2) {
			ck_assert_int_eq(shm_release(&view, f[i].entry,
						     OWNER_A), 0);
			tombs++;
		}
	while (shm_any_tomb(&view, 0, view.geo.nbuckets)) {
		uint32_t before = cursor;

		ck_assert_uint_lt(calls++, 256 / 16 + 2);
		freed += shm_reclaim_some(&view, &cursor, 16, &walked);
		/* The cursor goes on by the budget at least, less the FREE
		 * bucket the stretch starts on (it counts). */
		ck_assert_uint_ge(walked, 15);
		ck_assert_uint_le(walked, view.geo.nbuckets);
		ck_assert_uint_lt(cursor, view.geo.nbuckets);
		ck_assert_uint_eq(SHM_W_STATE(view.buckets[cursor]), SHM_FREE);
		ck_assert_uint_ne(cursor, before);
	}
	ck_assert_uint_gt(calls, 2);	/* stretches, not the whole ring */
	ck_assert_uint_eq(freed, tombs);
	for (int i = 2; i < 96; i += 3) {
		snprintf(rid, sizeof(rid), "s%d", i);
		ck_assert_int_eq(reserve(rid, OWNER_B, 1, &g), SHM_OUT_FOUND);
		ck_assert_uint_eq(g.entry, f[i].entry);
		ck_assert_int_eq(shm_release(&view, f[i].entry, OWNER_A), 0);
	}
	/* A budget as big as the ring walks it whole, once. */
	ck_assert_uint_eq(shm_reclaim_some(&view, &cursor, 256, &walked), 32);
	ck_assert_uint_eq(walked, 256);
	for (uint32_t b = 0; b < view.geo.nbuckets; b++)
		ck_assert_uint_eq(SHM_W_STATE(view.buckets[b]), SHM_FREE);
}
END_TEST

/* The n-th identity (from 0) homed at bucket b, in rid. */
static void homed_nth(char rid[32], uint32_t b, int nth)
{
	struct shm_key k;

	for (int i = 0; i < 10000000; i++) {
		snprintf(rid, 32, "n%d", i);
		key(&k, rid);
		if (((uint32_t)k.hash & (view.geo.nbuckets - 1)) == b &&
		    nth-- == 0)
			return;
	}
	ck_abort_msg("no identity found homed at bucket %u", b);
}

/* A stretch goes on from the last FREE bucket at or before the cursor: a
 * client may have taken the FREE bucket the last stretch ended at, which
 * joined that cluster to the next, and a start after the next FREE bucket
 * would skip a tombstone in it until the walk came round again. */
START_TEST(test_a_stretch_goes_on_where_a_cluster_grew_over_the_cursor)
{
	struct shm_found f;
	uint32_t cursor = 63, walked;
	char rid[32];

	teardown();
	setup_cap(32, 64);	/* 64 buckets */
	for (int j = 0; j < 2; j++) {	/* live at 0 and 1, FREE at 2 */
		homed_nth(rid, 0, j);
		ck_assert_int_eq(reserve(rid, OWNER_A, 1, &f),
				 SHM_OUT_RESERVED);
		ck_assert_uint_eq(f.bucket, (uint32_t)j);
	}
	homed_nth(rid, 3, 0);		/* a tombstone at 3, FREE at 4 */
	ck_assert_int_eq(reserve(rid, OWNER_A, 1, &f), SHM_OUT_RESERVED);
	ck_assert_uint_eq(f.bucket, 3);
	ck_assert_int_eq(shm_release(&view, f.entry, OWNER_A), 0);
	/* One cluster, [0, 2): the cursor stops at 2. */
	ck_assert_uint_eq(shm_reclaim_some(&view, &cursor, 1, &walked), 0);
	ck_assert_uint_eq(cursor, 2);
	ck_assert_uint_eq(walked, 3);
	homed_nth(rid, 2, 0);		/* a client takes 2: [0, 4) now */
	ck_assert_int_eq(reserve(rid, OWNER_A, 1, &f), SHM_OUT_RESERVED);
	ck_assert_uint_eq(f.bucket, 2);
	ck_assert_uint_eq(shm_reclaim_some(&view, &cursor, 1, &walked), 1);
	ck_assert_uint_eq(SHM_W_STATE(view.buckets[3]), SHM_FREE);
	ck_assert_uint_eq(cursor, 4);	/* the cluster's end as walked */
	ck_assert_uint_eq(walked, 2);
}
END_TEST

/* No FREE bucket, and every tombstone crossed: 32 tombstones at buckets 0
 * to 31 and 32 live entries homed at 0 past them, at 32 to 63. Nothing
 * can be freed as the ring is; compacted as one cluster, the entries
 * move back onto the tombstones, and the 32 buckets they left are freed:
 * the index has room again, and every entry is found. */
START_TEST(test_a_ring_of_crossed_tombstones_is_compacted_first)
{
	struct shm_found f[32], g;
	char rid[32][16];
	uint32_t n = 0;

	teardown();
	setup_cap(32, 64);	/* 64 buckets */
	for (int i = 0; n < 64; i++) {
		struct shm_key k;

		snprintf(rid[n % 32], sizeof(rid[0]), "z%d", i);
		key(&k, rid[n % 32]);
		if (((uint32_t)k.hash & (view.geo.nbuckets - 1)) != 0)
			continue;
		ck_assert_int_eq(reserve(rid[n % 32], OWNER_A, 1, &f[n % 32]),
				 SHM_OUT_RESERVED);
		ck_assert_uint_eq(f[n % 32].bucket, n);
		if (++n == 32)	/* the first 32 become the tombstones */
			for (int j = 0; j < 32; j++)
				ck_assert_int_eq(shm_release(&view, f[j].entry,
							     OWNER_A), 0);
	}
	ck_assert(!shm_any_free(&view));
	ck_assert_uint_eq(shm_reclaim(&view), 32);
	for (uint32_t b = 0; b < 64; b++)
		ck_assert_uint_eq(SHM_W_STATE(view.buckets[b]),
				  b < 32 ? SHM_RUNNING : SHM_FREE);
	for (int j = 0; j < 32; j++) {
		ck_assert_int_eq(reserve(rid[j], OWNER_B, 1, &g),
				 SHM_OUT_FOUND);
		ck_assert_uint_eq(g.entry, f[j].entry);
	}
}
END_TEST

/* A reclaim first looks for a tombstone, in stretches of 4,096 buckets:
 * one past the first stretch, or in the last bucket, is found and freed;
 * with none, a pass changes nothing. */

START_TEST(test_a_lone_tombstone_anywhere_is_reclaimed)
{
	static uint64_t before[8192];
	const uint32_t at[] = { 4095, 4096, 4097, 8191 };
	struct shm_found f;
	char rid[32];
	uint32_t seq;

	teardown();
	setup_cap(4096, 64);
	ck_assert_uint_eq(view.geo.nbuckets, 8192);
	for (int i = 0; i < 100; i++) {
		snprintf(rid, sizeof(rid), "live%d", i);
		ck_assert_int_eq(reserve(rid, OWNER_A, 1, &f),
				 SHM_OUT_RESERVED);
	}
	memcpy(before, view.buckets, sizeof(before));
	seq = shm_header(&view)->sh_move_seq;
	ck_assert_uint_eq(shm_reclaim(&view), 0);
	ck_assert_int_eq(memcmp(before, view.buckets, sizeof(before)), 0);
	ck_assert_uint_eq(shm_header(&view)->sh_move_seq, seq);
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		homed_at(rid, at[i]);
		ck_assert_int_eq(reserve(rid, OWNER_A, 1, &f),
				 SHM_OUT_RESERVED);
		ck_assert_uint_eq(f.bucket, at[i]);
		ck_assert_int_eq(shm_release(&view, f.entry, OWNER_A), 0);
		ck_assert_uint_eq(SHM_W_STATE(view.buckets[at[i]]), SHM_TOMB);
		ck_assert_uint_eq(shm_reclaim(&view), 1);
		ck_assert_uint_eq(SHM_W_STATE(view.buckets[at[i]]), SHM_FREE);
	}
}
END_TEST

/* Find n request ids whose identities share one home bucket. */
static void colliding(char ids[][32], int n)
{
	struct shm_key k;
	uint32_t home = UINT32_MAX;
	int got = 0;

	for (int i = 0; got < n; i++) {
		char rid[32];

		snprintf(rid, sizeof(rid), "c%d", i);
		key(&k, rid);
		if (home == UINT32_MAX)
			home = (uint32_t)k.hash & (view.geo.nbuckets - 1);
		if (((uint32_t)k.hash & (view.geo.nbuckets - 1)) == home)
			memcpy(ids[got++], rid, sizeof(rid));
	}
}

START_TEST(test_running_entry_moves_home_and_can_still_be_released)
{
	char ids[3][32];
	struct shm_found f[3], g;
	uint32_t b;
	uint64_t w;

	colliding(ids, 3);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(reserve(ids[i], OWNER_A, 1, &f[i]),
				 SHM_OUT_RESERVED);
	/* The middle one goes: its tombstone lies on the third's path. The
	 * third, still running, moves into it; its old bucket is freed. */
	ck_assert_int_eq(shm_release(&view, f[1].entry, OWNER_A), 0);
	ck_assert_uint_eq(shm_reclaim(&view), 1);
	ck_assert_int_eq(reserve(ids[2], OWNER_B, 1, &g), SHM_OUT_FOUND);
	ck_assert_uint_eq(g.entry, f[2].entry);
	ck_assert_uint_eq(g.bucket, f[1].bucket);
	ck_assert_uint_eq(g.state, SHM_RUNNING);
	/* Its owner still holds it where it now is. */
	ck_assert(shm_owns(&view, f[2].entry, OWNER_A, &b, &w));
	ck_assert_uint_eq(b, f[1].bucket);
	ck_assert_int_eq(shm_release(&view, f[2].entry, OWNER_A), 0);
	ck_assert_uint_eq(shm_reclaim(&view), 1);
	ck_assert_int_eq(reserve(ids[0], OWNER_B, 1, &g), SHM_OUT_FOUND);
	ck_assert_int_eq(reserve(ids[2], OWNER_B, 1, &g), SHM_OUT_RESERVED);
}
END_TEST

START_TEST(test_finished_entry_moves_home_so_tombstones_go)
{
	char ids[3][32];
	struct shm_found f[3], g;
	struct shm_result r;

	colliding(ids, 3);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(reserve(ids[i], OWNER_A, 1, &f[i]),
				 SHM_OUT_RESERVED);
	ck_assert_int_eq(shm_record_result(&view, f[2].entry, OWNER_A, f[2].exec,
					   CARMY_STATUS_COMPLETED, 0, "c", 1, 1),
			 0);
	ck_assert_int_eq(shm_release(&view, f[1].entry, OWNER_A), 0);
	/* The finished third entry moves into the second's bucket; its old
	 * bucket, crossed by nobody now, is freed. */
	ck_assert_uint_eq(shm_reclaim(&view), 1);
	ck_assert_uint_eq(shm_header(&view)->sh_move_seq % 2, 0);
	ck_assert_int_eq(reserve(ids[2], OWNER_B, 1, &g), SHM_OUT_FOUND);
	ck_assert_uint_eq(g.entry, f[2].entry);
	ck_assert_uint_eq(g.bucket, f[1].bucket);
	ck_assert_uint_eq(SHM_W_STATE(view.buckets[f[2].bucket]), SHM_FREE);
	ck_assert_int_eq(shm_read_result(&view, g.entry, g.bucket, g.word, &r), 0);
	ck_assert_mem_eq(r.data, "c", 1);
	free(r.data);
}
END_TEST

START_TEST(test_move_cut_short_by_a_crash_is_repaired)
{
	char ids[2][32];
	struct shm_found f[2], g;
	uint64_t w;

	colliding(ids, 2);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(reserve(ids[i], OWNER_A, 1, &f[i]),
				 SHM_OUT_RESERVED);
	ck_assert_int_eq(shm_record_result(&view, f[1].entry, OWNER_A, f[1].exec,
					   CARMY_STATUS_COMPLETED, 0, "x", 1, 1),
			 0);
	ck_assert_int_eq(shm_release(&view, f[0].entry, OWNER_A), 0);
	/* A carmyd died after copying the word, before anything else. */
	w = view.buckets[f[1].bucket];
	view.buckets[f[0].bucket] = shm_word(SHM_COMPLETED, 9, SHM_W_TAG(w),
					     f[1].entry);
	shm_header(&view)->sh_move_seq = 1;
	ck_assert_int_eq(reserve(ids[1], OWNER_B, 1, &g), SHM_OUT_BUSY);
	shm_repair_moves(&view);
	ck_assert_uint_eq(SHM_W_STATE(view.buckets[f[0].bucket]), SHM_TOMB);
	ck_assert_int_eq(reserve(ids[1], OWNER_B, 1, &g), SHM_OUT_FOUND);
	ck_assert_uint_eq(g.bucket, f[1].bucket);
}
END_TEST

START_TEST(test_scribbled_buckets_and_entries_do_not_crash)
{
	struct shm_sweep_stats st = { 0 };
	struct shm_found f;
	struct shm_result r;
	unsigned seed = 3;

	ck_assert_int_eq(reserve("a", OWNER_A, 1, &f), SHM_OUT_RESERVED);
	ck_assert_int_eq(shm_record_result(&view, f.entry, OWNER_A, f.exec,
					   CARMY_STATUS_COMPLETED, 0, "ok", 2, 1),
			 0);
	shm_entry_at(&view, f.entry)->en_result_len = UINT32_MAX;
	ck_assert_int_eq(reserve("a", OWNER_B, 1, &f), SHM_OUT_FOUND);
	ck_assert_int_eq(shm_read_result(&view, f.entry, f.bucket, f.word, &r), 0);
	ck_assert_uint_le(r.len, view.geo.max_result);
	free(r.data);
	for (int round = 0; round < 200; round++) {
		uint8_t *p = view.base + SHM_HEADER_SIZE;
		size_t n = view.geo.size - SHM_HEADER_SIZE;

		for (int i = 0; i < 64; i++)
			p[(size_t)rand_r(&seed) % n] = (uint8_t)rand_r(&seed);
		for (uint32_t b = 0; b < view.geo.nbuckets; b += 7)
			view.buckets[b] = ((uint64_t)rand_r(&seed) << 33) ^
					  (uint64_t)rand_r(&seed);
		(void)reserve("a", OWNER_B, 1, &f);
		(void)reserve("b", OWNER_B, 2, &f);
		shm_sweep(&view, &sweep_a, &st);
		shm_reclaim(&view);
	}
}
END_TEST

/* ------------------------------------------------------------ threads */

struct racer {
	pthread_barrier_t *bar;
	uint32_t owner;
	enum shm_outcome out;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	struct shm_found f;

	pthread_barrier_wait(r->bar);
	r->out = reserve("contended", r->owner, 1, &f);
	return NULL;
}

START_TEST(test_threads_racing_one_identity_reserve_once)
{
	enum { N = 8 };
	pthread_barrier_t bar;
	pthread_t t[N];
	struct racer r[N];

	for (int round = 0; round < 300; round++) {
		int reserved = 0;
		struct shm_found f;

		teardown();
		setup();
		pthread_barrier_init(&bar, NULL, N);
		for (int i = 0; i < N; i++) {
			r[i] = (struct racer){ &bar, OWNER_A + (uint32_t)i, 0 };
			pthread_create(&t[i], NULL, race, &r[i]);
		}
		for (int i = 0; i < N; i++) {
			pthread_join(t[i], NULL);
			if (r[i].out == SHM_OUT_RESERVED)
				reserved++;
			else
				ck_assert_int_eq(r[i].out, SHM_OUT_FOUND);
		}
		pthread_barrier_destroy(&bar);
		ck_assert_int_eq(reserved, 1);
		/* Losers gave their tickets back: exactly one is held. */
		int held = 0;
		for (uint32_t e = 0; e < view.geo.capacity; e++)
			held += view.tickets[e] != SHM_TICKET_FREE;
		ck_assert_int_eq(held, 1);
		ck_assert_int_eq(reserve("contended", OWNER_B, 1, &f),
				 SHM_OUT_FOUND);
	}
}
END_TEST

/* ------------------------------------------------------------ pending */

/* A reservation a durable store has yet to answer (en_pending set). */
static void reserve_pending(const char *rid, struct shm_found *f)
{
	uint8_t fp[SHM_FP_LEN], exec[SHM_EXEC_LEN];
	static uint32_t cursor;
	struct shm_claim c = { .owner = OWNER_A, .pid = 1, .fp = fp,
			       .make_exec = make_exec, .arg = exec,
			       .cursor = &cursor, .pending = true };
	struct shm_key k;

	memset(fp, 1, sizeof(fp));
	memset(exec, 0x5a, sizeof(exec));
	exec[0] = (uint8_t)rid[0];
	key(&k, rid);
	ck_assert_int_eq(shm_reserve(&view, &k, &c, f), SHM_OUT_RESERVED);
	ck_assert_uint_eq(shm_entry_at(&view, f->entry)->en_pending, 1);
}

struct pending_waiter {
	uint32_t entry;
	const uint8_t *exec;
	int rc;
	uint64_t ms;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void *wait_pending(void *arg)
{
	struct pending_waiter *w = arg;
	uint64_t t0 = now_ms();

	w->rc = shm_wait_pending(&view, w->entry, w->exec, 30000);
	w->ms = now_ms() - t0;
	return NULL;
}

/* Whoever gives a pending entry back ends it first: a caller that found
 * it running and comes to wait only after the give-back looks again at
 * once, instead of sleeping on a word nobody will ever wake. */
START_TEST(test_a_pending_entry_given_back_sends_late_waiters_back)
{
	struct pending_waiter w;
	struct shm_found f, g;

	reserve_pending("p", &f);
	ck_assert_int_eq(reserve("p", OWNER_B, 1, &g), SHM_OUT_FOUND);
	ck_assert_int_eq(g.state, SHM_RUNNING);
	shm_withdraw_pending(&view, f.entry, f.exec);
	ck_assert_int_eq(shm_release_as(&view, f.entry, OWNER_A, f.exec), 0);
	ck_assert_uint_eq(shm_entry_at(&view, f.entry)->en_pending, 3);
	w = (struct pending_waiter){ .entry = g.entry, .exec = g.exec };
	wait_pending(&w);
	ck_assert_int_eq(w.rc, 1);
	/* Not the 30 s it would sleep if the word were left pending. */
	ck_assert_msg(w.ms < 15000, "waited %llu ms", (unsigned long long)w.ms);
}
END_TEST

/* A waiter asleep on a pending entry is woken when the store's answer
 * comes; after it, the entry stands and nobody waits. Values no writer
 * makes, and an entry that is another execution's by now, never put a
 * caller to sleep. */
START_TEST(test_settling_wakes_waiters_and_odd_words_do_not_hold_anyone)
{
	struct pending_waiter w;
	struct shm_entry *en;
	struct shm_found f;
	uint8_t other[SHM_EXEC_LEN];
	pthread_t t;

	reserve_pending("q", &f);
	en = shm_entry_at(&view, f.entry);
	w = (struct pending_waiter){ .entry = f.entry, .exec = f.exec };
	ck_assert_int_eq(pthread_create(&t, NULL, wait_pending, &w), 0);
	/* The waiter is registered once it has marked the word. */
	for (uint64_t t0 = now_ms();
	     __atomic_load_n(&en->en_pending, __ATOMIC_ACQUIRE) != 2;
	     sched_yield())
		ck_assert_msg(now_ms() - t0 < 20000, "the waiter never waited");
	shm_settle_pending(&view, f.entry, f.exec);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_int_eq(w.rc, 1);
	ck_assert_msg(w.ms < 15000, "woken after %llu ms",
		      (unsigned long long)w.ms);
	ck_assert_uint_eq(en->en_pending, 0);
	ck_assert_int_eq(shm_wait_pending(&view, f.entry, f.exec, 30000), 0);

	__atomic_store_n(&en->en_pending, 7, __ATOMIC_RELEASE);
	ck_assert_int_eq(shm_wait_pending(&view, f.entry, f.exec, 30000), 0);
	memset(other, 0xee, sizeof(other));
	__atomic_store_n(&en->en_pending, 1, __ATOMIC_RELEASE);
	ck_assert_int_eq(shm_wait_pending(&view, f.entry, other, 30000), 1);
	ck_assert_uint_eq(en->en_pending, 1);	/* not another's to mark */
	ck_assert_int_eq(shm_wait_pending(&view, view.geo.capacity, f.exec,
					  30000), 0);
}
END_TEST

/* What a look at a running entry says of its en_pending, read with the
 * state it saw: pending while a durable store has yet to answer (and
 * again while a shared store's release of it is on its way), not once
 * settled, nor for a value no writer makes. A caller that saw it pending
 * looks again rather than name it (libclient, begin). */
static bool found_pending(const char *rid)
{
	uint8_t fp[SHM_FP_LEN], exec[SHM_EXEC_LEN];
	static uint32_t cursor;
	struct shm_claim c = { .owner = OWNER_A, .pid = 1, .fp = fp,
			       .make_exec = make_exec, .arg = exec,
			       .cursor = &cursor };
	struct shm_found f, g;
	struct shm_key k;

	memset(fp, 1, sizeof(fp));
	memset(exec, 0, sizeof(exec));
	key(&k, rid);
	ck_assert_int_eq(shm_reserve(&view, &k, &c, &f), SHM_OUT_FOUND);
	ck_assert_uint_eq(f.state, SHM_RUNNING);
	ck_assert(shm_lookup(&view, &k, &g));
	ck_assert_int_eq(g.pending, f.pending);
	return f.pending;
}

START_TEST(test_a_look_says_whether_the_entry_was_pending)
{
	struct shm_entry *en;
	struct shm_found f;

	reserve_pending("w", &f);
	ck_assert(f.pending);
	en = shm_entry_at(&view, f.entry);
	ck_assert(found_pending("w"));
	shm_settle_pending(&view, f.entry, f.exec);
	ck_assert(!found_pending("w"));
	ck_assert(shm_mark_pending(&view, f.entry, f.exec));
	ck_assert(found_pending("w"));
	ck_assert(!shm_mark_pending(&view, f.entry, f.exec));	/* once */
	__atomic_store_n(&en->en_pending, 7, __ATOMIC_RELEASE);
	ck_assert(!found_pending("w"));
	__atomic_store_n(&en->en_pending, 3, __ATOMIC_RELEASE);
	ck_assert(found_pending("w"));
}
END_TEST

struct ack_waiter {
	uint32_t slot;
	const uint8_t *exec;
	uint32_t last;
	int rc;
	uint64_t ms;
};

static void *wait_ack(void *arg)
{
	struct ack_waiter *w = arg;
	uint64_t t0 = now_ms();

	w->rc = shm_ack_wait(&view, w->slot, &w->last, w->exec, 30000);
	w->ms = now_ms() - t0;
	return NULL;
}

/*
 * An ack slot, a connection's word for carmyd's answers to its RESERVEs
 * and COMPLETEs: a client asleep on it is woken by the answer, which says
 * whether it is done or on the socket. carmyd's answer lands only on a
 * word awaiting the answer about that execution, and only once; missed,
 * carmyd is told so (and answers on the socket). A client awaits only from
 * the value it last saw: once carmyd handed the slot to another connection
 * (and marked it), or anyone wrote over it, the client's claim fails, and
 * a client whose word was written over while it waited is told so. A wait
 * with no answer ends at its time, the word still saying that the client
 * sleeps.
 */
START_TEST(test_an_ack_wakes_its_client_and_says_where_the_answer_is)
{
	const uint32_t slot = SHM_ACK_SLOTS - 1;
	uint8_t exec[SHM_EXEC_LEN], other[SHM_EXEC_LEN];
	uint32_t *word = &view.acks[slot].ak_word, last, stale, before;
	struct ack_waiter w;
	pthread_t t;

	memset(exec, 0x5a, sizeof(exec));
	memset(other, 0xee, sizeof(other));
	last = shm_ack_mark(&view, slot, 1);
	ck_assert_uint_eq(*word, last);
	ck_assert(shm_ack_expect(&view, slot, &last, exec));
	ck_assert_uint_eq(*word & 3, 1);
	w = (struct ack_waiter){ .slot = slot, .exec = exec, .last = last };
	ck_assert_int_eq(pthread_create(&t, NULL, wait_ack, &w), 0);
	for (uint64_t t0 = now_ms();
	     (__atomic_load_n(word, __ATOMIC_ACQUIRE) & 3) != 2; sched_yield())
		ck_assert_msg(now_ms() - t0 < 20000, "the client never slept");
	ck_assert_int_eq(shm_ack(&view, slot, exec, true), SHM_ACK_TOLD_ASLEEP);
	shm_ack_wake(&view, slot);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_int_eq(w.rc, SHM_ACK_DONE);
	/* Woken, not found at the end of its 30 s. */
	ck_assert_msg(w.ms < 15000, "woken after %llu ms",
		      (unsigned long long)w.ms);
	ck_assert_uint_eq(*word & 3, 0);
	ck_assert_uint_eq(w.last, *word);
	last = w.last;
	/* Told once: a second answer is not awaited. */
	ck_assert_int_eq(shm_ack(&view, slot, exec, false), SHM_ACK_MISSED);
	ck_assert_uint_eq(*word & 3, 0);

	/* Answered on the socket before the client looks. */
	ck_assert(shm_ack_expect(&view, slot, &last, exec));
	ck_assert_int_eq(shm_ack(&view, slot, exec, false), SHM_ACK_TOLD);
	ck_assert_uint_eq(*word & 3, 3);
	ck_assert_int_eq(shm_ack_wait(&view, slot, &last, exec, 30000),
			 SHM_ACK_SOCKET);

	/* The client awaits the answer about another execution: this one
	 * does not land. */
	ck_assert(shm_ack_expect(&view, slot, &last, other));
	before = *word;
	ck_assert_int_eq(shm_ack(&view, slot, exec, true), SHM_ACK_MISSED);
	ck_assert_uint_eq(*word, before);

	/* carmyd hands the slot to another connection: what the client
	 * that had it still writes does not land, and if it was waiting,
	 * it learns that its word is gone. */
	stale = last;
	last = shm_ack_mark(&view, slot, 2);
	ck_assert(!shm_ack_expect(&view, slot, &stale, exec));
	ck_assert_uint_eq(*word, last);
	ck_assert_int_eq(shm_ack_wait(&view, slot, &stale, other, 30000),
			 SHM_ACK_LOST);

	/* No answer: the wait ends at its time. */
	ck_assert(shm_ack_expect(&view, slot, &last, exec));
	ck_assert_int_eq(shm_ack_wait(&view, slot, &last, exec, 50),
			 -ETIMEDOUT);
	ck_assert_uint_eq(*word & 3, 2);

	/* Values nobody writes, and slots beyond the region. */
	__atomic_store_n(word, 77, __ATOMIC_RELEASE);
	ck_assert_int_eq(shm_ack_wait(&view, slot, &last, exec, 30000),
			 SHM_ACK_LOST);
	ck_assert_int_eq(shm_ack(&view, slot, exec, true), SHM_ACK_MISSED);
	ck_assert_uint_eq(*word, 77);
	ck_assert_int_eq(shm_ack_wait(&view, SHM_ACK_SLOTS, &last, exec, 30000),
			 SHM_ACK_LOST);
	ck_assert_int_eq(shm_ack(&view, UINT32_MAX, exec, true),
			 SHM_ACK_MISSED);
	shm_ack_wake(&view, SHM_ACK_SLOTS);
	ck_assert(!shm_ack_expect(&view, UINT32_MAX, &last, exec));
	(void)shm_ack_mark(&view, SHM_ACK_SLOTS, 3);
}
END_TEST

/*
 * A reservation posted in a slot (shm/post.c): taken whole by the loop
 * while its bell says awake, taken back by the client when it does not,
 * refused when torn, and never taken for a slot handed on.
 */
START_TEST(test_a_posted_request_is_taken_whole_or_taken_back)
{
	const uint32_t slot = SHM_ACK_SLOTS - 2, bell = SHM_BELLS - 1;
	struct shm_ack_slot *s = &view.acks[slot];
	struct shm_post p = { .type = 4, .entry = 7 };
	struct shm_post got;
	uint32_t gen, stale;

	memset(p.exec, 0x3c, sizeof(p.exec));
	gen = shm_ack_mark(&view, slot, 11) >> 2;
	shm_post_reset(&view, slot, gen);

	/* Nothing posted: nothing taken. */
	ck_assert(!shm_post_ready(&view, slot, gen));
	ck_assert_int_eq(shm_post_take(&view, slot, gen, &got), 0);

	/* The loop is awake: the post stays for it, whole. */
	shm_bell_set(&view, bell, true);
	ck_assert_int_eq(shm_post(&view, slot, bell, gen, &p), SHM_POSTED);
	ck_assert(shm_post_ready(&view, slot, gen));
	/* A post not yet taken is not written over by the next. */
	ck_assert_int_eq(shm_post(&view, slot, bell, gen, &p), -ESTALE);
	ck_assert_int_eq(shm_post_take(&view, slot, gen, &got), 1);
	ck_assert_uint_eq(got.type, 4);
	ck_assert_uint_eq(got.entry, 7);
	ck_assert_mem_eq(got.exec, p.exec, sizeof(p.exec));
	/* Taken once: not again, and the client cannot take it back. */
	ck_assert_int_eq(shm_post_take(&view, slot, gen, &got), 0);
	ck_assert(!shm_post_withdraw(&view, slot, gen));

	/* The loop sleeps: the client takes it back, to send it. */
	shm_bell_set(&view, bell, false);
	ck_assert_int_eq(shm_post(&view, slot, bell, gen, &p), SHM_WITHDRAWN);
	ck_assert(!shm_post_ready(&view, slot, gen));
	ck_assert_int_eq(shm_post_take(&view, slot, gen, &got), 0);

	/* Posted while awake, taken back later (the client's safety net). */
	shm_bell_set(&view, bell, true);
	ck_assert_int_eq(shm_post(&view, slot, bell, gen, &p), SHM_POSTED);
	ck_assert(shm_post_withdraw(&view, slot, gen));
	ck_assert_int_eq(shm_post_take(&view, slot, gen, &got), 0);

	/* Torn after it was posted (the entry, a byte of the exec id, the
	 * type, the sum): taken, and refused. */
	ck_assert_int_eq(shm_post(&view, slot, bell, gen, &p), SHM_POSTED);
	s->ak_entry = 8;
	ck_assert_int_eq(shm_post_take(&view, slot, gen, &got), -EBADMSG);
	ck_assert_int_eq(shm_post(&view, slot, bell, gen, &p), SHM_POSTED);
	s->ak_exec[15] ^= 1;
	ck_assert_int_eq(shm_post_take(&view, slot, gen, &got), -EBADMSG);
	ck_assert_int_eq(shm_post(&view, slot, bell, gen, &p), SHM_POSTED);
	s->ak_type = 2;
	ck_assert_int_eq(shm_post_take(&view, slot, gen, &got), -EBADMSG);
	ck_assert_int_eq(shm_post(&view, slot, bell, gen, &p), SHM_POSTED);
	s->ak_sum ^= 1;
	ck_assert_int_eq(shm_post_take(&view, slot, gen, &got), -EBADMSG);

	/* carmyd hands the slot on: the last client's post does not land,
	 * and one it left is not taken for the new connection's. */
	stale = gen;
	ck_assert_int_eq(shm_post(&view, slot, bell, stale, &p), SHM_POSTED);
	gen = shm_ack_mark(&view, slot, 12) >> 2;
	ck_assert_uint_ne(gen, stale);
	ck_assert(!shm_post_ready(&view, slot, gen));
	ck_assert_int_eq(shm_post_take(&view, slot, gen, &got), 0);
	shm_post_reset(&view, slot, gen);
	ck_assert_int_eq(shm_post(&view, slot, bell, stale, &p), -ESTALE);
	ck_assert(!shm_post_withdraw(&view, slot, stale));
	ck_assert_int_eq(shm_post_take(&view, slot, stale, &got), 0);
	/* A stale client's whole post (its generation in its sum) under
	 * the new generation's word: refused. */
	shm_post_reset(&view, slot, stale);
	ck_assert_int_eq(shm_post(&view, slot, bell, stale, &p), SHM_POSTED);
	__atomic_store_n(&s->ak_post, gen << 2 | 1, __ATOMIC_SEQ_CST);
	ck_assert_int_eq(shm_post_take(&view, slot, gen, &got), -EBADMSG);

	/* Out of range: nothing posted, nothing taken, nothing written. */
	ck_assert_int_eq(shm_post(&view, SHM_ACK_SLOTS, bell, gen, &p),
			 SHM_WITHDRAWN);
	ck_assert_int_eq(shm_post(&view, slot, SHM_BELLS, gen, &p),
			 SHM_WITHDRAWN);
	ck_assert_int_eq(shm_post_take(&view, SHM_ACK_SLOTS, gen, &got), 0);
	ck_assert(!shm_post_ready(&view, UINT32_MAX, gen));
	ck_assert(!shm_post_withdraw(&view, UINT32_MAX, gen));
	shm_post_reset(&view, SHM_ACK_SLOTS, gen);
	shm_bell_set(&view, SHM_BELLS, true);
	shm_bell_set(&view, bell, false);
}
END_TEST

static Suite *table_suite(void)
{
	Suite *s = suite_create("shm");
	TCase *tc = tcase_create("table");

	tcase_add_checked_fixture(tc, setup, teardown);
	/* The scribbling and racing tests take seconds on a loaded VM. */
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_geometry_rejects_out_of_range);
	tcase_add_test(tc, test_owners_claiming_side_by_side_move_apart);
	tcase_add_test(tc, test_an_owner_among_old_entries_keeps_its_way);
	tcase_add_test(tc, test_a_crowd_is_counted_until_a_free_ticket);
	tcase_add_test(tc, test_a_reservation_writes_its_call);
	tcase_add_test(tc, test_call_fill_saturates_and_zeroes);
	tcase_add_test(tc, test_sane_rejects_mismatched_layout_and_corruption);
	tcase_add_test(tc, test_sane_never_accepts_random_headers);
	tcase_add_test(tc, test_reserve_then_same_identity_is_found_running);
	tcase_add_test(tc, test_raw_print_decides_only_when_equal);
	tcase_add_test(tc, test_complete_then_replay_reads_result);
	tcase_add_test(tc, test_a_stalled_replay_never_reads_a_reused_entry);
	tcase_add_test(tc, test_capacity_is_exact_and_release_frees_room);
	tcase_add_test(tc, test_no_carmyd_reserves_nothing_but_replays);
	tcase_add_test(tc, test_liveness_word_reads_dead_once_its_holder_is_gone);
	tcase_add_test(tc, test_restore_alive_puts_back_only_a_scribbled_word);
	tcase_add_test(tc, test_blocked_buckets_nobody_holds_become_tombstones);
	tcase_add_test(tc, test_the_walks_over_a_range_keep_to_it);
	tcase_add_test(tc, test_the_ticks_read_of_the_buckets_spans_stretches);
	tcase_add_test(tc, test_sweep_turns_running_uncertain_and_frees_unpublished);
	tcase_add_test(tc, test_sweep_gives_back_what_was_never_confirmed);
	tcase_add_test(tc, test_give_back_as_frees_only_that_running_execution);
	tcase_add_test(tc, test_bucket_left_blocked_is_busy_until_unblocked);
	tcase_add_test(tc, test_reclaim_keeps_entries_reachable);
	tcase_add_test(tc, test_index_full_of_tombstones_is_reclaimed);
	tcase_add_test(tc, test_reclaim_goes_a_stretch_at_a_time);
	tcase_add_test(tc, test_a_ring_of_crossed_tombstones_is_compacted_first);
	tcase_add_test(tc,
		       test_a_stretch_goes_on_where_a_cluster_grew_over_the_cursor);
	tcase_add_test(tc, test_a_lone_tombstone_anywhere_is_reclaimed);
	tcase_add_test(tc, test_running_entry_moves_home_and_can_still_be_released);
	tcase_add_test(tc, test_finished_entry_moves_home_so_tombstones_go);
	tcase_add_test(tc, test_move_cut_short_by_a_crash_is_repaired);
	tcase_add_test(tc, test_scribbled_buckets_and_entries_do_not_crash);
	tcase_add_test(tc, test_threads_racing_one_identity_reserve_once);
	tcase_add_test(tc, test_a_pending_entry_given_back_sends_late_waiters_back);
	tcase_add_test(tc,
		       test_settling_wakes_waiters_and_odd_words_do_not_hold_anyone);
	tcase_add_test(tc, test_a_look_says_whether_the_entry_was_pending);
	tcase_add_test(tc,
		       test_an_ack_wakes_its_client_and_says_where_the_answer_is);
	tcase_add_test(tc, test_a_posted_request_is_taken_whole_or_taken_back);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(table_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0;
}
