/*
 * compact.c - compaction of the journal store: at start, and online on a
 * thread of its own while carmyd runs; and the token's hand-back after a
 * batch (jnl_batch_done()), which is where an online compaction starts.
 * Format and recovery are drawn in docs/journal.md; the store itself is
 * journal.c, the one file above this one (internal.h gives the order).
 *
 * The journal keeps, in memory, which executions stand and where their
 * records are (struct jidx: recovery builds it, every commit keeps it up
 * to date). When the file holds more than compact_min records and more
 * than twice what the standing executions need, the standing ones are
 * written into a new file, DIR/journal.new, which then takes the journal's
 * name: at start before anything else (jnl_compact_at_start()), and while
 * carmyd runs (compactor(), on a thread of its own), with commits flowing
 * into the old file during the long rewrite and paused only for the short
 * switch. Either way the new file is written whole, flushed, renamed over
 * the journal and the directory flushed: a crash leaves one journal or the
 * other, both complete.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "carmy_store.h"
#include "common/clock.h"
#include "common/io.h"
#include "common/log.h"
#include "common/thread.h"
#include "stores/journal/internal.h"
#include "stores/journal/journal.h"

/* The journal is rewritten when it holds more than this many records and
 * more than twice what the standing executions need (at start and while
 * running; CARMY_JOURNAL_COMPACT_MIN in the environment overrides it). */
#define JOURNAL_COMPACT_MIN 1000
#define JOURNAL_COMPACT_ENV "CARMY_JOURNAL_COMPACT_MIN"
/* Online compaction copies what was committed during its rewrite in rounds
 * that do not pause commits, until less than this is left or after
 * JOURNAL_CATCHUP_ROUNDS; only the rest is copied while commits wait. */
#define JOURNAL_CATCHUP_MIN (64u << 10)
#define JOURNAL_CATCHUP_ROUNDS 8
/* Room a compaction leaves on the disk beyond its copy: the copy is
 * followed by JOURNAL_GROW (16 MB) of zeros of its own, and the old file
 * grows meanwhile, JOURNAL_GROW at a time, and must be able to twice. */
#define JOURNAL_COMPACT_SPARE (48u << 20)

/* One compaction: the new file, and its index. */
struct jcompact {
	char tmp[4096 + 8];	/* DIR/journal.new */
	int fd;
	uint64_t salt;
	uint64_t seq;		/* of the last record written to it */
	uint64_t end;		/* where its next record goes */
	uint64_t size;		/* bytes in it */
	uint64_t records;
	struct jidx ix;
	uint64_t from;		/* the old file's next record to copy, */
	uint64_t from_seq;	/* and its sequence number */
	uint64_t ifrom;		/* after a failure: the next to index, */
	uint64_t iseq;		/* and its number */
	uint64_t paused_bytes;	/* copied while commits waited */
	uint64_t old_end;	/* where the old file's records ended */
	uint8_t *buf;
	size_t cap;
};

static void start_compaction(struct jnl *j);
static void *compactor(void *arg);
static bool room_to_compact(struct jnl *j);
static void compact_online(struct jnl *j);
static void compact_init(const struct jnl *j, struct jcompact *c);
static void compact_free(struct jcompact *c);
static int new_file(const struct jnl *j, struct jcompact *c);
static int rewrite_standing(struct jnl *j, struct jcompact *c, bool online);
static int catch_up(struct jnl *j, struct jcompact *c);
static int copy_delta(struct jnl *j, struct jcompact *c, uint64_t to);
static int finish(struct jnl *j, struct jcompact *c, bool *renamed);
static void switch_to(struct jnl *j, struct jcompact *c);
static void abandon(struct jnl *j, struct jcompact *c, bool closing, int rc);
static int reindex(struct jnl *j, struct jcompact *c, uint64_t to);
static int in_rounds(struct jnl *j, struct jcompact *c, const uint64_t *from,
		     int (*step)(struct jnl *j, struct jcompact *c,
				 uint64_t to));
static void token_lend(struct jnl *j);
static int read_records(const struct jnl *j, uint64_t *from, uint64_t *seq,
			uint64_t to, struct jcompact *c, size_t *lenp);
static int put_standing(struct jcompact *c, const uint8_t *map,
			const struct jexec *x, size_t *len);
static void reseal(uint8_t *p, uint64_t seq, uint64_t salt, uint64_t off);
static void token_take(struct jnl *j);
static void token_give(struct jnl *j, int rc, const struct jcompact *c,
		       uint64_t paused_ns);
static bool stop_asked(struct jnl *j);
static uint32_t rec_len(const uint8_t *p);

/* ---------------------------------------------------------------- compaction */

/*
 * A batch was answered, or the compactor is done switching: with j->lock
 * held, by the one answering batches (or the token's holder, nothing in
 * flight), publish where durable records end (the compactor copies up to
 * there without the token) and see whether the journal should be
 * compacted: two comparisons, so it is done after every batch.
 */
void jnl_batch_done(struct jnl *j)
{
	j->durable_end = j->end;
	j->pub_records = j->nrec;
	if (jnl_needs_compaction(j))
		start_compaction(j);
}

/*
 * More than twice the records the standing executions need, and enough of
 * them to be worth a rewrite. Two comparisons, so it is checked after every
 * batch, by the token's holder (who owns ix) with j->lock held.
 */
bool jnl_needs_compaction(const struct jnl *j)
{
	uint64_t needed;

	/* The index is the compactor's while compacting (it may be
	 * indexing a failed compaction's records): looked at only after. */
	if (j->readonly || j->no_index || j->compacting || j->stopping ||
	    __atomic_load_n(&j->broken, __ATOMIC_ACQUIRE) != 0)
		return false;
	needed = (uint64_t)j->ix.live + j->ix.results;
	return j->nrec > j->compact_min && j->nrec > 2 * needed &&
	       j->nrec >= j->retry_at;
}

/*
 * Take the snapshot (where the records end, and the last one's number) and
 * hand the index to the compactor; by the token's holder, j->lock held.
 *
 * The compactor is a thread of its own, not the writer: the rewrite takes
 * as long as writing every standing execution, and the writer is what
 * writes the batches that queue up behind a flush, so on the writer it
 * would stall commits for that long; on an event loop it would stall its
 * clients. It is started by the first compaction, so a carmyd whose
 * journal never needs one never has it, and it sleeps on a condition
 * variable in between.
 */
static void start_compaction(struct jnl *j)
{
	if (!room_to_compact(j))
		return;
	if (!j->compactor_started) {
		int err = pthread_create(&j->compactor, NULL, compactor, j);

		if (err != 0) {
			log_warn("journal %s: cannot start its compaction: %s",
				 j->path, strerror(err));
			j->retry_at = 2 * j->nrec;
			return;
		}
		j->compactor_started = true;
	}
	j->compacting = true;
	j->compact_go = true;
	j->snap_end = j->end;
	j->snap_seq = j->seq;
	pthread_cond_signal(&j->compact_wake);
}

/*
 * Would a copy of what stands fit on the journal's disk, with
 * JOURNAL_COMPACT_SPARE left? A copy that filled the disk would make the
 * old file's growth fail, and with it commits, until the compaction gave
 * up. If not, the next try waits until the journal has twice the
 * records, like after a failure. If the disk cannot be asked, yes.
 */
static bool room_to_compact(struct jnl *j)
{
	uint64_t needed = (uint64_t)j->ix.live + j->ix.results, free_bytes;
	struct statvfs sv;

	if (fstatvfs(j->fd, &sv) != 0)
		return true;
	free_bytes = (uint64_t)sv.f_bavail * sv.f_frsize;
	if (jnl_compaction_fits(free_bytes, j->end, j->nrec, needed))
		return true;
	log_warn("journal %s: not compacted: %llu MB free on its disk, less "
		 "than a copy of what stands and %u MB to spare; next try "
		 "once it has twice the records", j->path,
		 (unsigned long long)(free_bytes >> 20),
		 JOURNAL_COMPACT_SPARE >> 20);
	j->retry_at = 2 * j->nrec;
	return false;
}

/*
 * The rule room_to_compact() applies: free_bytes hold a copy of the
 * needed records of a journal of nrec records ending at end, and
 * JOURNAL_COMPACT_SPARE. The copy is taken as twice the needed records at
 * the journal's mean record size (standing records, with their results,
 * run larger than the reserves and releases of history), and never more
 * than the journal, of which it is a subset.
 */
bool jnl_compaction_fits(uint64_t free_bytes, uint64_t end, uint64_t nrec,
			 uint64_t needed)
{
	uint64_t mean = nrec > 0 ? end / nrec + 1 : end, copy = end;

	if (needed < UINT64_MAX / 2 / mean && 2 * needed * mean < end)
		copy = 2 * needed * mean;
	return free_bytes >= JOURNAL_COMPACT_SPARE &&
	       free_bytes - JOURNAL_COMPACT_SPARE >= copy;
}

static void *compactor(void *arg)
{
	struct jnl *j = arg;

	thread_name("carmyd-compact");
	pthread_mutex_lock(&j->lock);
	for (;;) {
		while (!j->compact_go && !j->stopping)
			pthread_cond_wait(&j->compact_wake, &j->lock);
		if (!j->compact_go)
			break;
		j->compact_go = false;
		pthread_mutex_unlock(&j->lock);
		compact_online(j);
		pthread_mutex_lock(&j->lock);
	}
	pthread_mutex_unlock(&j->lock);
	return NULL;
}

/*
 * One compaction while carmyd runs, on the compactor thread, which owns
 * the index from the snapshot on (commits do not index meanwhile: their
 * records are in the old file, and are taken from there).
 *
 *  1. rewrite: the executions standing at the snapshot into journal.new,
 *     under a new salt, then flushed. Commits go on into the old file.
 *  2. catch up: the records committed since, copied (re-sealed with the
 *     new salt and numbering) in rounds, still without pausing commits,
 *     until less than JOURNAL_CATCHUP_MIN is left; then flushed.
 *  3. switch, holding the token, so commits wait: the records committed
 *     during the last round copied, the new file flushed, renamed over the
 *     journal, the directory flushed, and the new file and its index take
 *     over. A commit acknowledged after that is in the new file, and the
 *     rename is durable before it.
 *
 * So commits wait, at most, for the batches in flight plus step 3: copying
 * what was committed during the last round of step 2 (less than
 * JOURNAL_CATCHUP_MIN, unless commits outran the copying for all
 * JOURNAL_CATCHUP_ROUNDS rounds), an fsync of that, a rename and an fsync
 * of the directory. A failure before the rename leaves the old journal in
 * use, whole (abandon()).
 */
static void compact_online(struct jnl *j)
{
	struct jcompact c;
	struct jhook hook;
	bool renamed = false;
	uint64_t t0, paused = 0, before;
	uint32_t live = 0;
	int rc, irc;

	pthread_mutex_lock(&j->lock);
	hook = j->hook;
	pthread_mutex_unlock(&j->lock);
	compact_init(j, &c);
	before = c.from;
	if (hook.fn != NULL)
		hook.fn(hook.arg, JOURNAL_COMPACT_SNAPSHOT, 0);
	rc = stop_asked(j) ? -ECANCELED : new_file(j, &c);
	if (rc == 0)
		rc = rewrite_standing(j, &c, true);
	if (rc == 0 && hook.fn != NULL)
		hook.fn(hook.arg, JOURNAL_COMPACT_REWRITTEN, 0);
	if (rc == 0)
		rc = catch_up(j, &c);
	if (rc == 0 && hook.fn != NULL)
		hook.fn(hook.arg, JOURNAL_COMPACT_SWITCHING, 0);

	if (rc == 0) {
		token_take(j);
		t0 = clock_mono_ns();
		rc = finish(j, &c, &renamed);
		paused = clock_mono_ns() - t0;
		if (rc != 0 && !renamed)
			token_lend(j);	/* failed: see below */
	}
	if (rc != 0 && !renamed) {
		/* The old journal stays, and its index missed what was
		 * committed since the snapshot: indexed in rounds that do
		 * not pause commits, like the catch-up, and only the rest
		 * while they wait. */
		irc = rc == -ECANCELED ? 0 : in_rounds(j, &c, &c.ifrom, reindex);
		token_take(j);
		t0 = clock_mono_ns();
		abandon(j, &c, rc == -ECANCELED || irc == -ECANCELED,
			irc == -ECANCELED || irc > 0 ? 0 : irc);
		paused += clock_mono_ns() - t0;
	} else if (rc != 0) {
		/* The rename may not be durable, and with it whatever is
		 * appended to the new file: fail closed, as after a failed
		 * flush. */
		log_error("journal %s: compacted, but its directory cannot be "
			  "flushed: %s: refusing every reservation and "
			  "completion from now on", j->path, strerror(-rc));
		__atomic_store_n(&j->broken, rc, __ATOMIC_RELEASE);
	}
	live = j->ix.live;
	token_give(j, rc, &c, paused);

	if (rc == 0)
		log_info("journal %s: compacted %llu bytes into %llu records "
			 "(%llu bytes) for %u standing executions; commits "
			 "waited %.2f ms for the switch (%llu bytes copied)",
			 j->path, (unsigned long long)before,
			 (unsigned long long)c.records,
			 (unsigned long long)c.end, live,
			 (double)paused / 1e6,
			 (unsigned long long)c.paused_bytes);
	else if (rc == -ECANCELED)
		log_info("journal %s: compaction abandoned: stopping",
			 j->path);
	else if (!renamed)
		log_warn("journal %s: compaction failed: %s; the journal in "
			 "use is unchanged (commits waited %.2f ms while %llu "
			 "bytes were indexed), next try once it has twice the "
			 "records", j->path, strerror(-rc),
			 (double)paused / 1e6,
			 (unsigned long long)c.paused_bytes);
	compact_free(&c);
	if (hook.fn != NULL)
		hook.fn(hook.arg, JOURNAL_COMPACT_DONE, rc);
}

/* At start, before any thread: the same rewrite and switch, with nothing
 * committed meanwhile to catch up with. */
int jnl_compact_at_start(struct jnl *j, bool *renamed)
{
	struct jcompact c;
	uint64_t before = j->end;
	int rc;

	j->snap_end = j->end;
	j->snap_seq = j->seq;
	if (!room_to_compact(j))
		return 0;
	compact_init(j, &c);
	rc = new_file(j, &c);
	if (rc == 0)
		rc = rewrite_standing(j, &c, false);
	if (rc == 0)
		rc = finish(j, &c, renamed);
	if (rc != 0 && !*renamed)
		abandon(j, &c, false, 0);
	if (*renamed)
		log_info("journal %s: compacted %llu bytes of history into "
			 "%llu records (%llu bytes) for %u standing "
			 "executions", j->path, (unsigned long long)before,
			 (unsigned long long)c.records,
			 (unsigned long long)c.end, j->ix.live);
	compact_free(&c);
	return rc;
}

static void compact_init(const struct jnl *j, struct jcompact *c)
{
	memset(c, 0, sizeof(*c));
	c->fd = c->ix.fd = -1;
	c->from = c->ifrom = j->snap_end;
	c->from_seq = c->iseq = j->snap_seq + 1;
}

static void compact_free(struct jcompact *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	jidx_free(&c->ix);
	free(c->buf);
	c->buf = NULL;
	c->cap = 0;
}

/* DIR/journal.new with its header (a salt of its own), locked before it
 * takes the journal's name, like the journal. */
static int new_file(const struct jnl *j, struct jcompact *c)
{
	struct jfile_head h;
	char err[256];

	jnl_make_head(&h);
	snprintf(c->tmp, sizeof(c->tmp), "%s.new", j->path);
	c->fd = jnl_open_file(j->dir_fd, c->tmp, JOURNAL_NEW,
			      O_RDWR | O_CREAT | O_TRUNC, geteuid(), err,
			      sizeof(err));
	if (c->fd < 0) {
		log_warn("journal %s: %s", j->path, err);
		return c->fd;
	}
	c->ix.fd = c->fd;
	c->salt = h.jf_salt;
	c->end = c->size = HEAD_SIZE;
	if (flock(c->fd, LOCK_EX | LOCK_NB) != 0)
		return -errno;
	return io_pwrite_all(c->fd, &h, sizeof(h), 0);
}

/*
 * Write every execution standing at the snapshot into the new file: its
 * RESERVE and, if it has one, its COMPLETE or RESOLVE, each record a batch
 * of its own (the file is flushed whole before it becomes the journal, so
 * a good record after a damaged one proves the damage is no torn write:
 * it is refused, never cut). Then zeros ahead of the end, and a flush. The
 * old file is read through a mapping of the snapshot's bytes, which no
 * commit changes.
 */
static int rewrite_standing(struct jnl *j, struct jcompact *c, bool online)
{
	const struct jidx *old = &j->ix;
	size_t len = 0;		/* bytes in c->buf, to go at c->end */
	uint8_t *map;
	int rc = 0;

	map = mmap(NULL, (size_t)j->snap_end, PROT_READ, MAP_SHARED, j->fd, 0);
	if (map == MAP_FAILED)
		return -errno;
	madvise(map, (size_t)j->snap_end, MADV_SEQUENTIAL);
	for (uint32_t i = 0; i < old->nex && rc == 0; i++) {
		if (old->ex[i].gone)
			continue;
		rc = put_standing(c, map, &old->ex[i], &len);
		if (rc == 0 && len >= JOURNAL_BATCH_MAX) {
			rc = io_pwrite_all(c->fd, c->buf, len, c->end);
			c->end += len;
			len = 0;
			if (rc == 0 && online && stop_asked(j))
				rc = -ECANCELED;
		}
	}
	if (rc == 0 && len > 0) {
		rc = io_pwrite_all(c->fd, c->buf, len, c->end);
		c->end += len;
	}
	munmap(map, (size_t)j->snap_end);
	c->size = c->end;	/* the zeros go after the records */
	if (rc == 0)
		rc = jnl_grow_file(c->fd, c->end, &c->size, JREC_TAIL_MIN);
	return rc;
}

/* Standing execution x of the old file (mapped at map) as records in
 * c->buf at *len, and in the new index. */
static int put_standing(struct jcompact *c, const uint8_t *map,
			const struct jexec *x, size_t *len)
{
	struct carmy_store_req req = { .op = CARMY_STORE_RESERVE };
	struct carmy_store_record r;
	enum carmy_store_op op2 = CARMY_STORE_COMPLETE;
	struct jexec *y;
	size_t n0, n1 = 0;
	int rc;

	jidx_standing(map, x, &r);
	req.rec = &r;
	n0 = jnl_rec_size(&req);
	if (x->complete_off != 0) {
		op2 = map[x->complete_off + offsetof(struct jrec_head, jr_op)];
		req.op = op2;
		n1 = jnl_rec_size(&req);
	}
	rc = jnl_buf_room(&c->buf, &c->cap, *len + n0 + n1);
	if (rc == 0)
		rc = jidx_room(&c->ix);
	if (rc != 0)
		return rc;
	req.op = CARMY_STORE_RESERVE;
	c->seq++;
	jnl_rec_put(&req, c->seq, c->seq, c->salt, c->end + *len,
		    c->buf + *len, n0);
	y = jidx_add(&c->ix, x->exec, x->ident_hash, c->end + *len, NULL);
	*len += n0;
	c->records++;
	if (n1 > 0) {
		req.op = op2;
		c->seq++;
		jnl_rec_put(&req, c->seq, c->seq, c->salt, c->end + *len,
			    c->buf + *len, n1);
		y->complete_off = c->end + *len;
		c->ix.results++;
		*len += n1;
		c->records++;
	}
	return 0;
}

/* Step 2 of compact_online(): copy what was committed during the rewrite,
 * and during each round the next, without pausing commits. */
static int catch_up(struct jnl *j, struct jcompact *c)
{
	int rc = in_rounds(j, c, &c->from, copy_delta);

	if (rc > 0 && fdatasync(c->fd) != 0)
		return -errno;
	return rc < 0 ? rc : 0;
}

/*
 * Take what is durable in the old file past *from with step (which moves
 * *from on), and during each round what was committed meanwhile, without
 * pausing commits, until less than JOURNAL_CATCHUP_MIN is left or after
 * JOURNAL_CATCHUP_ROUNDS. Returns how many rounds took something, an
 * error from step, or -ECANCELED if carmyd is stopping.
 */
static int in_rounds(struct jnl *j, struct jcompact *c, const uint64_t *from,
		     int (*step)(struct jnl *j, struct jcompact *c,
				 uint64_t to))
{
	int taken = 0;

	for (int round = 0; round < JOURNAL_CATCHUP_ROUNDS; round++) {
		uint64_t to;
		bool stop;
		int rc;

		pthread_mutex_lock(&j->lock);
		to = j->durable_end;
		stop = j->stopping;
		pthread_mutex_unlock(&j->lock);
		if (stop)
			return -ECANCELED;
		if (to - *from < JOURNAL_CATCHUP_MIN)
			break;
		rc = step(j, c, to);
		if (rc != 0)
			return rc;
		taken++;
	}
	return taken;
}

/*
 * Copy the old file's records from c->from up to to (all durable: below
 * the end of a batch done) into the new file, each re-sealed with the new
 * salt and the next number, as a batch of its own, and apply them to the
 * new index in order: so the new file ends up saying what the old one
 * says.
 */
static int copy_delta(struct jnl *j, struct jcompact *c, uint64_t to)
{
	while (c->from < to) {
		size_t len;
		int rc = read_records(j, &c->from, &c->from_seq, to, c, &len);

		if (rc != 0)
			return rc;
		for (size_t k = 0; k < len; k += rec_len(c->buf + k)) {
			c->seq++;
			reseal(c->buf + k, c->seq, c->salt, c->end + k);
		}
		/* Zeros after the records, as in the journal (a commit
		 * after the switch grows the file the same way). */
		if (c->end + len + JREC_TAIL_MIN > c->size)
			rc = jnl_grow_file(c->fd, c->end, &c->size,
					   len + JREC_TAIL_MIN);
		if (rc == 0)
			rc = io_pwrite_all(c->fd, c->buf, len, c->end);
		/* Indexed once written: a RESERVE may need an earlier
		 * identity read back from the new file. */
		for (size_t k = 0; rc == 0 && k < len; k += rec_len(c->buf + k)) {
			rc = jidx_record(&c->ix, c->buf + k, c->end + k);
			c->records++;
		}
		if (rc != 0)
			return rc;
		c->end += len;
	}
	return 0;
}

/*
 * Step 3, holding the token (or alone, at start): the last records, a
 * flush, the rename, a flush of the directory, and the new file takes
 * over. *renamed says whether the new file is now the journal, whatever
 * the result: once it is, it is used even if the directory's flush
 * failed.
 */
static int finish(struct jnl *j, struct jcompact *c, bool *renamed)
{
	uint64_t before = c->end;
	int rc = __atomic_load_n(&j->broken, __ATOMIC_ACQUIRE);

	if (rc == 0)
		rc = copy_delta(j, c, j->end);
	c->paused_bytes = c->end - before;
	c->old_end = j->end;
	if (rc == 0 && fsync(c->fd) != 0)
		rc = -errno;
	if (rc == 0 && renameat(j->dir_fd, JOURNAL_NEW, j->dir_fd,
				JOURNAL_FILE) != 0)
		rc = -errno;
	if (rc != 0)
		return rc;
	*renamed = true;
	if (fsync(j->dir_fd) != 0)
		rc = -errno;
	switch_to(j, c);
	return rc;
}

/* The new file and its index replace the old ones; by the token's holder. */
static void switch_to(struct jnl *j, struct jcompact *c)
{
	close(j->fd);	/* and its lock: the new file holds its own */
	j->fd = c->fd;
	c->fd = -1;
	j->salt = c->salt;
	j->seq = c->seq;
	j->end = c->end;
	j->size = c->size > c->end ? c->size : c->end;
	j->wseq = j->seq;
	j->wend = j->end;
	j->nrec = c->records;
	j->retry_at = 0;	/* a failure's back-off ends with a success */
	jidx_free(&j->ix);
	j->ix = c->ix;
	c->ix = (struct jidx){ .fd = -1 };
	jnl_unmap_file(j);	/* recovery's mapping was of the old file */
	/* Batches flush through descriptions of their own: of the new
	 * file from now on (at start, the writers open them). */
	if (j->started) {
		pthread_mutex_lock(&j->lock);	/* depth is the writers' */
		jnl_open_flights(j);
		pthread_mutex_unlock(&j->lock);
	}
}

/*
 * Give up before the rename, holding the token: the new file goes, the
 * old journal stays in use as it is (nothing was ever written to it but
 * commits), and its index takes the records committed since the snapshot
 * that it still misses, from c->ifrom on: in_rounds() has taken the rest
 * without pausing commits, so the pause is the last round's worth
 * (added to c->paused_bytes). rc is how those rounds ended: an error
 * loses the index. Not when the store is closing: its index is about to
 * be freed. The next try waits until the journal has twice the records,
 * so a full disk does not mean a rewrite per batch.
 */
static void abandon(struct jnl *j, struct jcompact *c, bool closing, int rc)
{
	uint64_t at = c->ifrom;

	if (c->fd >= 0) {
		close(c->fd);
		c->fd = -1;
		unlinkat(j->dir_fd, JOURNAL_NEW, 0);
	}
	jidx_free(&c->ix);
	if (!closing && rc == 0)
		rc = reindex(j, c, j->end);
	c->paused_bytes += c->ifrom - at;	/* after finish()'s, if any */
	if (rc != 0)
		jnl_lose_index(j, rc);
	j->retry_at = 2 * j->nrec;
}

/* By the token's holder: the index cannot be trusted any more. */
void jnl_lose_index(struct jnl *j, int rc)
{
	log_warn("journal %s: cannot keep its index (%s): no compaction "
		 "until carmyd restarts", j->path, strerror(-rc));
	j->no_index = true;
	jidx_free(&j->ix);
}

/* Apply the old file's records from c->ifrom up to to to the journal's
 * own index; by the compactor, which owns it meanwhile. */
static int reindex(struct jnl *j, struct jcompact *c, uint64_t to)
{
	int rc = 0;

	while (rc == 0 && c->ifrom < to) {
		uint64_t at = c->ifrom;
		size_t len;

		rc = read_records(j, &c->ifrom, &c->iseq, to, c, &len);
		for (size_t k = 0; rc == 0 && k < len; k += rec_len(c->buf + k))
			rc = jidx_record(&j->ix, c->buf + k, at + k);
	}
	return rc;
}

/*
 * Read the old file's records from *from (numbered from *seq) up to to,
 * whole records only, about JOURNAL_BATCH_MAX at a time (or one larger
 * record), into c->buf; advance *from and *seq. They were written and
 * flushed by this journal, so each must check out: -EIO if one does not.
 */
static int read_records(const struct jnl *j, uint64_t *from, uint64_t *seq,
			uint64_t to, struct jcompact *c, size_t *lenp)
{
	size_t want = to - *from > JOURNAL_BATCH_MAX ? JOURNAL_BATCH_MAX :
						     (size_t)(to - *from);
	size_t len = 0;
	uint64_t s = *seq;

	for (;;) {
		int rc = jnl_buf_room(&c->buf, &c->cap, want);

		if (rc == 0)
			rc = jnl_read_all(j->fd, c->buf, want, *from);
		if (rc != 0)
			return rc;
		while (len < want) {
			size_t n = jnl_rec_valid(j->salt, c->buf + len,
						 want - len, s);

			if (n == 0)
				break;
			len += n;
			s++;
		}
		if (len > 0)
			break;
		/* The first record is longer than what was read. */
		if (want < sizeof(uint32_t) || rec_len(c->buf) <= want ||
		    rec_len(c->buf) > to - *from)
			return -EIO;
		want = rec_len(c->buf);
	}
	*from += len;
	*seq = s;
	*lenp = len;
	return 0;
}

/* The record at p as record number seq of the new file, a batch of its
 * own, at offset off, sealed with its salt. */
static void reseal(uint8_t *p, uint64_t seq, uint64_t salt, uint64_t off)
{
	struct jrec_head h;

	memcpy(&h, p, sizeof(h));
	h.jr_seq = h.jr_batch = seq;
	memcpy(p, &h, sizeof(h));
	jnl_rec_seal(p, off, salt);
}

/* The compactor takes the token to switch files: it waits for the batches
 * in flight only, since want_token keeps the writers and submit from
 * starting another. */
static void token_take(struct jnl *j)
{
	pthread_mutex_lock(&j->lock);
	j->want_token = true;
	while (j->flushing || j->inflight > 0)
		pthread_cond_wait(&j->idle, &j->lock);
	j->want_token = false;
	j->flushing = true;
	pthread_mutex_unlock(&j->lock);
}

/* ... lends it back to the commits queued meanwhile, the compaction still
 * under way (they go on not indexing) ... */
static void token_lend(struct jnl *j)
{
	pthread_mutex_lock(&j->lock);
	j->flushing = false;
	jnl_batch_done(j);
	pthread_cond_broadcast(&j->wake);
	pthread_mutex_unlock(&j->lock);
}

/* ... and gives it back, with the index, to the commits queued meanwhile. */
static void token_give(struct jnl *j, int rc, const struct jcompact *c,
		       uint64_t paused_ns)
{
	pthread_mutex_lock(&j->lock);
	j->compacting = false;
	if (rc == 0)
		j->stats.compactions++;
	else
		j->stats.compact_failures++;
	j->stats.last_pause_ns = paused_ns;
	j->stats.last_pause_bytes = c->paused_bytes;
	if (rc == 0) {
		j->stats.last_old_end = c->old_end;
		j->stats.last_new_end = c->end;
	}
	j->flushing = false;
	jnl_batch_done(j);
	pthread_cond_broadcast(&j->wake);
	pthread_mutex_unlock(&j->lock);
}

static bool stop_asked(struct jnl *j)
{
	bool stop;

	pthread_mutex_lock(&j->lock);
	stop = j->stopping;
	pthread_mutex_unlock(&j->lock);
	return stop;
}

/* ---------------------------------------------------------------- helpers */

static uint32_t rec_len(const uint8_t *p)
{
	uint32_t n;

	memcpy(&n, p, sizeof(n));
	return n;
}

/* The compaction threshold: JOURNAL_COMPACT_MIN, or what the environment
 * says (tests lower it; an operator may raise it). */
uint64_t jnl_compact_min_env(void)
{
	const char *s = getenv(JOURNAL_COMPACT_ENV);
	unsigned long long v;
	char *end;

	if (s == NULL || s[0] == '\0')
		return JOURNAL_COMPACT_MIN;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || s[0] == '-') {
		log_warn("ignoring %s=%s: not a number", JOURNAL_COMPACT_ENV,
			 s);
		return JOURNAL_COMPACT_MIN;
	}
	return v;
}

