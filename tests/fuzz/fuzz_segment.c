/*
 * fuzz_segment.c - libFuzzer target: the segment sanity check, and carmyd's
 * scans plus a client's table operations over a segment made of arbitrary
 * bytes.
 *
 * Every input starts from the same valid segment (capacity FS_CAPACITY,
 * max_result FS_MAX_RESULT), built once through the real API so that it
 * holds entries in every state (fs_build_template in fuzz_common.h). The
 * first input byte picks a mode (FS_MODE_* there); the rest is written over
 * the segment, header included or not. Then:
 *
 *  - header included: shm_sane() decides, as on every attach. If it refuses,
 *    that is the end. If it accepts, the geometry it returns must fit in the
 *    mapping, and the view is built from it (which may be another geometry
 *    than the template's: any that fits).
 *  - header left alone, or FS_MODE_PRIVATE: shm_sane() runs, but the view
 *    keeps the template's geometry whatever it says, as carmyd and attached
 *    clients do: they never re-read geometry from the segment.
 *
 * On that view it runs what carmyd does at start-up and while running
 * (shm_unblock_all, shm_repair_moves, shm_sweep with every owner dead and
 * every pid gone, shm_reclaim, which compacts) and what clients do
 * (shm_reserve, shm_read_result, shm_owns, shm_release, and carmyd's
 * shm_record_result for a fresh reservation), then carmyd's scans again.
 * None of it may crash, read or write out of bounds (ASan) or hit UB
 * (UBSan). A few protocol facts are checked on top: the same identity is
 * never reserved twice in a row, and a result just recorded replays as it
 * was recorded.
 *
 * The liveness word sits in the header, so it is the fuzzer's bytes in the
 * header modes: no thread here holds it (no keeper registers it on a
 * robust list). Clients only read it (shm_daemon_alive); in the template it
 * says "alive" (FS_FAKE_TID).
 *
 * shm_reserve() and shm_release() wait up to SHM_BUSY_NS while a bucket is
 * BLOCKED or sh_move_seq is odd, which only a carmyd killed mid-reclaim
 * leaves behind; carmyd's start-up repair (shm_unblock_all,
 * shm_repair_moves) therefore runs before any client operation, as it does
 * in carmyd, so that no input makes an execution spin for a second.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "carmy.h"
#include "shm/shm.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NEW_OWNER 1000u	/* a client of the carmyd that swept everyone */
#define NEW_PID 77u

static struct shm_geometry tgeo;	/* the template's geometry */
static uint8_t *tmpl;			/* the template */
static uint8_t *work;			/* the segment each input makes */

static bool all_dead(uint32_t owner, void *arg)
{
	(void)owner;
	(void)arg;
	return true;
}

static bool all_gone(uint32_t pid, void *arg)
{
	(void)pid;
	(void)arg;
	return true;
}

static const struct shm_sweep_ops sweep_all = { all_dead, all_gone, NULL };
static const struct shm_sweep_ops sweep_orphans = { all_dead, fs_never_gone,
						    NULL };

/* Write the input over the segment: see FS_MODE_BODY and FS_MODE_PACKED. */
static void overwrite(uint8_t *seg, unsigned mode, const uint8_t *in, size_t n)
{
	const struct {
		uint64_t off, len;
	} region[] = {
		{ 0, SHM_HEADER_SIZE },
		{ tgeo.tickets_off, (uint64_t)tgeo.capacity * sizeof(uint64_t) },
		{ tgeo.buckets_off, (uint64_t)tgeo.nbuckets * sizeof(uint64_t) },
		{ tgeo.entries_off,
		  (uint64_t)tgeo.capacity * sizeof(struct shm_entry) },
		{ tgeo.calls_off,
		  (uint64_t)tgeo.capacity * sizeof(struct shm_call) },
		{ tgeo.results_off,
		  (uint64_t)tgeo.capacity * tgeo.result_stride },
		/* Answer counts, ack slots (posted requests) and bells. */
		{ SHM_HEADER_SIZE, tgeo.tickets_off - SHM_HEADER_SIZE },
	};
	size_t first = (mode & FS_MODE_BODY) ? 1 : 0;

	if (!(mode & FS_MODE_PACKED)) {
		size_t off = region[first].off;

		if (n > tgeo.size - off)
			n = tgeo.size - off;
		memcpy(seg + off, in, n);
		return;
	}
	for (size_t i = first; i < sizeof(region) / sizeof(region[0]) && n;
	     i++) {
		size_t k = n < region[i].len ? n : (size_t)region[i].len;

		memcpy(seg + region[i].off, in, k);
		in += k;
		n -= k;
	}
}

/* A view of work with the template's geometry: what carmyd keeps. */
static void private_view(struct shm_view *v)
{
	memset(v, 0, sizeof(*v));
	v->base = work;
	v->mapped = tgeo.size;
	v->geo = tgeo;
	v->seed = FS_SEED;
	v->stats = (struct shm_stats *)(work + SHM_HEADER_SIZE);
	v->acks = (struct shm_ack_slot *)(work + SHM_HEADER_SIZE +
					  SHM_STATS_STRIPES *
						  sizeof(struct shm_stats));
	v->bells = (struct shm_bell *)(v->acks + SHM_ACK_SLOTS);
	v->tickets = (uint64_t *)(work + tgeo.tickets_off);
	v->buckets = (uint64_t *)(work + tgeo.buckets_off);
	v->entries = (struct shm_entry *)(work + tgeo.entries_off);
	v->calls = (struct shm_call *)(work + tgeo.calls_off);
	v->results = work + tgeo.results_off;
}

/* carmyd records a result for a reservation NEW_OWNER just made; another
 * client's replay must read exactly that back. */
static void complete_and_replay(struct shm_view *v, const char *rid,
				const struct shm_found *f, uint32_t *cursor)
{
	static const char result[] = "recorded";
	size_t len = sizeof(result) - 1;
	struct shm_result r;
	struct shm_found g;

	if (len > v->geo.max_result)	/* a sane header's other geometry */
		len = v->geo.max_result;
	FUZZ_CHECK(shm_record_result(v, f->entry, NEW_OWNER, f->exec,
				     CARMY_STATUS_COMPLETED, 0, result, len,
				     9) == 0);
	FUZZ_CHECK(fs_reserve(v, rid, NEW_OWNER + 1, NEW_PID, cursor, &g) ==
		   SHM_OUT_FOUND);
	FUZZ_CHECK(g.entry == f->entry && g.state == SHM_COMPLETED);
	FUZZ_CHECK(shm_read_result(v, g.entry, g.bucket, g.word, &r) == 0);
	FUZZ_CHECK(r.status == CARMY_STATUS_COMPLETED && r.result_code == 0);
	FUZZ_CHECK(r.len == len && memcmp(r.data, result, len) == 0);
	FUZZ_CHECK(memcmp(r.exec, f->exec, SHM_EXEC_LEN) == 0);
	free(r.data);
}

/* A client's calls for one identity. */
static void client(struct shm_view *v, const char *rid, unsigned i,
		   uint32_t *cursor)
{
	struct shm_found f, g;
	struct shm_result r;
	enum shm_outcome out;
	uint32_t b;
	uint64_t w;
	int rc;

	out = fs_reserve(v, rid, NEW_OWNER, NEW_PID, cursor, &f);
	switch (out) {
	case SHM_OUT_RESERVED:
		FUZZ_CHECK(f.entry < v->geo.capacity &&
			   f.bucket < v->geo.nbuckets);
		FUZZ_CHECK(shm_owns(v, f.entry, NEW_OWNER, &b, &w) &&
			   b == f.bucket && w == f.word);
		/* At most one execution per identity: a retry finds it. */
		FUZZ_CHECK(fs_reserve(v, rid, NEW_OWNER, NEW_PID, cursor, &g) ==
			   SHM_OUT_FOUND);
		FUZZ_CHECK(g.entry == f.entry && g.state == SHM_RUNNING);
		if (i % 2)
			complete_and_replay(v, rid, &f, cursor);
		else
			FUZZ_CHECK(shm_release(v, f.entry, NEW_OWNER) == 0);
		break;
	case SHM_OUT_FOUND:
		FUZZ_CHECK(f.entry < v->geo.capacity &&
			   f.bucket < v->geo.nbuckets);
		if (f.state == SHM_COMPLETED) {
			rc = shm_read_result(v, f.entry, f.bucket, f.word, &r);
			FUZZ_CHECK(rc == 0 || rc == -EAGAIN);
			if (rc == 0) {
				FUZZ_CHECK(r.len <= v->geo.max_result);
				free(r.data);
			}
		} else {
			/* Not ours: neither releasable nor completable. */
			rc = shm_release(v, f.entry, NEW_OWNER);
			FUZZ_CHECK(rc == CARMY_ENOT_RESERVED ||
				   rc == CARMY_EDISCONNECTED);
			rc = shm_record_result(v, f.entry, NEW_OWNER, f.exec,
					       CARMY_STATUS_COMPLETED, 0, "", 0,
					       9);
			FUZZ_CHECK(rc == CARMY_ENOT_OWNER ||
				   rc == CARMY_ENOT_RESERVED);
		}
		break;
	case SHM_OUT_FULL:
	case SHM_OUT_NOFREE:
	case SHM_OUT_NODAEMON:
	case SHM_OUT_DEAD:
		break;
	case SHM_OUT_BUSY:
	default:
		/* No BLOCKED bucket, no odd sequence after the repair. */
		FUZZ_CHECK(out != SHM_OUT_BUSY);
		FUZZ_CHECK(out <= SHM_OUT_NODAEMON);
	}
}

/* Read every entry's result through whatever its en_bucket says, and ask
 * shm_owns about it: scribbled lengths and indexes must stay in bounds. */
static void read_everything(struct shm_view *v)
{
	for (uint32_t e = 0; e < v->geo.capacity; e++) {
		uint32_t b = v->entries[e].en_bucket;
		uint64_t w = 0;
		struct shm_result r;

		if (b < v->geo.nbuckets)
			w = v->buckets[b];
		if (shm_read_result(v, e, b, w, &r) == 0) {
			FUZZ_CHECK(r.len <= v->geo.max_result);
			free(r.data);
		}
		(void)shm_owns(v, e, NEW_OWNER, &b, &w);
	}
	FUZZ_CHECK(shm_read_result(v, v->geo.capacity, 0, 0, &(struct shm_result){
			   0 }) == -EINVAL);
	for (uint32_t b = 0; b < v->geo.nbuckets; b++) {
		uint32_t home;

		if (shm_entry_home(v, v->buckets[b], &home))
			FUZZ_CHECK(home < v->geo.nbuckets);
	}
}

/* carmyd takes every request the slots say is posted, of the generation
 * they say: whatever their bytes, it stays in bounds, and what it takes is
 * whole or refused. */
static void take_every_post(struct shm_view *v)
{
	for (uint32_t i = 0; i < SHM_ACK_SLOTS; i++) {
		uint32_t gen = v->acks[i].ak_post >> 2;
		struct shm_post p;
		int rc = shm_post_take(v, i, gen, &p);

		FUZZ_CHECK(rc == 0 || rc == 1 || rc == -EBADMSG);
		FUZZ_CHECK(shm_post_take(v, i, gen, &p) == 0);
	}
}

static void carmyd_and_clients(struct shm_view *v, unsigned mode)
{
	static const char *const rids[] = { "a", "b", "c", "d", "f", "n1", "n2",
					    "n3" };
	struct shm_sweep_stats st = { 0 };
	uint32_t cursor = 0;

	/* carmyd start-up (store.c recover()). */
	shm_unblock_all(v);
	shm_repair_moves(v);
	shm_sweep(v, (mode & FS_MODE_ORPHANS) ? &sweep_orphans : &sweep_all,
		  &st);
	shm_sweep(v, &sweep_all, &st);
	(void)shm_reclaim(v);

	/* Clients. */
	read_everything(v);
	take_every_post(v);
	for (unsigned i = 0; i < sizeof(rids) / sizeof(rids[0]); i++)
		client(v, rids[i], i, &cursor);

	/* The clients go; carmyd's check leaves no bucket BLOCKED or in no
	 * state (no reclaim of its own is in flight), it sweeps and
	 * reclaims, twice (the first reclaim may only free one tombstone
	 * when no bucket is FREE), and restarts. */
	(void)shm_unblock_scribbled(v);
	for (uint32_t b = 0; b < v->geo.nbuckets; b++)
		FUZZ_CHECK(SHM_W_STATE(v->buckets[b]) < SHM_BLOCKED);
	shm_sweep(v, &sweep_all, &st);
	(void)shm_reclaim(v);
	(void)shm_reclaim(v);
	shm_unblock_all(v);
	shm_repair_moves(v);
	read_everything(v);
	for (unsigned i = 0; i < sizeof(rids) / sizeof(rids[0]); i++)
		client(v, rids[i], i + 1, &cursor);
}

/* ------------------------------------------------------------ libFuzzer */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct shm_view v;
	void *p;

	(void)argc;
	(void)argv;
	FUZZ_CHECK(shm_geometry(FS_CAPACITY, FS_MAX_RESULT, &tgeo) == 0);
	FUZZ_CHECK(posix_memalign(&p, 4096, tgeo.size) == 0);
	memset(p, 0, tgeo.size);
	FUZZ_CHECK(fs_build_template(p, &tgeo, &v) == 0);
	tmpl = p;
	/* Exactly the segment's size: ASan flags any byte past it. */
	work = malloc(tgeo.size);
	FUZZ_CHECK(work != NULL);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct shm_geometry geo;
	struct shm_view v;
	unsigned mode;
	int rc;

	if (size == 0)
		return 0;
	mode = data[0];
	memcpy(work, tmpl, tgeo.size);
	overwrite(work, mode, data + 1, size - 1);

	rc = shm_sane(work, tgeo.size, &geo);
	FUZZ_CHECK(rc == 0 || rc == CARMY_ECORRUPT || rc == CARMY_ELAYOUT);
	if (rc == 0) {
		FUZZ_CHECK(geo.size <= tgeo.size);
		FUZZ_CHECK(geo.nbuckets >= 2 * geo.capacity &&
			   (geo.nbuckets & (geo.nbuckets - 1)) == 0);
		FUZZ_CHECK(geo.result_stride >= geo.max_result);
		FUZZ_CHECK(geo.results_off + (uint64_t)geo.capacity *
						     geo.result_stride <=
			   geo.size);
	}
	if (mode & FS_MODE_BODY)
		FUZZ_CHECK(rc == 0);	/* the header was not touched */

	if ((mode & FS_MODE_BODY) || (mode & FS_MODE_PRIVATE)) {
		private_view(&v);
	} else {
		if (rc != 0)
			return 0;
		FUZZ_CHECK(shm_view_init(&v, work, tgeo.size) == 0);
		FUZZ_CHECK(memcmp(&v.geo, &geo, sizeof(geo)) == 0);
	}
	carmyd_and_clients(&v, mode);
	return 0;
}
