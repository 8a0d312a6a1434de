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
/* A start rewrites the journal when it holds more than this many records
 * and more than twice what the standing executions need. */
#define JOURNAL_COMPACT_MIN 1000

/* ---------------------------------------------------------------- types */

/* Open addressing over recovery's executions: slot = 1 + index, 0 empty. */
struct jindex {
	uint32_t *slot;
	uint32_t mask;
};


struct jnl {
	int fd;
	int dir_fd;
	char path[4096];
	uint64_t salt;
	uint64_t end;		/* where the next record goes */
	uint64_t size;		/* bytes in the file, zeros after end */
	uint64_t seq;		/* of the last record written */
	int broken;		/* -errno once a write or flush failed */

	pthread_t writer;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct carmy_store_req *head, **tail;	/* queued, oldest first */
	bool flushing;		/* a batch is being written (one at a time) */
	bool alone;		/* the last batch held one record */
	bool stopping;

	uint8_t *buf;		/* the batch being written */
	size_t cap;
	uint64_t flushes;	/* batches made durable, and their records */
	uint64_t records;
	bool readonly;		/* journal_check(): read, never cut */
	uint64_t torn;		/* bytes a cut would remove */
	uint64_t by_op[CARMY_STORE_PURGE + 1];	/* records read, by op */
	uint64_t end2;		/* compact(): bytes written after the head */

	/* What recovery found, for load(). */
	uint8_t *map;		/* the file, mapped read-only */
	size_t map_len;
	struct jexec *ex;
	uint32_t nex;
	uint32_t live;
	struct jindex by_exec;	/* exec id -> execution */
	struct jindex by_ident;	/* identity -> the execution that stands */
};

/* What recovery knows about one execution. */
struct jexec {
	uint8_t exec[16];
	uint64_t reserve_off;	/* its RESERVE record */
	uint64_t complete_off;	/* 0: no result */
	uint64_t ident_hash;
	bool gone;		/* released, or superseded by a later one */
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
static int recover(struct jnl *j, char *err, size_t errlen);
static size_t rec_valid(const struct jnl *j, const uint8_t *p, size_t avail,
			uint64_t seq);
static int index_record(struct jnl *j, const uint8_t *p, uint64_t off);
static int index_grow(struct jnl *j);
static void forget(struct jnl *j);
static void standing_record(const struct jnl *j, const struct jexec *x,
			    struct carmy_store_record *r);
static int compact(struct jnl *j, char *err, size_t errlen, bool *renamed);
static bool needs_compaction(const struct jnl *j);
static bool torn(const struct jnl *j, uint64_t off);
static int grow(struct jnl *j, uint64_t need);
static void *writer(void *arg);
static struct carmy_store_req *take_batch(struct jnl *j, size_t *lenp);
static void commit(struct jnl *j, struct carmy_store_req *batch, size_t len);
static size_t rec_size(const struct carmy_store_req *req);
static void rec_put(struct jnl *j, const struct carmy_store_req *req,
		    uint64_t batch, uint8_t *p, size_t len);
static int write_all(int fd, const void *buf, size_t len, uint64_t off);
static uint64_t ident_hash(const uint8_t *ident, const uint16_t len[3]);
static uint64_t now_ns(void);

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
	j->fd = j->dir_fd = -1;
	j->tail = &j->head;
	j->alone = true;
	pthread_mutex_init(&j->lock, NULL);
	pthread_cond_init(&j->wake, NULL);
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
	j->size = (uint64_t)st.st_size;
	rc = recover(j, err, errlen);
	if (rc == 0 && needs_compaction(j)) {
		bool renamed = false;

		rc = compact(j, err, errlen, &renamed);
		/* Compaction is an optimisation: if it failed before the
		 * rename, the old journal is still read and in use: go on
		 * with it. Once renamed, the new file is the journal, and a
		 * failure to read it stops us. */
		if (rc != 0 && !renamed) {
			log_warn("%s", err);
			rc = 0;
		}
	}
	if (rc != 0)
		goto fail;
	*store = j;
	return 0;
fail:
	jnl_close(j);
	return rc;
}

/*
 * Hand over every execution still standing: reserved and neither released
 * nor superseded, with its result if it has one. Records point into the
 * mapped file; the mapping goes away once load() returns.
 */
static int jnl_load(void *store, carmy_store_each_fn each, void *arg)
{
	struct jnl *j = store;
	int rc = 0;

	for (uint32_t i = 0; i < j->nex && rc == 0; i++) {
		struct carmy_store_record r;

		if (j->ex[i].gone)
			continue;
		standing_record(j, &j->ex[i], &r);
		rc = each(arg, &r);
	}
	forget(j);
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
	if (!j->flushing && j->alone) {
		struct carmy_store_req *batch;
		size_t len;

		j->flushing = true;
		batch = take_batch(j, &len);
		pthread_mutex_unlock(&j->lock);
		commit(j, batch, len);
		pthread_mutex_lock(&j->lock);
		j->flushing = false;
	}
	/* The writer: for this request, for what queued up meanwhile, or
	 * to stop (glibc makes this free when nobody waits). */
	pthread_cond_signal(&j->wake);
	pthread_mutex_unlock(&j->lock);
}

/* Every submitted request is done before close is called (carmyd waits),
 * but a queue left over is still answered, never dropped. */
static void jnl_close(void *store)
{
	struct jnl *j = store;

	if (j == NULL)
		return;
	pthread_mutex_lock(&j->lock);
	j->stopping = true;
	pthread_cond_signal(&j->wake);
	pthread_mutex_unlock(&j->lock);
	if (j->started)
		pthread_join(j->writer, NULL);
	if (j->flushes > 0)
		log_info("journal %s: %llu records in %llu flushes this run "
			 "(%.1f per flush)", j->path,
			 (unsigned long long)j->records,
			 (unsigned long long)j->flushes,
			 (double)j->records / (double)j->flushes);
	forget(j);
	free(j->buf);
	if (j->fd >= 0)
		close(j->fd);
	if (j->dir_fd >= 0)
		close(j->dir_fd);
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
	j->fd = j->dir_fd = -1;
	j->readonly = true;
	j->tail = &j->head;
	pthread_mutex_init(&j->lock, NULL);
	pthread_cond_init(&j->wake, NULL);
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
	for (uint32_t i = 0; i < j->nex; i++) {
		if (j->ex[i].gone)
			continue;
		if (j->ex[i].complete_off != 0)
			rep->completed++;
		else
			rep->unfinished++;
	}
out:
	jnl_close(j);
	return rc;
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

		while ((j->head == NULL || j->flushing) && !j->stopping)
			pthread_cond_wait(&j->wake, &j->lock);
		if (j->head == NULL || j->flushing) {
			if (!j->flushing)
				break;	/* stopping, nothing left */
			pthread_cond_wait(&j->wake, &j->lock);
			continue;
		}
		j->flushing = true;
		batch = take_batch(j, &len);
		pthread_mutex_unlock(&j->lock);
		commit(j, batch, len);
		pthread_mutex_lock(&j->lock);
		j->flushing = false;
		pthread_cond_broadcast(&j->wake);
	}
	pthread_mutex_unlock(&j->lock);
	return NULL;
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

	if (rc == 0 && len > j->cap) {
		uint8_t *nb = realloc(j->buf, len);

		if (nb == NULL) {
			rc = -ENOMEM;	/* this batch only */
		} else {
			j->buf = nb;
			j->cap = len;
		}
	}
	if (rc == 0 && j->end + len > j->size)
		rc = grow(j, len);
	if (rc == 0) {
		uint64_t first = j->seq + 1;
		size_t at = 0;

		for (struct carmy_store_req *r = batch; r != NULL; r = r->next) {
			size_t n = rec_size(r);

			rec_put(j, r, first, j->buf + at, n);
			at += n;
		}
		rc = write_all(j->fd, j->buf, len, j->end);
		if (rc == 0 && fdatasync(j->fd) != 0)
			rc = -errno;
		if (rc == 0) {
			j->end += len;
			j->alone = j->seq + 1 - first == 1;
			j->flushes++;
			j->records += (uint64_t)(j->seq + 1 - first);
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

/* Make room for need more bytes: write zeros ahead of the end, flushed
 * once, so that commits never change the file's size. */
static int grow(struct jnl *j, uint64_t need)
{
	static const uint8_t zeros[65536];
	uint64_t target = j->end + need + JOURNAL_GROW;

	target = (target + sizeof(zeros) - 1) / sizeof(zeros) * sizeof(zeros);
	while (j->size < target) {
		uint64_t n = target - j->size;
		int rc;

		if (n > sizeof(zeros))
			n = sizeof(zeros);
		rc = write_all(j->fd, zeros, n, j->size);
		if (rc != 0)
			return rc;
		j->size += n;
	}
	if (fsync(j->fd) != 0)
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

/* Write req's record, len bytes (rec_size), at p; it takes the next
 * sequence number. batch: the sequence number of the batch's first. */
static void rec_put(struct jnl *j, const struct carmy_store_req *req,
		    uint64_t batch, uint8_t *p, size_t len)
{
	const struct carmy_store_record *r = req->rec;
	struct jrec_head h = { .jr_len = (uint32_t)len, .jr_op = (uint8_t)req->op,
			       .jr_seq = ++j->seq, .jr_batch = batch };
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
	sum = XXH3_64bits_withSeed(p, len - 8, j->salt);
	memcpy(p + len - 8, &sum, 8);
}

/* ---------------------------------------------------------------- recovery */

static int create_file(struct jnl *j, char *err, size_t errlen)
{
	char tmp[4096 + 8];
	struct jfile_head h = { .jf_version = JOURNAL_VERSION };
	int fd, rc;

	memcpy(h.jf_magic, JOURNAL_MAGIC, 8);
	if (getrandom(&h.jf_salt, sizeof(h.jf_salt), 0) != sizeof(h.jf_salt))
		h.jf_salt = now_ns() ^ (uint64_t)getpid() << 32;
	h.jf_created_ns = now_ns();
	h.jf_check = XXH3_64bits(&h, offsetof(struct jfile_head, jf_check));
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

	for (;;) {
		size_t n = rec_valid(j, j->map + off, j->size - off, j->seq + 1);

		if (n == 0)
			break;
		j->by_op[j->map[off + offsetof(struct jrec_head, jr_op)]]++;
		rc = index_record(j, j->map + off, off);
		if (rc != 0) {
			snprintf(err, errlen, "out of memory reading %s",
				 j->path);
			return rc;
		}
		j->seq++;
		records++;
		off += n;
	}
	j->end = off;

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
			if (rec_valid(j, j->map + p, j->size - p,
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
			 j->path, (unsigned long long)records, j->live);
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
static size_t rec_valid(const struct jnl *j, const uint8_t *p, size_t avail,
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
	if (sum != XXH3_64bits_withSeed(p, h.jr_len - 8, j->salt))
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

static uint64_t exec_hash(const uint8_t exec[16])
{
	uint64_t h;

	memcpy(&h, exec, 8);	/* random already */
	return h;
}

/* An execution by exec id; NULL if unknown. */
static struct jexec *find_exec(struct jnl *j, const uint8_t exec[16])
{
	const struct jindex *ix = &j->by_exec;

	if (ix->slot == NULL)
		return NULL;
	for (uint32_t b = (uint32_t)exec_hash(exec) & ix->mask;;
	     b = (b + 1) & ix->mask) {
		uint32_t s = ix->slot[b];

		if (s == 0)
			return NULL;
		if (memcmp(j->ex[s - 1].exec, exec, 16) == 0)
			return &j->ex[s - 1];
	}
}

/* The slot of identity (ident, len): naming its latest execution, or
 * empty (0) where it would go. Released executions keep their slot (an
 * empty one would cut other identities' probes); a later reservation of
 * the same identity takes it over. */
static uint32_t *find_ident(struct jnl *j, uint64_t hash, const uint8_t *ident,
			    const uint16_t len[3])
{
	const struct jindex *ix = &j->by_ident;
	size_t total = (size_t)len[0] + len[1] + len[2];

	for (uint32_t b = (uint32_t)hash & ix->mask;;
	     b = (b + 1) & ix->mask) {
		uint32_t s = ix->slot[b];
		struct jrec_reserve rv;
		const struct jexec *x;

		if (s == 0)
			return &ix->slot[b];
		x = &j->ex[s - 1];
		if (x->ident_hash != hash)
			continue;
		memcpy(&rv, j->map + x->reserve_off + sizeof(struct jrec_head),
		       sizeof(rv));
		if (memcmp(rv.rv_len, len, sizeof(rv.rv_len)) == 0 &&
		    memcmp(j->map + x->reserve_off + sizeof(struct jrec_head) +
				   sizeof(rv), ident, total) == 0)
			return &ix->slot[b];
	}
}

static int index_record(struct jnl *j, const uint8_t *p, uint64_t off)
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

		memcpy(&rv, p, sizeof(rv));
		if (find_exec(j, rv.rv_exec) != NULL)
			return 0;	/* an exec id never comes twice */
		if ((uint64_t)(j->nex + 1) * 2 > j->by_exec.mask &&
		    index_grow(j) != 0)
			return -ENOMEM;
		x = &j->ex[j->nex];
		memset(x, 0, sizeof(*x));
		memcpy(x->exec, rv.rv_exec, 16);
		x->reserve_off = off;
		x->ident_hash = ih = ident_hash(ident, rv.rv_len);
		/* A later reservation of the same identity stands: the
		 * earlier one was released (its RELEASE may be lost). */
		slot = find_ident(j, ih, ident, rv.rv_len);
		if (*slot != 0 && !j->ex[*slot - 1].gone) {
			j->ex[*slot - 1].gone = true;
			j->live--;
		}
		*slot = j->nex + 1;
		for (uint32_t b = (uint32_t)exec_hash(x->exec) &
				  j->by_exec.mask;;
		     b = (b + 1) & j->by_exec.mask) {
			if (j->by_exec.slot[b] == 0) {
				j->by_exec.slot[b] = j->nex + 1;
				break;
			}
		}
		j->nex++;
		j->live++;
		return 0;
	}
	case CARMY_STORE_COMPLETE: {
		struct jrec_complete cp;

		memcpy(&cp, p, sizeof(cp));
		x = find_exec(j, cp.cp_exec);
		/* The first result stands; one for an execution we never
		 * saw reserved (or one released) is ignored. */
		if (x != NULL && !x->gone && x->complete_off == 0)
			x->complete_off = off;
		return 0;
	}
	case CARMY_STORE_RESOLVE: {
		struct jrec_resolve rs;

		memcpy(&rs, p, sizeof(rs));
		x = find_exec(j, rs.rs_exec);
		/* Only an execution without a result can be resolved. */
		if (x == NULL || x->gone || x->complete_off != 0)
			return 0;
		if (rs.rs_committed) {
			x->complete_off = off;
		} else {
			x->gone = true;
			j->live--;
		}
		return 0;
	}
	default: {
		struct jrec_release rl;

		memcpy(&rl, p, sizeof(rl));
		x = find_exec(j, rl.rl_exec);
		/* RELEASE retires a running execution, PURGE one with a
		 * result. */
		if (x != NULL && !x->gone &&
		    (x->complete_off != 0) == (h.jr_op == CARMY_STORE_PURGE)) {
			x->gone = true;
			j->live--;
		}
		return 0;
	}
	}
}

static int index_grow(struct jnl *j)
{
	uint32_t n = j->by_exec.mask ? (j->by_exec.mask + 1) * 2 : 1024;
	struct jexec *ex = realloc(j->ex, (size_t)n / 2 * sizeof(*ex));
	uint32_t *se = calloc(n, sizeof(uint32_t));
	uint32_t *si = calloc(n, sizeof(uint32_t));

	if (ex == NULL || se == NULL || si == NULL) {
		if (ex != NULL)
			j->ex = ex;
		free(se);
		free(si);
		return -ENOMEM;
	}
	j->ex = ex;
	free(j->by_exec.slot);
	free(j->by_ident.slot);
	j->by_exec.slot = se;
	j->by_ident.slot = si;
	j->by_exec.mask = j->by_ident.mask = n - 1;
	/* Every execution keeps its exec slot; only those that stand get an
	 * identity slot (a released one's identity has none to take over). */
	for (uint32_t i = 0; i < j->nex; i++) {
		const struct jexec *x = &j->ex[i];
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

/* Execution x as a record: identity, fingerprints, exec id and, if it has
 * one, its result (from a COMPLETE or a committed RESOLVE), pointing into
 * the mapped journal. */
static void standing_record(const struct jnl *j, const struct jexec *x,
			    struct carmy_store_record *r)
{
	const uint8_t *p = j->map + x->reserve_off + sizeof(struct jrec_head);
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
	p = j->map + x->complete_off + sizeof(struct jrec_head);
	r->state = CARMY_STORE_COMPLETED;
	if (j->map[x->complete_off + offsetof(struct jrec_head, jr_op)] ==
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

/*
 * At start, when the journal holds much more history than executions
 * standing (released, superseded, purged, or simply old records of what
 * stands), write the standing ones into a new journal and put it in the
 * old one's place: so restart time follows what stands, not everything
 * that ever happened. The new file is written whole under another name,
 * flushed, renamed over the old and the directory flushed: a crash leaves
 * one journal or the other, both complete. Then it is read like any other.
 * Returns 0, or -errno with the old journal left as it was (and in use).
 */
static int compact(struct jnl *j, char *err, size_t errlen, bool *renamed)
{
	char tmp[sizeof(j->path) + 8];
	struct jfile_head h = { .jf_version = JOURNAL_VERSION };
	uint8_t *buf = NULL;
	size_t cap = 0, len = 0;
	uint64_t before = j->end, records = 0;
	uint64_t old_salt = j->salt, old_seq = j->seq;
	int fd, rc = 0;

	memcpy(h.jf_magic, JOURNAL_MAGIC, 8);
	if (getrandom(&h.jf_salt, sizeof(h.jf_salt), 0) != sizeof(h.jf_salt))
		h.jf_salt = now_ns() ^ (uint64_t)getpid() << 32;
	h.jf_created_ns = now_ns();
	h.jf_check = XXH3_64bits(&h, offsetof(struct jfile_head, jf_check));
	snprintf(tmp, sizeof(tmp), "%s.new", j->path);
	fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	/* Locked before it takes the journal's name, like the old one. */
	if (flock(fd, LOCK_EX | LOCK_NB) != 0)
		rc = -errno;
	if (rc == 0)
		rc = write_all(fd, &h, sizeof(h), 0);
	/* Records are written with the new file's salt and numbering, each
	 * as a batch of its own: the file is flushed whole before it becomes
	 * the journal, so any good record after a damaged one proves the
	 * damage is not a torn write, and it is refused, never cut. */
	j->salt = h.jf_salt;
	j->seq = 0;
	for (uint32_t i = 0; i < j->nex && rc == 0; i++) {
		struct carmy_store_req req = { 0 };
		struct carmy_store_record r;
		size_t n[2] = { 0, 0 };
		int ops = 1;

		if (j->ex[i].gone)
			continue;
		standing_record(j, &j->ex[i], &r);
		req.rec = &r;
		req.op = CARMY_STORE_RESERVE;
		n[0] = rec_size(&req);
		req.op = r.resolved_ns != 0 ? CARMY_STORE_RESOLVE :
						CARMY_STORE_COMPLETE;
		if (r.state == CARMY_STORE_COMPLETED) {
			n[1] = rec_size(&req);
			ops = 2;
		}
		if (len + n[0] + (ops == 2 ? n[1] : 0) > cap) {
			size_t ncap = cap ? cap * 2 : (1u << 20);

			while (ncap < len + n[0] + n[1])
				ncap *= 2;
			uint8_t *nb = realloc(buf, ncap);

			if (nb == NULL) {
				rc = -ENOMEM;
				break;
			}
			buf = nb;
			cap = ncap;
		}
		req.op = CARMY_STORE_RESERVE;
		rec_put(j, &req, j->seq + 1, buf + len, n[0]);
		len += n[0];
		if (ops == 2) {
			req.op = r.resolved_ns != 0 ? CARMY_STORE_RESOLVE :
							CARMY_STORE_COMPLETE;
			rec_put(j, &req, j->seq + 1, buf + len, n[1]);
			len += n[1];
		}
		records += (uint64_t)ops;
		if (len >= JOURNAL_BATCH_MAX) {
			rc = write_all(fd, buf, len, HEAD_SIZE + j->end2);
			j->end2 += len;
			len = 0;
		}
	}
	if (rc == 0 && len > 0) {
		rc = write_all(fd, buf, len, HEAD_SIZE + j->end2);
		j->end2 += len;
	}
	free(buf);
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, j->path) != 0)
		rc = -errno;
	if (rc != 0) {
		/* The old journal stands, untouched: go on with it. */
		close(fd);
		unlink(tmp);
		j->salt = old_salt;
		j->seq = old_seq;
		j->end2 = 0;
		snprintf(err, errlen, "cannot compact journal %s: %s", j->path,
			 strerror(-rc));
		return rc;
	}
	/* Renamed: the new file is the journal now, whatever follows. */
	*renamed = true;
	if (fsync(j->dir_fd) != 0)
		log_warn("journal %s: cannot flush its directory after "
			 "compaction: %s", j->path, strerror(errno));
	log_info("journal %s: compacted %llu bytes of history into %llu "
		 "records (%llu bytes) for %u standing executions", j->path,
		 (unsigned long long)before, (unsigned long long)records,
		 (unsigned long long)(HEAD_SIZE + j->end2), j->live);
	/* Read the new journal afresh, as a start would. */
	forget(j);
	close(j->fd);
	j->fd = fd;
	j->size = HEAD_SIZE + j->end2;
	j->seq = 0;
	j->end = 0;
	j->live = 0;
	memset(j->by_op, 0, sizeof(j->by_op));
	return recover(j, err, errlen);
}

/* More than twice the records the standing executions need, and enough of
 * them to be worth a rewrite. */
static bool needs_compaction(const struct jnl *j)
{
	uint64_t records = 0, needed = 0;

	for (int op = 0; op <= CARMY_STORE_PURGE; op++)
		records += j->by_op[op];
	for (uint32_t i = 0; i < j->nex; i++)
		if (!j->ex[i].gone)
			needed += j->ex[i].complete_off != 0 ? 2 : 1;
	return records > JOURNAL_COMPACT_MIN && records > 2 * needed;
}

/* What recovery built is needed only until load() has handed it over. */
static void forget(struct jnl *j)
{
	if (j->map != NULL)
		munmap(j->map, j->map_len);
	j->map = NULL;
	free(j->ex);
	free(j->by_exec.slot);
	free(j->by_ident.slot);
	j->ex = NULL;
	j->by_exec = j->by_ident = (struct jindex){ NULL, 0 };
	j->nex = 0;
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
