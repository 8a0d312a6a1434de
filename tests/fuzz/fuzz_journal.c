/*
 * fuzz_journal.c - libFuzzer target: the journal store reading back a
 * journal file it did not write, or wrote and then lost part of.
 *
 * Random bytes would almost never get past a record's checksum, so the
 * input is not the file itself but a recipe for one: records whose heads,
 * padding and checksums this harness seals under the file's salt (with
 * the journal's own jnl_rec_seal()), with
 * bodies (and ops, and batch numbers) from the input. That reaches what
 * the checksum guards: sizes inside a record that lie, results for
 * executions never reserved, the same exec id or identity twice, releases
 * and purges of the wrong state. A recipe may end in a record cut short
 * (written raw, unsealed: a torn write), ask for a byte to be flipped after
 * sealing (damage on disk), and leave zeros after the records (a file
 * grown ahead of its end).
 *
 *   byte 0       flags, FJ_* (fuzz_common.h)
 *   [FJ_FLIP]    4 bytes: where (mod the file's size), 1 byte: XOR mask;
 *                with FJ_ACKED, not applied to the recipe but, once the
 *                store has accepted and rewritten the file, as 1 to 3
 *                bits (5, below)
 *   [FJ_HOLE]    1 byte: the first of 1 to 8 sectors (512 bytes) of the
 *                records to leave zeros (mod their sectors), 1 byte: how
 *                many (mod 8, plus 1): a batch that never reached the
 *                disk, or part of one, with later records whole after it
 *   then records, until the input ends:
 *     op         1 byte, as is (unknown ops included)
 *     back       1 byte: jr_batch = seq - back (and with FJ_LIE, jr_seq
 *                is off by back's top bits)
 *     blen       2 bytes, little-endian: the body's length
 *     body       blen bytes, between the head and the padding; if fewer
 *                remain, the head and what remains are written unsealed
 *
 * Then, as carmyd and carmyctl would:
 *  1. journal_check() reads the file (never writes it);
 *  2. the store's open() recovers it: it must refuse exactly what the
 *     check refused, and a refused file is left byte for byte as it was
 *     (nothing that may have been acknowledged is cut); opened, load()
 *     hands over every execution standing, each of which must be whole
 *     and sane, as many completed and unfinished as the check counted;
 *     with FJ_HOLE (and neither FJ_FLIP nor FJ_LIE), the first record the
 *     hole changed is where an accepted journal ends (every record before
 *     it kept, none after it read), and a record left whole after it whose
 *     batch field is past that one's number (written once it was durable,
 *     so it may have been acknowledged) gets the file refused;
 *  3. with FJ_SUBMIT, a new execution is reserved and completed through
 *     submit(): acknowledged, so it must stand after a reopen;
 *  4. closed, checked again (no torn tail left, the same executions) and
 *     opened again: load() hands over the same executions, byte for byte;
 *  5. with FJ_ACKED, that journal, every record of which stands as
 *     acknowledged, gets 1 to 3 bits flipped in its header, its records or
 *     the 512 bytes of zeros after them: the check and open() must both
 *     refuse it (never read it as good, never cut it as a torn write), and
 *     the refusal must leave it as it is.
 * With FJ_COMPACT the open compacts at start whenever it would with a big
 * journal (CARMY_JOURNAL_COMPACT_MIN=1), so the rewrite is checked too.
 *
 * The journal directory is on /dev/shm (tmpfs: its fsyncs cost nothing).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "carmy.h"
#include "carmy_store.h"
#include "common/log.h"
#include "stores/journal/internal.h"
#include "stores/journal/journal.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FJ_FILE_MAX (1u << 20)	/* the file a recipe makes, at most */
#define FJ_ZERO_TAIL 4096

static char dir[64];
static char path[128];
static uint8_t *file;		/* the file the recipe made */
static uint8_t *again;		/* the file as it is after a refusal */
static bool clash;		/* the file holds FJ_SUBMIT's exec id or
				 * its identity's first part */
static uint8_t fj_exec[16], fj_part[3][CARMY_STORE_ID_MAX];
static uint32_t fj_flip_at;	/* FJ_FLIP's bytes, for FJ_ACKED */
static uint8_t fj_flip;

#define FJ_EXEC_BYTE 0xee	/* FJ_SUBMIT's exec id: 16 of these */

/* The records a recipe wrote, for FJ_HOLE's check. */
#define FJ_RECS_MAX 32768
static struct fj_rec {
	uint64_t off, len;	/* in the file: what was written of it */
	uint64_t seq, batch;
	bool sealed;		/* whole as sealed, not cut short */
} fj_recs[FJ_RECS_MAX];
static size_t fj_nrecs;

/* What FJ_HOLE's hole did: the first record it changed (at off, numbered
 * seq), and whether a record it left whole proves that one durable. */
static struct {
	bool on;		/* a hole changed a record, and is checked */
	uint64_t off, seq;
	bool proved;
} fj_hole;

/* One store's view of what stands: how many, of which with a result, and
 * a digest of every byte load() handed over, independent of order. */
struct standing {
	uint64_t n, completed, digest;
};

/* A record the recipe wrote: len bytes of it at off. */
static void note_rec(uint64_t off, uint64_t len, const struct jrec_head *rh,
		     bool sealed)
{
	if (fj_nrecs < FJ_RECS_MAX)
		fj_recs[fj_nrecs] = (struct fj_rec){ off, len, rh->jr_seq,
						     rh->jr_batch, sealed };
	fj_nrecs++;
}

/* Did zeroing [lo, hi) change the record r? Its bytes there were not all
 * zeros already. */
static bool hole_changes(const struct fj_rec *r, uint64_t lo, uint64_t hi)
{
	uint64_t a = r->off > lo ? r->off : lo;
	uint64_t b = r->off + r->len < hi ? r->off + r->len : hi;

	for (uint64_t p = a; p < b; p++)
		if (file[p] != 0)
			return true;
	return false;
}

/*
 * FJ_HOLE: sectors of the records (which end at end) left as the zeros
 * the file grew with, as when a batch in flight never reached the disk
 * and a later one did. With check, note the first record it changes, and
 * whether a good record it leaves whole was written once that one was
 * durable (its batch field is past that one's number), for the check
 * after recovery.
 */
static void make_hole(const uint8_t hole[2], uint64_t end, bool check,
		      uint64_t salt)
{
	uint64_t nsec = (end + JREC_SECTOR - 1) / JREC_SECTOR;
	uint64_t lo = (hole[0] % nsec) * JREC_SECTOR;
	uint64_t hi = lo + (1u + hole[1] % 8u) * JREC_SECTOR;
	size_t first = SIZE_MAX;

	if (lo < HEAD_SIZE)
		lo = HEAD_SIZE;
	if (hi > end)
		hi = end;
	if (lo >= hi || fj_nrecs > FJ_RECS_MAX)
		check = false;
	for (size_t i = 0; check && i < fj_nrecs; i++) {
		const struct fj_rec *r = &fj_recs[i];

		if (first == SIZE_MAX) {
			if (hole_changes(r, lo, hi))
				first = i;
			continue;
		}
		if (r->sealed && !hole_changes(r, lo, hi) &&
		    r->batch > fj_recs[first].seq &&
		    jnl_rec_valid(salt, file + r->off, end - r->off, r->seq))
			fj_hole.proved = true;
	}
	if (check && first != SIZE_MAX) {
		fj_hole.on = true;
		fj_hole.off = fj_recs[first].off;
		fj_hole.seq = fj_recs[first].seq;
	}
	if (lo < hi)
		memset(file + lo, 0, (size_t)(hi - lo));
}

/* Build the file from the recipe; returns its size. */
static size_t build(const uint8_t *d, size_t size, uint8_t flags)
{
	struct jfile_head h;
	uint32_t flip_at = 0;
	uint8_t flip = 0, hole[2] = { 0, 0 };
	size_t at, in = 1;
	uint64_t seq = 0;

	/* A salt of its own, like every new journal, but the same one for
	 * every input: a crash must replay the same way. */
	fj_nrecs = 0;
	memset(&fj_hole, 0, sizeof(fj_hole));
	jnl_make_head(&h);
	h.jf_salt = UINT64_C(0x5eed5a175eed5a17);
	h.jf_check = XXH3_64bits(&h, offsetof(struct jfile_head, jf_check));
	memcpy(file, &h, sizeof(h));
	at = sizeof(h);
	if (flags & FJ_FLIP) {
		if (size < in + 5)
			return at;
		memcpy(&flip_at, d + in, 4);
		flip = d[in + 4];
		in += 5;
	}
	fj_flip_at = flip_at;
	fj_flip = flip;
	if (flags & FJ_HOLE) {
		if (size < in + 2)
			return at;
		hole[0] = d[in];
		hole[1] = d[in + 1];
		in += 2;
	}
	while (in + 4 <= size) {
		struct jrec_head rh;
		uint16_t blen;
		size_t len;

		memset(&rh, 0, sizeof(rh));
		rh.jr_op = d[in];
		blen = (uint16_t)(d[in + 2] | d[in + 3] << 8);
		seq++;
		rh.jr_seq = seq;
		if (flags & FJ_LIE)
			rh.jr_seq += (uint64_t)(d[in + 1] >> 6) - 1;
		rh.jr_batch = seq - (d[in + 1] & 0x3f) % seq;
		in += 4;
		len = (sizeof(rh) + blen + 7) / 8 * 8 + 8;
		rh.jr_len = (uint32_t)len;
		if (size - in < blen ||
		    at + len > FJ_FILE_MAX - FJ_ZERO_TAIL) {
			/* Cut short: its head sealed as if it were whole
			 * (the bytes the input lacks taken as 0xa5), then
			 * what remains of it, and zeros where the rest was
			 * not written. */
			size_t n = size - in;

			if (at + sizeof(rh) + n > FJ_FILE_MAX - FJ_ZERO_TAIL)
				n = FJ_FILE_MAX - FJ_ZERO_TAIL - at -
				    sizeof(rh);
			memset(file + at, 0, sizeof(rh) + n);
			memcpy(file + at, &rh, sizeof(rh));
			memcpy(file + at + sizeof(rh), d + in, n);
			if (at + len <= FJ_FILE_MAX) {
				static uint8_t whole[FJ_FILE_MAX];

				memset(whole, 0xa5, len);
				memcpy(whole, file + at, sizeof(rh) + n);
				jnl_rec_seal(whole, at, h.jf_salt);
				memcpy(file + at, whole, sizeof(rh));
			}
			note_rec(at, sizeof(rh) + n, &rh, false);
			at += sizeof(rh) + n;
			break;
		}
		memset(file + at, 0, len);
		memcpy(file + at, &rh, sizeof(rh));
		memcpy(file + at + sizeof(rh), d + in, blen);
		jnl_rec_seal(file + at, at, h.jf_salt);
		note_rec(at, len, &rh, true);
		at += len;
		in += blen;
	}
	if (flags & FJ_HOLE)
		make_hole(hole, at, !(flags & (FJ_FLIP | FJ_LIE)), h.jf_salt);
	if (flags & FJ_ZEROS) {
		memset(file + at, 0, FJ_ZERO_TAIL);
		at += FJ_ZERO_TAIL;
	}
	if ((flags & FJ_FLIP) && !(flags & FJ_ACKED) && flip != 0)
		file[flip_at % at] ^= flip;
	return at;
}

static void write_file(const uint8_t *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	FUZZ_CHECK(fd >= 0);
	FUZZ_CHECK(write(fd, p, n) == (ssize_t)n);
	close(fd);
}

static size_t read_file(uint8_t *p, size_t max)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	FUZZ_CHECK(fd >= 0);
	n = read(fd, p, max);
	FUZZ_CHECK(n >= 0);
	close(fd);
	return (size_t)n;
}

/* load()'s callback: every execution handed over is whole and sane. */
static int each(void *arg, const struct carmy_store_record *r)
{
	struct standing *st = arg;
	XXH3_state_t *s = XXH3_createState();
	size_t id = 0;

	FUZZ_CHECK(s != NULL);
	XXH3_64bits_reset(s);
	for (int k = 0; k < 3; k++) {
		FUZZ_CHECK(r->len[k] >= 1 && r->len[k] <= CARMY_STORE_ID_MAX);
		FUZZ_CHECK(r->part[k] != NULL);
		XXH3_64bits_update(s, &r->len[k], sizeof(r->len[k]));
		XXH3_64bits_update(s, r->part[k], r->len[k]);	/* ASan reads */
		id += r->len[k];
	}
	FUZZ_CHECK(id <= 3 * CARMY_STORE_ID_MAX);
	XXH3_64bits_update(s, r->exec, sizeof(r->exec));
	XXH3_64bits_update(s, r->fingerprint, sizeof(r->fingerprint));
	XXH3_64bits_update(s, &r->state, sizeof(r->state));
	FUZZ_CHECK(r->state == CARMY_STORE_RUNNING ||
		   r->state == CARMY_STORE_COMPLETED);
	if (r->state == CARMY_STORE_COMPLETED) {
		FUZZ_CHECK(r->result != NULL || r->result_len == 0);
		FUZZ_CHECK(r->result_len <= (64u << 20));
		XXH3_64bits_update(s, &r->status, sizeof(r->status));
		XXH3_64bits_update(s, &r->result_code, sizeof(r->result_code));
		XXH3_64bits_update(s, r->result, r->result_len);
		st->completed++;
	} else {
		FUZZ_CHECK(r->result_len == 0);
	}
	st->n++;
	st->digest += XXH3_64bits_digest(s);	/* order does not matter */
	XXH3_freeState(s);
	return 0;
}

/* A request's done(), from whichever thread made it durable. */
struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int rc;
};

static void on_done(struct carmy_store_req *req, int rc)
{
	struct waiter *w = req->cookie;

	pthread_mutex_lock(&w->lock);
	w->rc = rc;
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static int submit(void *store, enum carmy_store_op op,
		  const struct carmy_store_record *rec)
{
	struct waiter w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
			    false, 0 };
	struct carmy_store_req req = { .op = op, .rec = rec, .done = on_done,
				       .cookie = &w };

	journal_store_ops.submit(store, &req);
	pthread_mutex_lock(&w.lock);
	while (!w.done)
		pthread_cond_wait(&w.cond, &w.lock);
	pthread_mutex_unlock(&w.lock);
	return w.rc;
}

/* Reserve and complete one new execution, as carmyd would: an identity
 * that does not stand and an exec id never used (the caller skips this
 * when the recipe made either, see clash). Adds it to *add; returns 0 or
 * what the store refused it with. */
static int append_one(void *store, struct standing *add)
{
	static const char result[] = "appended after recovery";
	struct carmy_store_record rec;
	struct standing one = { 0, 0, 0 };
	int rc;

	memset(&rec, 0, sizeof(rec));
	for (int k = 0; k < 3; k++) {
		rec.part[k] = fj_part[k];
		rec.len[k] = CARMY_STORE_ID_MAX;
	}
	memcpy(rec.exec, fj_exec, sizeof(rec.exec));
	memset(rec.fingerprint, 0xf1, sizeof(rec.fingerprint));
	rec.pid = 1;
	rec.started_ns = 1;
	rc = submit(store, CARMY_STORE_RESERVE, &rec);
	if (rc != 0)
		return rc;
	rec.finished_ns = 2;
	rec.status = CARMY_STATUS_COMPLETED;
	rec.result = result;
	rec.result_len = sizeof(result);
	rc = submit(store, CARMY_STORE_COMPLETE, &rec);
	if (rc != 0)
		return rc;
	rec.state = CARMY_STORE_COMPLETED;
	each(&one, &rec);
	*add = one;
	return 0;
}

/* The journal directory goes with the fuzzer (a crash keeps it). */
static void remove_dir(void)
{
	static const char *const files[] = { "journal", "journal.new" };
	char f[160];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(f, sizeof(f), "%s/%s", dir, files[i]);
		unlink(f);
	}
	rmdir(dir);
}

/*
 * 5: the journal the store accepted and wrote (its records end at end)
 * with 1 to 3 different bits flipped, at places FJ_FLIP's bytes choose in
 * its header, its records and the 512 bytes after them: refused by the
 * check and by open(), which leaves it as it is. Every record in it was
 * acknowledged, as far as the store can tell: cutting any would lose one.
 * Flips only past the head's worth of zeros after the records are a torn
 * tail to the check (zeroed by open(): nothing acknowledged is there).
 */
static void flip_acked(uint64_t end)
{
	uint64_t bit[3], nbits;
	size_t n = read_file(file, FJ_FILE_MAX);
	int nflips = 1 + (fj_flip & 3) % 3, fd;
	bool past = true, part[2] = { false, false };
	struct journal_report rep;
	char err[512];
	void *store = NULL;

	if (n > end + 512)
		n = (size_t)end + 512;
	nbits = 8 * (uint64_t)n;
	bit[0] = fj_flip_at % nbits;
	bit[1] = (bit[0] + 1 + (uint64_t)(fj_flip >> 2) * 131) % nbits;
	bit[2] = (bit[1] + 1 + (uint64_t)(fj_flip >> 2) * 67) % nbits;
	if (bit[1] == bit[0] || bit[2] == bit[0] || bit[2] == bit[1])
		nflips = 1;
	/* Flips after the records touch nothing acknowledged: they are
	 * zeroed, not refused, unless every part of the head that would
	 * come next (split where a sector ends) holds one. */
	for (int i = 0; i < nflips; i++) {
		uint64_t at = bit[i] / 8;

		file[at] ^= (uint8_t)(1u << bit[i] % 8);
		if (at < end)
			past = false;
		else if (at < end + 32)
			part[at / 512 != end / 512] = true;
	}
	if (part[0] && (part[1] || end / 512 == (end + 31) / 512))
		past = false;
	fd = open(path, O_WRONLY | O_CLOEXEC);
	FUZZ_CHECK(fd >= 0);
	FUZZ_CHECK(pwrite(fd, file, n, 0) == (ssize_t)n);
	close(fd);
	if (past) {
		FUZZ_CHECK(journal_check(dir, &rep, err, sizeof(err)) == 0);
		FUZZ_CHECK(rep.end == end && rep.torn != 0);
		return;
	}
	FUZZ_CHECK(journal_check(dir, &rep, err, sizeof(err)) != 0);
	FUZZ_CHECK(journal_store_ops.open(dir, &store, err, sizeof(err)) != 0);
	FUZZ_CHECK(store == NULL);
	FUZZ_CHECK(read_file(again, n) == n);
	FUZZ_CHECK(memcmp(again, file, n) == 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	log_level = LOG_ERROR - 1;	/* refusals are expected: quiet */
	snprintf(dir, sizeof(dir), "/dev/shm/carmy-fuzz-journal.%d",
		 (int)getpid());
	snprintf(path, sizeof(path), "%s/journal", dir);
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		perror(dir);
		exit(1);
	}
	atexit(remove_dir);
	memset(fj_exec, FJ_EXEC_BYTE, sizeof(fj_exec));
	for (int k = 0; k < 3; k++)
		memset(fj_part[k], 'a' + k, sizeof(fj_part[k]));
	file = malloc(FJ_FILE_MAX);
	again = malloc(FJ_FILE_MAX + 1);
	if (file == NULL || again == NULL)
		exit(1);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct journal_report rep, rep2;
	struct standing first = { 0, 0, 0 }, second = { 0, 0, 0 };
	char err[512];
	void *store = NULL;
	uint8_t flags;
	size_t n;
	int check, rc;

	if (size < 1)
		return 0;
	flags = data[0];
	n = build(data, size, flags);
	/* An exec id comes once (a second RESERVE of it is ignored, as a
	 * replayed record would be), and a new reservation of an identity
	 * that stands supersedes it: carmyd never asks either, so neither
	 * does the append, if the recipe could have made them. */
	clash = memmem(file, n, fj_exec, sizeof(fj_exec)) != NULL ||
		memmem(file, n, fj_part[0], sizeof(fj_part[0])) != NULL;
	write_file(file, n);
	setenv("CARMY_JOURNAL_COMPACT_MIN", flags & FJ_COMPACT ? "1" : "1000",
	       1);

	/* 1, 2: the check and the store agree, and a refusal cuts nothing. */
	check = journal_check(dir, &rep, err, sizeof(err));
	FUZZ_CHECK(check != 0 || rep.end <= n);
	FUZZ_CHECK(check != 0 || rep.end + rep.torn <= n);
	/* A hole: nothing after it read, nothing before it lost, and a proof
	 * that it was durable refused. */
	FUZZ_CHECK(!fj_hole.on || check != 0 || rep.end == fj_hole.off);
	FUZZ_CHECK(!fj_hole.on || !fj_hole.proved || check != 0);
	rc = journal_store_ops.open(dir, &store, err, sizeof(err));
	FUZZ_CHECK((rc == 0) == (check == 0));
	if (rc != 0) {
		FUZZ_CHECK(store == NULL);
		FUZZ_CHECK(err[0] != '\0');
		FUZZ_CHECK(read_file(again, FJ_FILE_MAX + 1) == n);
		FUZZ_CHECK(memcmp(again, file, n) == 0);
		return 0;
	}
	FUZZ_CHECK(journal_store_ops.load(store, each, &first) == 0);
	FUZZ_CHECK(first.completed == rep.completed);
	FUZZ_CHECK(first.n == rep.completed + rep.unfinished);

	/* 3: what is acknowledged after recovery stands after a reopen. */
	if ((flags & FJ_SUBMIT) && !clash) {
		struct standing add;

		FUZZ_CHECK(append_one(store, &add) == 0);
		first.n += add.n;
		first.completed += add.completed;
		first.digest += add.digest;
	}
	journal_store_ops.close(store);

	/* 4: recovery's result reads back clean, the same executions. */
	FUZZ_CHECK(journal_check(dir, &rep2, err, sizeof(err)) == 0);
	FUZZ_CHECK(rep2.torn == 0);
	FUZZ_CHECK(rep2.completed + rep2.unfinished == first.n);
	FUZZ_CHECK(rep2.completed == first.completed);
	rc = journal_store_ops.open(dir, &store, err, sizeof(err));
	FUZZ_CHECK(rc == 0);
	FUZZ_CHECK(journal_store_ops.load(store, each, &second) == 0);
	journal_store_ops.close(store);
	FUZZ_CHECK(second.n == first.n);
	FUZZ_CHECK(second.completed == first.completed);
	FUZZ_CHECK(second.digest == first.digest);
	if ((flags & FJ_ACKED) && (flags & FJ_FLIP))
		flip_acked(rep2.end);
	return 0;
}
