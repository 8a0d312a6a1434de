/*
 * journal.c - the journal store: carmyd's embedded durable store
 * (--store journal:DIR). Format and recovery are drawn in docs/journal.md.
 *
 * One append-only file, DIR/journal, of checksummed records: RESERVE (a new
 * execution: identity, fingerprints, exec id), COMPLETE (its result),
 * RELEASE (withdrawn), RESOLVE (an operator settled an interrupted one) and
 * PURGE (an operator removed a completed one). A record is acknowledged only
 * once fdatasync() has returned after it was written, so an acknowledged
 * reservation or result survives a power loss.
 *
 * Group commit. One batch is written at a time: everything queued goes out
 * with one pwrite() and is made durable with one fdatasync(), then every
 * request's done() is called. While a batch waits for the disk, new
 * requests pile up and go out together in the next one, so the cost of a
 * flush is shared by as many clients as are waiting: throughput grows with
 * concurrency instead of being one flush per call. Batches are written by
 * the journal's own thread, except when requests come one at a time (the
 * last batch held one record) and none is in flight: then the thread that
 * submits it writes it at once, since on these VMs handing a request to
 * another thread and back costs two wake-ups, a third of a flush. Under
 * load that would stall an event loop for a flush while its other clients
 * wait, so it is not done then.
 *
 * The file grows in pre-written chunks of zeros (JOURNAL_GROW), flushed
 * once, so that the fdatasync() of a commit writes data blocks only, not
 * the inode's size and extent map as well. Zeros are also the clean end:
 * a record head of zeros is where the journal stops.
 *
 * Recovery reads records from the start, checking each one's length,
 * sequence number (one more than the last) and checksum (XXH3 under the
 * file's random salt, so a record from another journal never passes). The
 * first record that fails is the end. If a valid record can still be found
 * after it, the damage is in the middle, not a torn tail, and the journal
 * is refused rather than cut: cutting would lose acknowledged records.
 * Otherwise the torn tail is cut off and flushed before anything is
 * appended.
 *
 * Compaction. The journal keeps, in memory, which executions stand and
 * where their records are (struct jidx: recovery builds it, every commit
 * keeps it up to date). When the file holds more than compact_min records
 * and more than twice what the standing executions need, the standing ones
 * are written into a new file, DIR/journal.new, which then takes the
 * journal's name: at start before anything else (compact_at_start()),
 * and while carmyd runs (compactor(), on a thread of its own), with
 * commits flowing into the old file during the long rewrite and paused
 * only for the short switch. Either way the new file is written whole,
 * flushed, renamed over the journal and the directory flushed: a crash
 * leaves one journal or the other, both complete.
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
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "carmy.h"
#include "carmy_store.h"
#include "daemon/journal.h"
#include "daemon/log.h"

#define JOURNAL_FILE "journal"
#define JOURNAL_MAGIC "CARMYJNL"
#define JOURNAL_VERSION 1
#define JOURNAL_GROW (16u << 20)	/* zeros written ahead of the end */
#define JOURNAL_BATCH_MAX (4u << 20)	/* bytes per pwrite, about */
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

/* ---------------------------------------------------------------- types */

/* Open addressing over an index's executions: slot = 1 + index, 0 empty. */
struct jindex {
	uint32_t *slot;
	uint32_t mask;
};

/* What the journal knows about one execution. */
struct jexec {
	uint8_t exec[16];
	uint64_t reserve_off;	/* its RESERVE record */
	uint64_t complete_off;	/* its COMPLETE or committed RESOLVE; 0: none */
	uint64_t ident_hash;
	bool gone;		/* released, superseded, resolved as not run,
				 * or purged */
};

/*
 * The executions of one journal file, by exec id and by identity, and where
 * their records are in that file. Recovery builds it, every commit keeps it
 * up to date, a compaction builds a new one for the new file (only what
 * stands, so gone executions are pruned there). It holds no copy of any
 * record: an identity is read back from the file when a hash matches.
 */
struct jidx {
	struct jexec *ex;
	uint32_t nex;
	uint32_t live;		/* executions standing */
	uint32_t results;	/* ... of which with a result */
	struct jindex by_exec;	/* exec id -> execution */
	struct jindex by_ident;	/* identity -> the execution that stands */
	int fd;			/* the file the offsets are in */
	const uint8_t *map;	/* recovery's mapping of it, or NULL */
	uint64_t map_end;	/* records below this are read from map */
};

/* The compactor's hook (journal.h), for tests: called between phases. */
struct jhook {
	journal_compact_hook fn;
	void *arg;
};

struct jnl {
	int fd;
	int dir_fd;
	char path[4096];
	uint64_t salt;
	uint64_t end;		/* where the next record goes */
	uint64_t size;		/* bytes in the file, zeros after end */
	uint64_t seq;		/* of the last record written */
	uint64_t nrec;		/* records in the file */
	int broken;		/* -errno once a write or flush failed */

	pthread_t writer;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct carmy_store_req *head, **tail;	/* queued, oldest first */
	/* The token: whoever set it (under lock) is the only thread that
	 * writes the file, and owns fd, salt, end, size, seq, nrec, buf and
	 * (unless compacting) ix until it clears it, in batch_done(). A
	 * batch holds it while it is written and flushed; the compactor
	 * while it switches files. */
	bool flushing;
	bool alone;		/* the last batch held one record */
	bool stopping;

	uint8_t *buf;		/* the batch being written */
	size_t cap;
	uint64_t flushes;	/* batches made durable, and their records */
	uint64_t records;
	bool readonly;		/* journal_check(): read, never cut */
	uint64_t torn;		/* bytes a cut would remove */
	uint64_t by_op[CARMY_STORE_PURGE + 1];	/* records read, by op */

	/* What stands, and where (see struct jidx). Owned by the token's
	 * holder, except while compacting: the compactor owns it then. */
	struct jidx ix;
	uint8_t *map;		/* recovery's mapping of the file, for load() */
	size_t map_len;

	/* Online compaction: the compactor thread and what it shares with
	 * the token's holders, under lock (compact_min is set at open). */
	uint64_t compact_min;
	uint64_t retry_at;	/* no compaction before nrec reaches this */
	bool no_index;		/* ix missed a record: no online compaction */
	bool compacting;	/* a snapshot is taken; commits do not index */
	bool compact_go;	/* the compactor has a snapshot to work on */
	bool want_token;	/* the compactor waits for the token */
	bool compactor_started;
	pthread_t compactor;
	pthread_cond_t compact_wake;	/* the compactor: work, or stop */
	pthread_cond_t idle;		/* the compactor: the token is free */
	uint64_t snap_end;	/* the snapshot: where records ended, */
	uint64_t snap_seq;	/* and the last one's sequence number */
	uint64_t durable_end;	/* end, as of the last batch done */
	uint64_t pub_records;	/* nrec, likewise */
	struct jhook hook;
	struct journal_stats stats;
};

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
	uint64_t paused_bytes;	/* copied while commits waited */
	uint64_t old_end;	/* where the old file's records ended */
	uint8_t *buf;
	size_t cap;
};

/* ---------------------------------------------------------------- format */

/* File header: magic, version, salt, and a checksum of those. */
struct jfile_head {
	char jf_magic[8];
	uint32_t jf_version;
	uint32_t jf_pad;
	uint64_t jf_salt;
	uint64_t jf_created_ns;
	uint64_t jf_check;
};

/* Every record: this head, its payload, zero padding to 8 bytes, and an
 * 8-byte checksum of all that. jr_len counts all of it. */
struct jrec_head {
	uint32_t jr_len;
	uint8_t jr_op;		/* enum carmy_store_op */
	uint8_t jr_pad[3];
	uint64_t jr_seq;	/* one more than the record before */
	uint64_t jr_batch;	/* jr_seq of its batch's first record */
};

struct jrec_reserve {
	uint8_t rv_exec[16];
	uint8_t rv_fingerprint[16];
	uint8_t rv_rawprint[16];
	uint64_t rv_started_ns;
	uint32_t rv_pid;
	uint16_t rv_len[3];
	uint16_t rv_pad;
	/* then the three identity parts, back to back */
};

struct jrec_complete {
	uint8_t cp_exec[16];
	uint64_t cp_finished_ns;
	int32_t cp_status;
	int32_t cp_result_code;
	uint32_t cp_result_len;
	uint32_t cp_pad;
	/* then the result */
};

struct jrec_release {
	uint8_t rl_exec[16];
};

struct jrec_resolve {
	uint8_t rs_exec[16];
	uint64_t rs_finished_ns;
	uint64_t rs_resolved_ns;
	uint32_t rs_uid;
	uint32_t rs_pid;
	int32_t rs_status;
	int32_t rs_result_code;
	uint32_t rs_result_len;
	uint8_t rs_committed;	/* 1: it happened, with this result */
	uint8_t rs_pad[3];
	/* then the result */
};

#define HEAD_SIZE sizeof(struct jfile_head)
#define REC_MIN (sizeof(struct jrec_head) + sizeof(struct jrec_release) + 8)
/* The largest record: a COMPLETE or a committed RESOLVE with the largest
 * result carmyd allows (and the padding and checksum after it). */
#define REC_FIXED_MAX (sizeof(struct jrec_resolve) > sizeof(struct jrec_complete) ? \
		       sizeof(struct jrec_resolve) : sizeof(struct jrec_complete))
#define REC_MAX (sizeof(struct jrec_head) + REC_FIXED_MAX + (64u << 20) + 16)
_Static_assert(sizeof(struct jrec_reserve) + 3 * CARMY_STORE_ID_MAX <
	       REC_FIXED_MAX + (64u << 20), "a RESERVE fits under REC_MAX");

static int jnl_open(const char *args, void **store, char *err, size_t errlen);
static int jnl_load(void *store, carmy_store_each_fn each, void *arg);
static void jnl_submit(void *store, struct carmy_store_req *req);
static void jnl_close(void *store);

const struct carmy_store_ops journal_store_ops = {
	.abi = CARMY_STORE_ABI,
	.name = "journal",
	.open = jnl_open,
	.load = jnl_load,
	.submit = jnl_submit,
	.close = jnl_close,
	.durable = 1,
};

static int create_file(struct jnl *j, char *err, size_t errlen);
static void make_head(struct jfile_head *h);
static int recover(struct jnl *j, char *err, size_t errlen);
static size_t rec_valid(uint64_t salt, const uint8_t *p, size_t avail,
			uint64_t seq);
static bool torn(const struct jnl *j, uint64_t off);
static int map_file(struct jnl *j);
static void unmap_file(struct jnl *j);

static int index_record(struct jidx *ix, const uint8_t *p, uint64_t off);
static int ix_room(struct jidx *ix);
static struct jexec *ix_add(struct jidx *ix, const uint8_t exec[16],
			    uint64_t ih, uint64_t off, uint32_t *ident_slot);
static void ix_free(struct jidx *ix);
static void standing_record(const uint8_t *map, const struct jexec *x,
			    struct carmy_store_record *r);

static void *writer(void *arg);
static void batch_done(struct jnl *j);
static struct carmy_store_req *take_batch(struct jnl *j, size_t *lenp);
static void commit(struct jnl *j, struct carmy_store_req *batch, size_t len);
static void index_batch(struct jnl *j, uint64_t off, size_t len);
static void lose_index(struct jnl *j, int rc);
static int grow_file(int fd, uint64_t end, uint64_t *size, uint64_t need);
static size_t rec_size(const struct carmy_store_req *req);
static void rec_put(const struct carmy_store_req *req, uint64_t seq,
		    uint64_t batch, uint64_t salt, uint8_t *p, size_t len);

static bool needs_compaction(const struct jnl *j);
static void start_compaction(struct jnl *j);
static void *compactor(void *arg);
static void compact_online(struct jnl *j);
static int compact_at_start(struct jnl *j, bool *renamed);
static void compact_init(const struct jnl *j, struct jcompact *c);
static void compact_free(struct jcompact *c);
static int new_file(const struct jnl *j, struct jcompact *c);
static int rewrite_standing(struct jnl *j, struct jcompact *c, bool online);
static int catch_up(struct jnl *j, struct jcompact *c);
static int copy_delta(struct jnl *j, struct jcompact *c, uint64_t to);
static int finish(struct jnl *j, struct jcompact *c, bool *renamed);
static void switch_to(struct jnl *j, struct jcompact *c);
static void abandon(struct jnl *j, struct jcompact *c, bool closing);
static int read_records(const struct jnl *j, uint64_t *from, uint64_t *seq,
			uint64_t to, struct jcompact *c, size_t *lenp);
static int put_standing(struct jcompact *c, const uint8_t *map,
			const struct jexec *x, size_t *len);
static void reseal(uint8_t *p, uint64_t seq, uint64_t salt);
static void token_take(struct jnl *j);
static void token_give(struct jnl *j, int rc, const struct jcompact *c,
		       uint64_t paused_ns);
static bool stop_asked(struct jnl *j);

static int write_all(int fd, const void *buf, size_t len, uint64_t off);
static int read_all(int fd, void *buf, size_t len, uint64_t off);
static int buf_room(uint8_t **buf, size_t *cap, size_t need);
static uint32_t rec_len(const uint8_t *p);
static uint64_t compact_min_env(void);
static uint64_t ident_hash(const uint8_t *ident, const uint16_t len[3]);
static uint64_t now_ns(void);
static uint64_t mono_ns(void);

/* ---------------------------------------------------------------- API */

static int jnl_open(const char *args, void **store, char *err, size_t errlen)
{
	struct jnl *j;
	struct stat st;
	int rc;

	*store = NULL;
	if (args == NULL || args[0] == '\0') {
		snprintf(err, errlen, "journal needs a directory: "
			 "--store journal:DIR");
		return -EINVAL;
	}
	j = calloc(1, sizeof(*j));
	if (j == NULL)
		return -ENOMEM;
	j->fd = j->dir_fd = j->ix.fd = -1;
	j->tail = &j->head;
	j->alone = true;
	j->compact_min = compact_min_env();
	pthread_mutex_init(&j->lock, NULL);
	pthread_cond_init(&j->wake, NULL);
	pthread_cond_init(&j->compact_wake, NULL);
	pthread_cond_init(&j->idle, NULL);
	if (mkdir(args, 0700) != 0 && errno != EEXIST) {
		rc = -errno;
		snprintf(err, errlen, "cannot create journal directory %s: %s",
			 args, strerror(errno));
		goto fail;
	}
	j->dir_fd = open(args, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (j->dir_fd < 0 ||
	    snprintf(j->path, sizeof(j->path), "%s/%s", args, JOURNAL_FILE) >=
		    (int)sizeof(j->path)) {
		rc = j->dir_fd < 0 ? -errno : -ENAMETOOLONG;
		snprintf(err, errlen, "cannot open journal directory %s: %s",
			 args, strerror(-rc));
		goto fail;
	}
	j->fd = open(j->path, O_RDWR | O_CLOEXEC);
	if (j->fd < 0 && errno == ENOENT) {
		rc = create_file(j, err, errlen);
		if (rc != 0)
			goto fail;
	} else if (j->fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot open %s: %s", j->path,
			 strerror(errno));
		goto fail;
	}
	/* One writer per journal: a second carmyd on the same directory
	 * would interleave records. */
	if (flock(j->fd, LOCK_EX | LOCK_NB) != 0) {
		rc = -EBUSY;
		snprintf(err, errlen, "journal %s is in use by another carmyd",
			 j->path);
		goto fail;
	}
	if (fstat(j->fd, &st) != 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot stat %s: %s", j->path,
			 strerror(errno));
		goto fail;
	}
	/* The lock must be on the file that is the journal: one opened just
	 * before another carmyd's compaction renamed its new file over it
	 * is a file nobody will ever read. */
	{
		struct stat now;

		if (stat(j->path, &now) != 0 || now.st_dev != st.st_dev ||
		    now.st_ino != st.st_ino) {
			rc = -EBUSY;
			snprintf(err, errlen, "journal %s is in use by another "
				 "carmyd", j->path);
			goto fail;
		}
	}
	/* A compaction's new file that a crash left behind: never read, and
	 * as big as the journal. Ours to remove now that we hold the lock. */
	{
		char stale[sizeof(j->path) + 8];

		snprintf(stale, sizeof(stale), "%s.new", j->path);
		if (unlink(stale) != 0 && errno != ENOENT && errno != EISDIR)
			log_warn("cannot remove %s: %s", stale,
				 strerror(errno));
	}
	j->size = (uint64_t)st.st_size;
	rc = recover(j, err, errlen);
	if (rc == 0 && needs_compaction(j)) {
		bool renamed = false;

		rc = compact_at_start(j, &renamed);
		/* Compaction is an optimisation: if it failed before the
		 * rename, the old journal is still read and in use: go on
		 * with it. Once renamed, the new file is the journal, and
		 * its directory must be flushed before anything is appended
		 * to it (a lost rename would lose those records). */
		if (rc != 0 && !renamed) {
			log_warn("cannot compact journal %s: %s", j->path,
				 strerror(-rc));
			rc = 0;
		} else if (rc != 0) {
			snprintf(err, errlen, "journal %s was compacted but its "
				 "directory cannot be flushed: %s", j->path,
				 strerror(-rc));
		}
	}
	if (rc != 0)
		goto fail;
	j->durable_end = j->end;
	j->pub_records = j->nrec;
	*store = j;
	return 0;
fail:
	jnl_close(j);
	return rc;
}

/*
 * Hand over every execution still standing: reserved and neither released
 * nor superseded, with its result if it has one. Records point into the
 * mapped file; the mapping goes away once load() returns (the index stays:
 * commits keep it up to date, compaction reads it).
 */
static int jnl_load(void *store, carmy_store_each_fn each, void *arg)
{
	struct jnl *j = store;
	int rc = 0;

	/* After a compaction at start, recovery's mapping was of the old
	 * file. */
	if (j->map == NULL && (rc = map_file(j)) != 0)
		return rc;
	for (uint32_t i = 0; i < j->ix.nex && rc == 0; i++) {
		struct carmy_store_record r;

		if (j->ix.ex[i].gone)
			continue;
		standing_record(j->map, &j->ix.ex[i], &r);
		rc = each(arg, &r);
	}
	j->ix.map = NULL;
	j->ix.map_end = 0;
	unmap_file(j);
	return rc;
}

static void jnl_submit(void *store, struct carmy_store_req *req)
{
	struct jnl *j = store;
	int broken;

	pthread_mutex_lock(&j->lock);
	broken = __atomic_load_n(&j->broken, __ATOMIC_ACQUIRE);
	if (broken == 0 && !j->started) {
		/* The first request starts the writer: open and load ran
		 * single-threaded, before any thread. */
		int err = pthread_create(&j->writer, NULL, writer, j);

		if (err != 0)
			broken = -err;
		else
			j->started = true;
	}
	if (broken != 0) {
		pthread_mutex_unlock(&j->lock);
		req->done(req, broken);
		return;
	}
	req->next = NULL;
	*j->tail = req;
	j->tail = &req->next;
	if (!j->flushing && !j->want_token && j->alone) {
		struct carmy_store_req *batch;
		size_t len;

		j->flushing = true;
		batch = take_batch(j, &len);
		pthread_mutex_unlock(&j->lock);
		commit(j, batch, len);
		pthread_mutex_lock(&j->lock);
		batch_done(j);
	}
	/* The writer: for this request, for what queued up meanwhile, or
	 * to stop (glibc makes this free when nobody waits). */
	pthread_cond_signal(&j->wake);
	pthread_mutex_unlock(&j->lock);
}

/* Every submitted request is done before close is called (carmyd waits),
 * but a queue left over is still answered, never dropped. A compaction
 * under way is abandoned (the old journal stands). */
static void jnl_close(void *store)
{
	struct jnl *j = store;

	if (j == NULL)
		return;
	pthread_mutex_lock(&j->lock);
	j->stopping = true;
	pthread_cond_signal(&j->wake);
	pthread_cond_signal(&j->compact_wake);
	pthread_mutex_unlock(&j->lock);
	if (j->started)
		pthread_join(j->writer, NULL);
	if (j->compactor_started)
		pthread_join(j->compactor, NULL);
	if (j->flushes > 0)
		log_info("journal %s: %llu records in %llu flushes this run "
			 "(%.1f per flush), %llu compactions", j->path,
			 (unsigned long long)j->records,
			 (unsigned long long)j->flushes,
			 (double)j->records / (double)j->flushes,
			 (unsigned long long)j->stats.compactions);
	unmap_file(j);
	ix_free(&j->ix);
	free(j->buf);
	if (j->fd >= 0)
		close(j->fd);
	if (j->dir_fd >= 0)
		close(j->dir_fd);
	pthread_cond_destroy(&j->idle);
	pthread_cond_destroy(&j->compact_wake);
	pthread_cond_destroy(&j->wake);
	pthread_mutex_destroy(&j->lock);
	free(j);
}

/*
 * Read the journal in dir as carmyd would at start, without changing a
 * byte (no cut, no lock: a running carmyd may be appending, and its tail
 * can then look torn). Fills *rep. Returns 0 (rep->torn tells whether a
 * start would cut a torn tail), or what carmyd would refuse it with and a
 * sentence in err.
 */
int journal_check(const char *dir, struct journal_report *rep, char *err,
		  size_t errlen)
{
	struct jnl *j = calloc(1, sizeof(*j));
	struct stat st;
	int rc;

	memset(rep, 0, sizeof(*rep));
	if (j == NULL)
		return -ENOMEM;
	j->fd = j->dir_fd = j->ix.fd = -1;
	j->readonly = true;
	j->tail = &j->head;
	pthread_mutex_init(&j->lock, NULL);
	pthread_cond_init(&j->wake, NULL);
	pthread_cond_init(&j->compact_wake, NULL);
	pthread_cond_init(&j->idle, NULL);
	if (snprintf(j->path, sizeof(j->path), "%s/%s", dir, JOURNAL_FILE) >=
	    (int)sizeof(j->path)) {
		rc = -ENAMETOOLONG;
		snprintf(err, errlen, "%s: path too long", dir);
		goto out;
	}
	j->fd = open(j->path, O_RDONLY | O_CLOEXEC);
	if (j->fd < 0 || fstat(j->fd, &st) != 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot open %s: %s", j->path,
			 strerror(errno));
		goto out;
	}
	j->size = (uint64_t)st.st_size;
	rc = recover(j, err, errlen);
	rep->file_bytes = (uint64_t)st.st_size;
	rep->end = j->end;
	rep->torn = j->torn;
	for (int op = 0; op <= CARMY_STORE_PURGE; op++)
		rep->records += rep->by_op[op] = j->by_op[op];
	for (uint32_t i = 0; i < j->ix.nex; i++) {
		if (j->ix.ex[i].gone)
			continue;
		if (j->ix.ex[i].complete_off != 0)
			rep->completed++;
		else
			rep->unfinished++;
	}
out:
	jnl_close(j);
	return rc;
}

void journal_set_compact_hook(void *store, journal_compact_hook fn, void *arg)
{
	struct jnl *j = store;

	pthread_mutex_lock(&j->lock);
	j->hook = (struct jhook){ fn, arg };
	pthread_mutex_unlock(&j->lock);
}

void journal_get_stats(void *store, struct journal_stats *st)
{
	struct jnl *j = store;

	pthread_mutex_lock(&j->lock);
	*st = j->stats;
	st->records = j->pub_records;
	st->end = j->durable_end;
	pthread_mutex_unlock(&j->lock);
}

/* ---------------------------------------------------------------- writer */

/* Write the batches that queue up behind one in flight. */
static void *writer(void *arg)
{
	struct jnl *j = arg;

	pthread_mutex_lock(&j->lock);
	for (;;) {
		struct carmy_store_req *batch;
		size_t len;

		/* The compactor asking for the token goes first: it only
		 * waits for the batch in flight. */
		while ((j->head == NULL || j->flushing || j->want_token) &&
		       !j->stopping)
			pthread_cond_wait(&j->wake, &j->lock);
		if (j->head == NULL || j->flushing || j->want_token) {
			if (j->head == NULL && !j->flushing)
				break;	/* stopping, nothing left */
			pthread_cond_wait(&j->wake, &j->lock);
			continue;
		}
		j->flushing = true;
		batch = take_batch(j, &len);
		pthread_mutex_unlock(&j->lock);
		commit(j, batch, len);
		pthread_mutex_lock(&j->lock);
		batch_done(j);
		pthread_cond_broadcast(&j->wake);
	}
	pthread_mutex_unlock(&j->lock);
	return NULL;
}

/*
 * The token's holder is done (a batch, or the compactor's switch): with
 * j->lock held, publish where durable records end (the compactor copies
 * up to there without the token), give the token back, and see whether
 * the journal should be compacted: two comparisons, so it is done after
 * every batch.
 */
static void batch_done(struct jnl *j)
{
	j->durable_end = j->end;
	j->pub_records = j->nrec;
	if (needs_compaction(j))
		start_compaction(j);
	j->flushing = false;
	if (j->want_token)
		pthread_cond_signal(&j->idle);
}

/* Take what is queued, up to about a batch's worth. With j->lock held, by
 * the one thread that set j->flushing. */
static struct carmy_store_req *take_batch(struct jnl *j, size_t *lenp)
{
	struct carmy_store_req *batch = j->head, *last = NULL;
	size_t len = 0;

	for (struct carmy_store_req *r = batch; r != NULL; r = r->next) {
		size_t n = rec_size(r);

		if (last != NULL && len + n > JOURNAL_BATCH_MAX)
			break;
		len += n;
		last = r;
	}
	j->head = last->next;
	if (j->head == NULL)
		j->tail = &j->head;
	last->next = NULL;
	*lenp = len;
	return batch;
}

/* Write batch (len bytes of records) and make it durable, then answer
 * every request in it, in order. Without j->lock: only the thread that set
 * j->flushing touches the file, the buffer and the sequence numbers. */
static void commit(struct jnl *j, struct carmy_store_req *batch, size_t len)
{
	int rc = __atomic_load_n(&j->broken, __ATOMIC_ACQUIRE);

	if (rc == 0 && len > j->cap)
		rc = buf_room(&j->buf, &j->cap, len);	/* this batch only */
	if (rc == 0 && j->end + len > j->size)
		rc = grow_file(j->fd, j->end, &j->size, len);
	if (rc == 0) {
		uint64_t first = j->seq + 1;
		size_t at = 0;

		for (struct carmy_store_req *r = batch; r != NULL; r = r->next) {
			size_t n = rec_size(r);

			j->seq++;
			rec_put(r, j->seq, first, j->salt, j->buf + at, n);
			at += n;
		}
		rc = write_all(j->fd, j->buf, len, j->end);
		if (rc == 0 && fdatasync(j->fd) != 0)
			rc = -errno;
		if (rc == 0) {
			index_batch(j, j->end, len);
			j->end += len;
			j->alone = j->seq + 1 - first == 1;
			j->flushes++;
			j->records += (uint64_t)(j->seq + 1 - first);
			j->nrec += (uint64_t)(j->seq + 1 - first);
		} else {
			/* After a failed write or flush nothing in the page
			 * cache can be trusted to reach the disk: fail
			 * closed from here on. */
			log_error("journal %s: %s: refusing every reservation "
				  "and completion from now on", j->path,
				  strerror(-rc));
			__atomic_store_n(&j->broken, rc, __ATOMIC_RELEASE);
		}
	}
	while (batch != NULL) {
		struct carmy_store_req *next = batch->next;

		batch->done(batch, rc);
		batch = next;
	}
}

/*
 * Keep the index up to date with a batch just made durable at off (its
 * bytes still in j->buf). Not while compacting: the compactor owns the
 * index then, and takes these records from the file when it switches (or
 * gives up). An index that missed a record would let a compaction drop
 * an execution, so once one is missed there is no online compaction.
 */
static void index_batch(struct jnl *j, uint64_t off, size_t len)
{
	if (j->compacting || j->no_index)
		return;
	for (size_t at = 0; at < len;) {
		uint32_t n;
		int rc;

		memcpy(&n, j->buf + at, sizeof(n));
		rc = index_record(&j->ix, j->buf + at, off + at);
		if (rc != 0) {
			lose_index(j, rc);
			return;
		}
		at += n;
	}
}

/* By the token's holder: the index cannot be trusted any more. */
static void lose_index(struct jnl *j, int rc)
{
	log_warn("journal %s: cannot keep its index (%s): no compaction "
		 "until carmyd restarts", j->path, strerror(-rc));
	j->no_index = true;
	ix_free(&j->ix);
}

/* Make room for need more bytes after end: write zeros ahead, flushed
 * once, so that commits never change the file's size. */
static int grow_file(int fd, uint64_t end, uint64_t *size, uint64_t need)
{
	static const uint8_t zeros[65536];
	uint64_t target = end + need + JOURNAL_GROW;

	target = (target + sizeof(zeros) - 1) / sizeof(zeros) * sizeof(zeros);
	while (*size < target) {
		uint64_t n = target - *size;
		int rc;

		if (n > sizeof(zeros))
			n = sizeof(zeros);
		rc = write_all(fd, zeros, n, *size);
		if (rc != 0)
			return rc;
		*size += n;
	}
	if (fsync(fd) != 0)
		return -errno;
	return 0;
}

static size_t rec_size(const struct carmy_store_req *req)
{
	const struct carmy_store_record *r = req->rec;
	size_t n = sizeof(struct jrec_head);

	switch (req->op) {
	case CARMY_STORE_RESERVE:
		n += sizeof(struct jrec_reserve) + r->len[0] + r->len[1] +
		     r->len[2];
		break;
	case CARMY_STORE_COMPLETE:
		n += sizeof(struct jrec_complete) + r->result_len;
		break;
	case CARMY_STORE_RESOLVE:
		n += sizeof(struct jrec_resolve) +
		     (r->state == CARMY_STORE_COMPLETED ? r->result_len : 0);
		break;
	default:
		n += sizeof(struct jrec_release);
		break;
	}
	return (n + 7) / 8 * 8 + 8;
}

/* Write req's record, len bytes (rec_size), at p, as number seq of a
 * batch whose first is number batch, sealed with salt. */
static void rec_put(const struct carmy_store_req *req, uint64_t seq,
		    uint64_t batch, uint64_t salt, uint8_t *p, size_t len)
{
	const struct carmy_store_record *r = req->rec;
	struct jrec_head h = { .jr_len = (uint32_t)len, .jr_op = (uint8_t)req->op,
			       .jr_seq = seq, .jr_batch = batch };
	uint8_t *q = p + sizeof(h);
	uint64_t sum;

	memset(p, 0, len);
	memcpy(p, &h, sizeof(h));
	switch (req->op) {
	case CARMY_STORE_RESERVE: {
		struct jrec_reserve rv = { .rv_started_ns = r->started_ns,
					   .rv_pid = r->pid };

		memcpy(rv.rv_exec, r->exec, 16);
		memcpy(rv.rv_fingerprint, r->fingerprint, 16);
		memcpy(rv.rv_rawprint, r->rawprint, 16);
		memcpy(rv.rv_len, r->len, sizeof(rv.rv_len));
		memcpy(q, &rv, sizeof(rv));
		q += sizeof(rv);
		for (int k = 0; k < 3; k++) {
			memcpy(q, r->part[k], r->len[k]);
			q += r->len[k];
		}
		break;
	}
	case CARMY_STORE_COMPLETE: {
		struct jrec_complete cp = {
			.cp_finished_ns = r->finished_ns,
			.cp_status = r->status,
			.cp_result_code = r->result_code,
			.cp_result_len = r->result_len,
		};

		memcpy(cp.cp_exec, r->exec, 16);
		memcpy(q, &cp, sizeof(cp));
		if (r->result_len > 0)
			memcpy(q + sizeof(cp), r->result, r->result_len);
		break;
	}
	case CARMY_STORE_RESOLVE: {
		bool committed = r->state == CARMY_STORE_COMPLETED;
		struct jrec_resolve rs = {
			.rs_finished_ns = r->finished_ns,
			.rs_resolved_ns = r->resolved_ns,
			.rs_uid = r->resolved_uid,
			.rs_pid = r->resolved_pid,
			.rs_status = r->status,
			.rs_result_code = r->result_code,
			.rs_result_len = committed ? r->result_len : 0,
			.rs_committed = committed,
		};

		memcpy(rs.rs_exec, r->exec, 16);
		memcpy(q, &rs, sizeof(rs));
		if (committed && r->result_len > 0)
			memcpy(q + sizeof(rs), r->result, r->result_len);
		break;
	}
	default: {
		struct jrec_release rl;

		memcpy(rl.rl_exec, r->exec, 16);
		memcpy(q, &rl, sizeof(rl));
		break;
	}
	}
	sum = XXH3_64bits_withSeed(p, len - 8, salt);
	memcpy(p + len - 8, &sum, 8);
}

/* ---------------------------------------------------------------- recovery */

/* A new file's header, with a salt of its own: a record of another
 * journal (an older one of the same directory) never passes in it. */
static void make_head(struct jfile_head *h)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->jf_magic, JOURNAL_MAGIC, 8);
	h->jf_version = JOURNAL_VERSION;
	if (getrandom(&h->jf_salt, sizeof(h->jf_salt), 0) !=
	    sizeof(h->jf_salt))
		h->jf_salt = now_ns() ^ (uint64_t)getpid() << 32;
	h->jf_created_ns = now_ns();
	h->jf_check = XXH3_64bits(h, offsetof(struct jfile_head, jf_check));
}

static int create_file(struct jnl *j, char *err, size_t errlen)
{
	char tmp[4096 + 8];
	struct jfile_head h;
	int fd, rc;

	make_head(&h);
	/* Written whole under another name, flushed, then renamed and the
	 * directory flushed: a crash leaves either no journal or a good
	 * empty one, never a half-written header. */
	snprintf(tmp, sizeof(tmp), "%s.new", j->path);
	fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		goto fail;
	}
	rc = write_all(fd, &h, sizeof(h), 0);
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, j->path) != 0)
		rc = -errno;
	if (rc == 0 && fsync(j->dir_fd) != 0)
		rc = -errno;
	if (rc != 0) {
		close(fd);
		unlink(tmp);
		goto fail;
	}
	j->fd = fd;
	log_info("created journal %s", j->path);
	return 0;
fail:
	snprintf(err, errlen, "cannot create journal %s: %s", j->path,
		 strerror(-rc));
	return rc;
}

static int recover(struct jnl *j, char *err, size_t errlen)
{
	struct jfile_head h;
	uint64_t off = HEAD_SIZE, records = 0;
	int rc;

	if (j->size < HEAD_SIZE) {
		snprintf(err, errlen, "journal %s is %llu bytes, shorter than "
			 "its header: not a journal, or damaged",
			 j->path, (unsigned long long)j->size);
		return CARMY_ECORRUPT;
	}
	j->map_len = (size_t)j->size;
	j->map = mmap(NULL, j->map_len, PROT_READ, MAP_PRIVATE, j->fd, 0);
	if (j->map == MAP_FAILED) {
		j->map = NULL;
		snprintf(err, errlen, "cannot map %s: %s", j->path,
			 strerror(errno));
		return -errno;
	}
	madvise(j->map, j->map_len, MADV_SEQUENTIAL);
	memcpy(&h, j->map, sizeof(h));
	if (memcmp(h.jf_magic, JOURNAL_MAGIC, 8) != 0 ||
	    h.jf_check != XXH3_64bits(&h, offsetof(struct jfile_head,
						   jf_check))) {
		snprintf(err, errlen, "%s is not a Carmy journal, or its header "
			 "is damaged", j->path);
		return CARMY_ECORRUPT;
	}
	if (h.jf_version != JOURNAL_VERSION) {
		snprintf(err, errlen, "journal %s has format %u; this carmyd "
			 "reads format %u", j->path, h.jf_version,
			 JOURNAL_VERSION);
		return CARMY_ELAYOUT;
	}
	j->salt = h.jf_salt;
	/* Identities are read from the mapping while it holds the records;
	 * those appended later are read from the file. */
	j->ix.fd = j->fd;
	j->ix.map = j->map;
	j->ix.map_end = j->map_len;

	for (;;) {
		size_t n = rec_valid(j->salt, j->map + off, j->size - off,
				     j->seq + 1);

		if (n == 0)
			break;
		j->by_op[j->map[off + offsetof(struct jrec_head, jr_op)]]++;
		rc = index_record(&j->ix, j->map + off, off);
		if (rc != 0) {
			snprintf(err, errlen, "cannot index %s: %s", j->path,
				 strerror(-rc));
			return rc;
		}
		j->seq++;
		records++;
		off += n;
	}
	j->end = off;
	j->ix.map_end = off;
	j->nrec = records;

	/* Is what follows the end zeros (a clean end), a torn tail, or
	 * damage with good records after it? */
	bool zeros = true;
	uint64_t last = off;

	for (uint64_t p = off; p < j->size; p++) {
		if (j->map[p] != 0) {
			zeros = false;
			last = p;
		}
	}
	if (!zeros && !torn(j, off)) {
		snprintf(err, errlen, "journal %s is damaged at byte %llu: the "
			 "record there is whole on disk but fails its checksum, "
			 "so it may have been acknowledged; refusing to cut it "
			 "off. Keep a copy and see docs/journal.md", j->path,
			 (unsigned long long)off);
		return CARMY_ECORRUPT;
	}
	if (!zeros) {
		/* Records of the batch that was being written when the
		 * crash came may have reached the disk out of order: they
		 * were never acknowledged, and go with the tail. A good
		 * record of a later batch proves the damaged one was
		 * acknowledged (a batch is written only once the one before
		 * it was flushed). */
		uint64_t hashed = 0;

		for (uint64_t p = off + 8; p + REC_MIN <= j->size; p += 8) {
			struct jrec_head rh;

			memcpy(&rh, j->map + p, sizeof(rh));
			/* Only a head that could be one of ours is hashed:
			 * a later sequence number, no more records than
			 * the bytes could hold. Crafted bytes full of such
			 * heads could still cost a hash each: past a
			 * budget of 8x the file, the tail is judged
			 * damaged (refused), never cut on a guess. */
			if (rh.jr_batch <= j->seq + 1 || rh.jr_seq <= j->seq ||
			    rh.jr_seq - j->seq > (j->size - off) / REC_MIN ||
			    rh.jr_len < REC_MIN || rh.jr_len > j->size - p)
				continue;
			hashed += rh.jr_len;
			if (hashed > 8 * j->size) {
				snprintf(err, errlen,
					 "journal %s: too many record-like "
					 "heads after byte %llu to tell a torn "
					 "tail from damage: refusing to cut. "
					 "Keep a copy and see docs/journal.md",
					 j->path, (unsigned long long)off);
				return CARMY_ECORRUPT;
			}
			if (rec_valid(j->salt, j->map + p, j->size - p,
				      rh.jr_seq) != 0) {
				snprintf(err, errlen,
					 "journal %s is damaged at byte %llu, "
					 "and good records follow at byte "
					 "%llu: refusing to cut them off. "
					 "Keep a copy and see docs/journal.md",
					 j->path, (unsigned long long)off,
					 (unsigned long long)p);
				return CARMY_ECORRUPT;
			}
		}
		j->torn = last + 1 - off;
		if (j->readonly)
			goto done;
		log_warn("journal %s: cutting a torn tail of %llu bytes at "
			 "byte %llu (a write cut short by a crash)", j->path,
			 (unsigned long long)(last + 1 - off),
			 (unsigned long long)off);
		if (ftruncate(j->fd, (off_t)off) != 0 || fsync(j->fd) != 0) {
			snprintf(err, errlen, "cannot cut the torn tail of %s: "
				 "%s", j->path, strerror(errno));
			return -errno;
		}
		j->size = off;
	}
done:
	if (!j->readonly)
		log_info("journal %s: %llu records, %u executions standing",
			 j->path, (unsigned long long)records, j->ix.live);
	return 0;
}

/*
 * Can a write cut short by a crash explain the bad record at off? Bytes the
 * journal never wrote are zeros (the file grows in written zeros), and a
 * disk writes a 512-byte sector whole or not at all. So a torn record runs
 * past the end of the file, or has a piece, from off or a sector boundary
 * to the next boundary, that is still all zeros. A record that is whole on
 * disk and fails its checksum was damaged after it was written, and its
 * batch may have been acknowledged: that is refused, never cut. A length
 * that cannot be read leaves only the head to judge by.
 */
static bool torn(const struct jnl *j, uint64_t off)
{
	struct jrec_head h;
	uint64_t end;

	if (j->size - off < sizeof(h))
		return true;
	memcpy(&h, j->map + off, sizeof(h));
	if (h.jr_len >= REC_MIN && h.jr_len <= REC_MAX && h.jr_len % 8 == 0) {
		if (h.jr_len > j->size - off)
			return true;
		end = off + h.jr_len;
	} else {
		end = off + sizeof(h);
	}
	for (uint64_t p = off; p < end;) {
		uint64_t q = (p / 512 + 1) * 512;
		bool zero = true;

		if (q > end)
			q = end;
		for (uint64_t i = p; i < q && zero; i++)
			zero = j->map[i] == 0;
		if (zero)
			return true;
		p = q;
	}
	return false;
}

/* Is there a whole, good record with sequence number seq at p? Returns its
 * length, or 0. Only bytes below avail are read. */
static size_t rec_valid(uint64_t salt, const uint8_t *p, size_t avail,
			uint64_t seq)
{
	struct jrec_head h;
	uint64_t sum;
	size_t fixed;

	if (avail < REC_MIN)
		return 0;
	memcpy(&h, p, sizeof(h));
	if (h.jr_len < REC_MIN || h.jr_len > avail || h.jr_len % 8 != 0 ||
	    h.jr_len > REC_MAX || h.jr_seq != seq || h.jr_batch > h.jr_seq)
		return 0;
	memcpy(&sum, p + h.jr_len - 8, 8);
	if (sum != XXH3_64bits_withSeed(p, h.jr_len - 8, salt))
		return 0;
	/* The checksum proves these bytes were written by us; the sizes
	 * inside must still agree with the length. */
	switch (h.jr_op) {
	case CARMY_STORE_RESERVE: {
		struct jrec_reserve rv;
		size_t id = 0;

		fixed = sizeof(h) + sizeof(rv);
		if (h.jr_len < fixed + 8)
			return 0;
		memcpy(&rv, p + sizeof(h), sizeof(rv));
		for (int k = 0; k < 3; k++) {
			if (rv.rv_len[k] == 0 ||
			    rv.rv_len[k] > CARMY_STORE_ID_MAX)
				return 0;
			id += rv.rv_len[k];
		}
		if (fixed + id + 8 > h.jr_len)
			return 0;
		break;
	}
	case CARMY_STORE_COMPLETE:
	case CARMY_STORE_RESOLVE: {
		/* Both end in a result whose length is in their fixed part. */
		bool cp = h.jr_op == CARMY_STORE_COMPLETE;
		uint32_t rlen;

		fixed = sizeof(h) + (cp ? sizeof(struct jrec_complete) :
					  sizeof(struct jrec_resolve));
		if (h.jr_len < fixed + 8)
			return 0;
		memcpy(&rlen, p + sizeof(h) +
			       (cp ? offsetof(struct jrec_complete, cp_result_len) :
				     offsetof(struct jrec_resolve, rs_result_len)),
		       sizeof(rlen));
		if (fixed + (size_t)rlen + 8 > h.jr_len)
			return 0;
		break;
	}
	case CARMY_STORE_RELEASE:
	case CARMY_STORE_PURGE:
		break;
	default:
		return 0;
	}
	return h.jr_len;
}

/* Map the file's records for load(), after a compaction at start replaced
 * the file recovery had mapped. */
static int map_file(struct jnl *j)
{
	void *m = mmap(NULL, (size_t)j->end, PROT_READ, MAP_SHARED, j->fd, 0);

	if (m == MAP_FAILED)
		return -errno;
	j->map = m;
	j->map_len = (size_t)j->end;
	return 0;
}

static void unmap_file(struct jnl *j)
{
	if (j->map != NULL)
		munmap(j->map, j->map_len);
	j->map = NULL;
	j->map_len = 0;
}

/* ---------------------------------------------------------------- index */

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
	rc = read_all(ix->fd, &rv, sizeof(rv), off);
	if (rc != 0)
		return rc;
	if (memcmp(rv.rv_len, len, sizeof(rv.rv_len)) != 0)
		return 0;
	rc = read_all(ix->fd, buf, total, off + sizeof(rv));
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
static int index_record(struct jidx *ix, const uint8_t *p, uint64_t off)
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
		rc = ix_room(ix);
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
		ix_add(ix, rv.rv_exec, ih, off, slot);
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
static int ix_room(struct jidx *ix)
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

/* A new execution, standing, whose RESERVE is at off; after ix_room().
 * Its identity takes ident_slot (from find_ident()) or, if NULL, the first
 * free slot: a compaction adds only standing executions, whose identities
 * are all different. */
static struct jexec *ix_add(struct jidx *ix, const uint8_t exec[16],
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

static void ix_free(struct jidx *ix)
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

/* Execution x as a record: identity, fingerprints, exec id and, if it has
 * one, its result (from a COMPLETE or a committed RESOLVE), pointing into
 * map, a mapping of the file its offsets are in. */
static void standing_record(const uint8_t *map, const struct jexec *x,
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

/* ---------------------------------------------------------------- compaction */

/*
 * More than twice the records the standing executions need, and enough of
 * them to be worth a rewrite. Two comparisons, so it is checked after every
 * batch, by the token's holder (who owns ix) with j->lock held.
 */
static bool needs_compaction(const struct jnl *j)
{
	uint64_t needed = (uint64_t)j->ix.live + j->ix.results;

	return !j->readonly && !j->no_index && !j->compacting &&
	       !j->stopping && __atomic_load_n(&j->broken, __ATOMIC_ACQUIRE) == 0 &&
	       j->nrec > j->compact_min && j->nrec > 2 * needed &&
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

static void *compactor(void *arg)
{
	struct jnl *j = arg;

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
 * So commits wait, at most, for the batch in flight plus step 3: copying
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
	uint64_t t0, paused, before;
	uint32_t live = 0;
	int rc;

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

	token_take(j);
	t0 = mono_ns();
	if (rc == 0)
		rc = finish(j, &c, &renamed);
	if (rc != 0 && !renamed) {
		abandon(j, &c, rc == -ECANCELED);
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
	paused = mono_ns() - t0;
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
			 "use is unchanged, next try once it has twice the "
			 "records", j->path, strerror(-rc));
	compact_free(&c);
	if (hook.fn != NULL)
		hook.fn(hook.arg, JOURNAL_COMPACT_DONE, rc);
}

/* At start, before any thread: the same rewrite and switch, with nothing
 * committed meanwhile to catch up with. */
static int compact_at_start(struct jnl *j, bool *renamed)
{
	struct jcompact c;
	uint64_t before = j->end;
	int rc;

	j->snap_end = j->end;
	j->snap_seq = j->seq;
	compact_init(j, &c);
	rc = new_file(j, &c);
	if (rc == 0)
		rc = rewrite_standing(j, &c, false);
	if (rc == 0)
		rc = finish(j, &c, renamed);
	if (rc != 0 && !*renamed)
		abandon(j, &c, false);
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
	c->from = j->snap_end;
	c->from_seq = j->snap_seq + 1;
}

static void compact_free(struct jcompact *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	ix_free(&c->ix);
	free(c->buf);
	c->buf = NULL;
	c->cap = 0;
}

/* DIR/journal.new with its header (a salt of its own), locked before it
 * takes the journal's name, like the journal. */
static int new_file(const struct jnl *j, struct jcompact *c)
{
	struct jfile_head h;

	make_head(&h);
	snprintf(c->tmp, sizeof(c->tmp), "%s.new", j->path);
	c->fd = open(c->tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (c->fd < 0)
		return -errno;
	c->ix.fd = c->fd;
	c->salt = h.jf_salt;
	c->end = c->size = HEAD_SIZE;
	if (flock(c->fd, LOCK_EX | LOCK_NB) != 0)
		return -errno;
	return write_all(c->fd, &h, sizeof(h), 0);
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
			rc = write_all(c->fd, c->buf, len, c->end);
			c->end += len;
			len = 0;
			if (rc == 0 && online && stop_asked(j))
				rc = -ECANCELED;
		}
	}
	if (rc == 0 && len > 0) {
		rc = write_all(c->fd, c->buf, len, c->end);
		c->end += len;
	}
	munmap(map, (size_t)j->snap_end);
	c->size = c->end;	/* the zeros go after the records */
	if (rc == 0)
		rc = grow_file(c->fd, c->end, &c->size, 0);
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

	standing_record(map, x, &r);
	req.rec = &r;
	n0 = rec_size(&req);
	if (x->complete_off != 0) {
		op2 = map[x->complete_off + offsetof(struct jrec_head, jr_op)];
		req.op = op2;
		n1 = rec_size(&req);
	}
	rc = buf_room(&c->buf, &c->cap, *len + n0 + n1);
	if (rc == 0)
		rc = ix_room(&c->ix);
	if (rc != 0)
		return rc;
	req.op = CARMY_STORE_RESERVE;
	c->seq++;
	rec_put(&req, c->seq, c->seq, c->salt, c->buf + *len, n0);
	y = ix_add(&c->ix, x->exec, x->ident_hash, c->end + *len, NULL);
	*len += n0;
	c->records++;
	if (n1 > 0) {
		req.op = op2;
		c->seq++;
		rec_put(&req, c->seq, c->seq, c->salt, c->buf + *len, n1);
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
	bool copied = false;

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
		if (to - c->from < JOURNAL_CATCHUP_MIN)
			break;
		rc = copy_delta(j, c, to);
		if (rc != 0)
			return rc;
		copied = true;
	}
	if (copied && fdatasync(c->fd) != 0)
		return -errno;
	return 0;
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
			reseal(c->buf + k, c->seq, c->salt);
		}
		rc = write_all(c->fd, c->buf, len, c->end);
		/* Indexed once written: a RESERVE may need an earlier
		 * identity read back from the new file. */
		for (size_t k = 0; rc == 0 && k < len; k += rec_len(c->buf + k)) {
			rc = index_record(&c->ix, c->buf + k, c->end + k);
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
	if (rc == 0 && rename(c->tmp, j->path) != 0)
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
	j->nrec = c->records;
	j->retry_at = 0;	/* a failure's back-off ends with a success */
	ix_free(&j->ix);
	j->ix = c->ix;
	c->ix = (struct jidx){ .fd = -1 };
	unmap_file(j);	/* recovery's mapping was of the old file */
}

/*
 * Give up before the rename, holding the token: the new file goes, the
 * old journal stays in use as it is (nothing was ever written to it but
 * commits), and its index takes the records committed since the snapshot,
 * which it missed meanwhile (commits wait for that: unlike a switch, a
 * failure's pause grows with what was committed during the compaction).
 * Not when the store is closing: its index is about to be freed. The next
 * try waits until the journal has twice the records, so a full disk does
 * not mean a rewrite per batch.
 */
static void abandon(struct jnl *j, struct jcompact *c, bool closing)
{
	uint64_t from = j->snap_end, seq = j->snap_seq + 1;
	int rc = 0;

	if (c->fd >= 0) {
		close(c->fd);
		c->fd = -1;
		unlink(c->tmp);
	}
	ix_free(&c->ix);
	while (!closing && rc == 0 && from < j->end) {
		uint64_t at = from;
		size_t len;

		rc = read_records(j, &from, &seq, j->end, c, &len);
		for (size_t k = 0; rc == 0 && k < len; k += rec_len(c->buf + k))
			rc = index_record(&j->ix, c->buf + k, at + k);
	}
	if (rc != 0)
		lose_index(j, rc);
	j->retry_at = 2 * j->nrec;
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
		int rc = buf_room(&c->buf, &c->cap, want);

		if (rc == 0)
			rc = read_all(j->fd, c->buf, want, *from);
		if (rc != 0)
			return rc;
		while (len < want) {
			size_t n = rec_valid(j->salt, c->buf + len, want - len,
					     s);

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
 * own, sealed with its salt. */
static void reseal(uint8_t *p, uint64_t seq, uint64_t salt)
{
	struct jrec_head h;
	uint64_t sum;

	memcpy(&h, p, sizeof(h));
	h.jr_seq = h.jr_batch = seq;
	memcpy(p, &h, sizeof(h));
	sum = XXH3_64bits_withSeed(p, h.jr_len - 8, salt);
	memcpy(p + h.jr_len - 8, &sum, 8);
}

/* The compactor takes the token to switch files: it waits for the batch in
 * flight only, since want_token keeps the writer and submit from starting
 * another. */
static void token_take(struct jnl *j)
{
	pthread_mutex_lock(&j->lock);
	j->want_token = true;
	while (j->flushing)
		pthread_cond_wait(&j->idle, &j->lock);
	j->want_token = false;
	j->flushing = true;
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
	batch_done(j);
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

static int write_all(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

/* Read exactly len bytes at off; a file that ends first is -EIO. */
static int read_all(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = pread(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

/* At least need bytes in *buf: at least doubled when it grows, so a run
 * of slightly larger batches does not realloc each time. */
static int buf_room(uint8_t **buf, size_t *cap, size_t need)
{
	size_t n = *cap * 2 > need ? *cap * 2 : need;
	uint8_t *nb;

	if (need <= *cap)
		return 0;
	nb = realloc(*buf, n);
	if (nb == NULL)
		return -ENOMEM;
	*buf = nb;
	*cap = n;
	return 0;
}

static uint32_t rec_len(const uint8_t *p)
{
	uint32_t n;

	memcpy(&n, p, sizeof(n));
	return n;
}

/* The compaction threshold: JOURNAL_COMPACT_MIN, or what the environment
 * says (tests lower it; an operator may raise it). */
static uint64_t compact_min_env(void)
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

static uint64_t ident_hash(const uint8_t *ident, const uint16_t len[3])
{
	return XXH3_64bits_withSeed(ident, (size_t)len[0] + len[1] + len[2],
				    ((uint64_t)len[0] << 32) |
					    ((uint64_t)len[1] << 16) | len[2]);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
