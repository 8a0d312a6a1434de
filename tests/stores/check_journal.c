/*
 * check_journal.c - the journal store on its own (stores/journal/journal.c through
 * its ops table): what is submitted and acknowledged comes back from load()
 * after a reopen, a journal cut at any byte comes back as a clean prefix,
 * and damage that acknowledged records follow is refused, not cut.
 *
 * The on-disk layout (docs/journal.md) is read here only to find record
 * boundaries and batches, and to make the records of earlier carmyds
 * (format 1, a RESERVE without its call): every other record is written
 * by the store itself.
 *
 * Online compaction is driven through its two test handles (journal.h):
 * CARMY_JOURNAL_COMPACT_MIN lowers the threshold at open, and the
 * compactor's hook, called between its phases on its own thread, lets a
 * test submit records at exactly that point and wait for a compaction to
 * end (condition variables with deadlines, never a sleep).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <xxhash.h>
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif

#include "carmy.h"
#include "carmy_store.h"
#include "stores/journal/internal.h"
#include "stores/journal/journal.h"

#define HEAD 40			/* struct jfile_head */
#define REC_HEAD 32		/* struct jrec_head */
#define SECTOR 512		/* JREC_SECTOR */
#define SEEN_MAX 1024		/* executions a test's load() may hand over */
#define WAIT_S 60		/* deadline for a compaction to end */
/* JOURNAL_CATCHUP_MIN in stores/journal/compact.c */
#define CATCHUP_MIN (64u << 10)

/* ------------------------------------------------------------ helpers */

/* One execution the test made, and what load() must say about it. */
struct ex {
	char id[32];
	uint8_t exec[16];
	uint8_t fp[16];
	int state;		/* 0 released, else enum carmy_store_state */
	int status;
	char result[48];
};

/* A request and its answer, waited on with a condition variable. */
struct waiter {
	struct carmy_store_req req;
	struct carmy_store_record rec;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int rc;
	pthread_t done_on;	/* the thread that answered it */
	unsigned order;		/* answers before it, this process, plus 1 */
};

static unsigned answers;

static void on_done(struct carmy_store_req *req, int rc)
{
	struct waiter *w = req->cookie;

	pthread_mutex_lock(&w->lock);
	w->rc = rc;
	w->done = true;
	w->done_on = pthread_self();
	w->order = __atomic_add_fetch(&answers, 1, __ATOMIC_SEQ_CST);
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static void record_of(const struct ex *x, struct carmy_store_record *r)
{
	memset(r, 0, sizeof(*r));
	r->part[0] = (const uint8_t *)"principal";
	r->len[0] = 9;
	r->part[1] = (const uint8_t *)"session";
	r->len[1] = 7;
	r->part[2] = (const uint8_t *)x->id;
	r->len[2] = (uint16_t)strlen(x->id);
	memcpy(r->fingerprint, x->fp, 16);
	memcpy(r->rawprint, x->fp, 16);
	memcpy(r->exec, x->exec, 16);
	r->pid = 4242;
	r->started_ns = 1;
	r->finished_ns = 2;
	r->status = x->status;
	r->result = x->result;
	r->result_len = (uint32_t)strlen(x->result);
}

/* Submit one request for rec with flags and wait until the store has
 * answered it; *here: whether it was answered on this thread. */
static int submit_flags(void *st, enum carmy_store_op op,
			const struct carmy_store_record *rec, uint32_t flags,
			bool *here)
{
	struct waiter w = { .done = false };
	int rc;

	pthread_mutex_init(&w.lock, NULL);
	pthread_cond_init(&w.cond, NULL);
	w.rec = *rec;
	w.req.op = op;
	w.req.rec = &w.rec;
	w.req.done = on_done;
	w.req.cookie = &w;
	w.req.flags = flags;
	journal_store_ops.submit(st, &w.req);
	pthread_mutex_lock(&w.lock);
	while (!w.done)
		pthread_cond_wait(&w.cond, &w.lock);
	rc = w.rc;
	*here = pthread_equal(w.done_on, pthread_self());
	pthread_mutex_unlock(&w.lock);
	pthread_cond_destroy(&w.cond);
	pthread_mutex_destroy(&w.lock);
	return rc;
}

/* Submit x's op with flags into w, and return at once. */
static void submit_async(void *st, struct waiter *w, enum carmy_store_op op,
			 const struct ex *x, uint32_t flags)
{
	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	record_of(x, &w->rec);
	w->req.op = op;
	w->req.rec = &w->rec;
	w->req.done = on_done;
	w->req.cookie = w;
	w->req.flags = flags;
	journal_store_ops.submit(st, &w->req);
}

static bool waiter_done(struct waiter *w)
{
	bool done;

	pthread_mutex_lock(&w->lock);
	done = w->done;
	pthread_mutex_unlock(&w->lock);
	return done;
}

/* Its answer, waited for WAIT_S at most (-ETIMEDOUT if none came). */
static int waiter_wait(struct waiter *w)
{
	struct timespec dl;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += WAIT_S;
	pthread_mutex_lock(&w->lock);
	while (!w->done && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&w->cond, &w->lock, &dl);
	rc = w->done ? w->rc : -ETIMEDOUT;
	pthread_mutex_unlock(&w->lock);
	return rc;
}

static int submit_rec(void *st, enum carmy_store_op op,
		      const struct carmy_store_record *rec)
{
	bool here;

	return submit_flags(st, op, rec, 0, &here);
}

static int submit_wait(void *st, enum carmy_store_op op, const struct ex *x)
{
	struct carmy_store_record rec;

	record_of(x, &rec);
	return submit_rec(st, op, &rec);
}

/* A RESOLVE of x's execution: committed (x's result) or not, by pid 777. */
static int submit_resolve(void *st, const struct ex *x, bool committed)
{
	struct carmy_store_record rec;

	record_of(x, &rec);
	rec.state = committed ? CARMY_STORE_COMPLETED : 0;
	rec.resolved_ns = 3;
	rec.resolved_pid = 777;
	return submit_rec(st, CARMY_STORE_RESOLVE, &rec);
}

/* Fault injection: the program is linked with --wrap=fsync
 * (tests/stores/local.mk), so the journal's fsync() comes here first. */
static int fsync_fails;		/* errno for the next fsync(), or 0 */
static uint64_t enospc_from = UINT64_MAX;	/* see __wrap_pwrite() */
static uint64_t fsynced_size;	/* of the last regular file fsync()ed */
static const char *crash_into;	/* see __wrap_fdatasync() */
static int fdatasync_fails;	/* errno for the next fdatasync(), or 0 */

int __real_fsync(int fd);
int __wrap_fsync(int fd);

int __wrap_fsync(int fd)
{
	int e = __atomic_exchange_n(&fsync_fails, 0, __ATOMIC_SEQ_CST);

	struct stat st;
	int rc;

	if (e != 0) {
		errno = e;
		return -1;
	}
	rc = __real_fsync(fd);
	if (rc == 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
		__atomic_store_n(&fsynced_size, (uint64_t)st.st_size,
				 __ATOMIC_SEQ_CST);
	return rc;
}

/* pwrite() and fdatasync() likewise (-Wl,--wrap=pwrite,--wrap=fdatasync):
 * a write that reaches past enospc_from fails with ENOSPC, as on a full
 * disk (what lies before it is written); and an fdatasync() with
 * crash_into set first copies the file there as a crash before that
 * flush could leave it: cut to the size of its last fsync() (a size the
 * file grew to after that is not on the disk yet). */

ssize_t __real_pwrite(int fd, const void *buf, size_t len, off_t off);
ssize_t __wrap_pwrite(int fd, const void *buf, size_t len, off_t off);
int __real_fdatasync(int fd);
int __wrap_fdatasync(int fd);

ssize_t __wrap_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	uint64_t lim = __atomic_load_n(&enospc_from, __ATOMIC_SEQ_CST);

	if ((uint64_t)off + len > lim) {
		if ((uint64_t)off >= lim) {
			errno = ENOSPC;
			return -1;
		}
		len = (size_t)(lim - (uint64_t)off);
	}
	return __real_pwrite(fd, buf, len, off);
}

/* And a gate (gate_arm()): the next fdatasync() waits at it until the
 * test lets it go (gate_release()), then fails with gate_errno if that is
 * set; every other one that returns meanwhile is counted (gate_passed),
 * so a test can see a later batch flushed while an earlier one is held. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_armed, gate_open;
static int gate_held, gate_passed, gate_errno;

static bool gate_enter(void)
{
	bool held = false;

	pthread_mutex_lock(&gate_lock);
	if (gate_armed) {
		gate_armed = false;
		held = true;
		gate_held++;
		pthread_cond_broadcast(&gate_cond);
		while (!gate_open)
			pthread_cond_wait(&gate_cond, &gate_lock);
	}
	pthread_mutex_unlock(&gate_lock);
	return held;
}

/* After the real fdatasync() returned rc: what the caller gets. */
static int gate_leave(bool held, int rc)
{
	int e = errno, fail = 0;

	pthread_mutex_lock(&gate_lock);
	if (held)
		fail = gate_errno;
	else
		gate_passed++;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
	if (fail != 0) {
		errno = fail;
		return -1;
	}
	errno = e;
	return rc;
}

int __wrap_fdatasync(int fd)
{
	int e = __atomic_exchange_n(&fdatasync_fails, 0, __ATOMIC_SEQ_CST);
	bool held;
	const char *to;

	if (e != 0) {
		errno = e;
		return -1;
	}
	held = gate_enter();
	to = __atomic_exchange_n(&crash_into, NULL, __ATOMIC_SEQ_CST);

	if (to != NULL) {
		uint64_t n = __atomic_load_n(&fsynced_size, __ATOMIC_SEQ_CST);
		char path[256], buf[65536];
		int out;

		snprintf(path, sizeof(path), "%s/journal", to);
		out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		for (uint64_t at = 0; out >= 0 && at < n;) {
			ssize_t k = pread(fd, buf, n - at < sizeof(buf) ?
					  (size_t)(n - at) : sizeof(buf),
					  (off_t)at);

			if (k <= 0 || write(out, buf, (size_t)k) != k)
				break;
			at += (uint64_t)k;
		}
		if (out >= 0)
			close(out);
	}
	return gate_leave(held, __real_fdatasync(fd));
}

static void gate_arm(void)
{
	pthread_mutex_lock(&gate_lock);
	gate_armed = true;
	gate_open = false;
	gate_held = gate_passed = gate_errno = 0;
	pthread_mutex_unlock(&gate_lock);
}

static void gate_release(int fail)
{
	pthread_mutex_lock(&gate_lock);
	gate_errno = fail;
	gate_open = true;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
}

/* Wait until *counter (gate_held or gate_passed) reaches n, for WAIT_S at
 * most: whether it did. */
static bool gate_until(const int *counter, int n)
{
	struct timespec dl;
	bool ok;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += WAIT_S;
	pthread_mutex_lock(&gate_lock);
	while (*counter < n && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&gate_cond, &gate_lock, &dl);
	ok = *counter >= n;
	pthread_mutex_unlock(&gate_lock);
	return ok;
}

static void *open_journal(const char *dir)
{
	char err[512] = "";
	void *st = NULL;
	int rc = journal_store_ops.open(dir, &st, err, sizeof(err));

	ck_assert_msg(rc == 0, "open %s: %d %s", dir, rc, err);
	return st;
}

/* Open with the compaction threshold at min records (read at open only;
 * unset again, since CK_FORK=no runs every test in one process). */
static void *open_journal_min(const char *dir, unsigned long min)
{
	char v[32];
	void *st;

	snprintf(v, sizeof(v), "%lu", min);
	ck_assert_int_eq(setenv("CARMY_JOURNAL_COMPACT_MIN", v, 1), 0);
	st = open_journal(dir);
	ck_assert_int_eq(unsetenv("CARMY_JOURNAL_COMPACT_MIN"), 0);
	return st;
}

/* Opened so that it never compacts, at start or online. */
static void *open_journal_as_is(const char *dir)
{
	return open_journal_min(dir, 100000000ul);
}

/* What load() handed over, by request id. */
struct seen {
	int n;
	struct {
		char id[32];
		uint8_t exec[16];
		int state;
		int status;
		uint32_t resolved_pid;
		char result[48];
		uint32_t result_len;	/* collect_long() only */
		uint64_t result_sum;	/* ... and its result's XXH3 */
	} e[SEEN_MAX];
};

static int collect(void *arg, const struct carmy_store_record *r)
{
	struct seen *s = arg;

	ck_assert_int_lt(s->n, SEEN_MAX);
	ck_assert_uint_eq(r->len[0], 9);
	ck_assert_mem_eq(r->part[0], "principal", 9);
	ck_assert_uint_lt(r->len[2], sizeof(s->e[0].id));
	memcpy(s->e[s->n].id, r->part[2], r->len[2]);
	s->e[s->n].id[r->len[2]] = '\0';
	memcpy(s->e[s->n].exec, r->exec, 16);
	s->e[s->n].state = r->state;
	s->e[s->n].status = r->status;
	s->e[s->n].resolved_pid = r->resolved_pid;
	s->e[s->n].result[0] = '\0';
	if (r->state == CARMY_STORE_COMPLETED) {
		ck_assert_uint_lt(r->result_len, sizeof(s->e[0].result));
		memcpy(s->e[s->n].result, r->result, r->result_len);
		s->e[s->n].result[r->result_len] = '\0';
	}
	s->n++;
	return 0;
}

/* collect() for results of any length: their length and XXH3 (the result
 * itself, as a string, only when it is short). */
static int collect_long(void *arg, const struct carmy_store_record *r)
{
	struct seen *s = arg;

	ck_assert_int_lt(s->n, SEEN_MAX);
	ck_assert_uint_lt(r->len[2], sizeof(s->e[0].id));
	memcpy(s->e[s->n].id, r->part[2], r->len[2]);
	s->e[s->n].id[r->len[2]] = '\0';
	memcpy(s->e[s->n].exec, r->exec, 16);
	s->e[s->n].state = r->state;
	s->e[s->n].status = r->status;
	s->e[s->n].result[0] = '\0';
	s->e[s->n].result_len = 0;
	s->e[s->n].result_sum = 0;
	if (r->state == CARMY_STORE_COMPLETED) {
		if (r->result_len < sizeof(s->e[0].result)) {
			memcpy(s->e[s->n].result, r->result, r->result_len);
			s->e[s->n].result[r->result_len] = '\0';
		}
		s->e[s->n].result_len = r->result_len;
		s->e[s->n].result_sum = XXH3_64bits(r->result, r->result_len);
	}
	s->n++;
	return 0;
}

/* collect() for huge results: the state only. */
static int count_only(void *arg, const struct carmy_store_record *r)
{
	struct seen *s = arg;

	ck_assert_int_lt(s->n, SEEN_MAX);
	s->e[s->n].state = r->state;
	ck_assert_uint_eq(r->result_len, 64u << 20);
	s->n++;
	return 0;
}

static int find(const struct seen *s, const char *id)
{
	for (int i = 0; i < s->n; i++)
		if (strcmp(s->e[i].id, id) == 0)
			return i;
	return -1;
}

static void make_ex(struct ex *x, int i, int status)
{
	memset(x, 0, sizeof(*x));
	snprintf(x->id, sizeof(x->id), "req-%03d", i);
	for (int k = 0; k < 16; k++) {
		x->exec[k] = (uint8_t)(i * 31 + k + 1);
		x->fp[k] = (uint8_t)(i * 7 + k);
	}
	/* Unique per i (exec ids never repeat), and never zero. */
	x->exec[0] = (uint8_t)i;
	x->exec[1] = (uint8_t)(i >> 8);
	x->exec[15] = 0xee;
	x->status = status;
	snprintf(x->result, sizeof(x->result), "result of %d", i);
}

static char *temp_dir(void)
{
	char tmpl[] = "/tmp/check_journal.XXXXXX";
	char *d = mkdtemp(tmpl);

	ck_assert_ptr_nonnull(d);
	return strdup(d);
}

static void rm_rf(const char *dir)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* The journal's bytes, and where its records end (the zeros after). */
static uint8_t *read_file(const char *path, size_t *len)
{
	struct stat st;
	uint8_t *buf;
	int fd = open(path, O_RDONLY);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	buf = malloc((size_t)st.st_size + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

static void write_file(const char *dir, const uint8_t *buf, size_t len)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/journal", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

/* Offsets of every record's start, and of the end of the last. */
static int record_starts(const uint8_t *buf, size_t len, size_t *off, int max)
{
	size_t at = HEAD;
	int n = 0;

	while (at + REC_HEAD <= len && n < max) {
		uint32_t rl;

		memcpy(&rl, buf + at, 4);
		if (rl == 0)
			break;
		off[n++] = at;
		at += rl;
	}
	off[n] = at;
	return n;
}

/* A journal of n executions: every third released, every other completed
 * with statuses cycling through all four, the rest left running. Each
 * request waits for the one before, so each record is its own batch. */
static void build(const char *dir, struct ex *xs, int n)
{
	void *st = open_journal(dir);

	for (int i = 0; i < n; i++) {
		struct ex *x = &xs[i];

		make_ex(x, i, CARMY_STATUS_COMPLETED + i % 4);
		ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, x), 0);
		x->state = CARMY_STORE_RUNNING;
		if (i % 3 == 0) {
			ck_assert_int_eq(submit_wait(st, CARMY_STORE_RELEASE,
						     x), 0);
			x->state = 0;
		} else if (i % 2 == 0) {
			ck_assert_int_eq(submit_wait(st, CARMY_STORE_COMPLETE,
						     x), 0);
			x->state = CARMY_STORE_COMPLETED;
		}
	}
	journal_store_ops.close(st);
}

/* ------------------------------------------------------------ tests */

START_TEST(test_acknowledged_records_come_back_after_reopen)
{
	char *dir = temp_dir();
	struct ex xs[24];
	struct seen s = { 0 };
	void *st;

	build(dir, xs, 24);
	st = open_journal(dir);
	ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
	journal_store_ops.close(st);
	for (int i = 0; i < 24; i++) {
		int k = find(&s, xs[i].id);

		if (xs[i].state == 0) {
			ck_assert_msg(k < 0, "%s was released", xs[i].id);
			continue;
		}
		ck_assert_msg(k >= 0, "%s is missing", xs[i].id);
		ck_assert_mem_eq(s.e[k].exec, xs[i].exec, 16);
		ck_assert_int_eq(s.e[k].state, xs[i].state);
		if (xs[i].state == CARMY_STORE_COMPLETED) {
			ck_assert_int_eq(s.e[k].status, xs[i].status);
			ck_assert_str_eq(s.e[k].result, xs[i].result);
		}
	}
	ck_assert_int_eq(s.n, 24 - 8);	/* 8 released: 0, 3, ..., 21 */
	rm_rf(dir);
	free(dir);
}
END_TEST

/* What recovery read may be a killed carmyd's last batch, written and
 * never flushed (in the page cache, not on the disk): the journal is
 * flushed before anything is loaded from it, and one that cannot be is
 * refused, not served. */
START_TEST(test_what_recovery_read_is_flushed_before_it_is_loaded)
{
	char *dir = temp_dir();
	char err[512] = "";
	struct ex xs[4];
	struct seen s = { 0 };
	void *st = NULL;

	build(dir, xs, 4);
	__atomic_store_n(&fdatasync_fails, EIO, __ATOMIC_SEQ_CST);
	ck_assert_int_eq(journal_store_ops.open(dir, &st, err, sizeof(err)),
			 -EIO);
	ck_assert_ptr_null(st);
	ck_assert_int_eq(__atomic_load_n(&fdatasync_fails, __ATOMIC_SEQ_CST),
			 0);
	ck_assert_msg(strstr(err, "cannot flush journal") != NULL, "%s", err);
	st = open_journal(dir);
	ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
	journal_store_ops.close(st);
	ck_assert_int_eq(s.n, 4 - 2);	/* 0 and 3 released */
	rm_rf(dir);
	free(dir);
}
END_TEST

/* A write or flush that fails leaves journal.failed: the pages it wrote may
 * be marked clean without being on the disk, so the next open rewrites the
 * journal into a new file before it loads anything, and takes the mark
 * away. The failed batch's reservation, read back, stands (it may have
 * reached the disk). */
START_TEST(test_a_failed_flush_has_the_next_open_rewrite_the_journal)
{
	char *dir = temp_dir();
	char mark[256], path[256];
	struct stat before, after;
	struct seen s = { 0 };
	struct ex xs[4], x;
	void *st;
	int k;

	build(dir, xs, 4);
	snprintf(mark, sizeof(mark), "%s/journal.failed", dir);
	snprintf(path, sizeof(path), "%s/journal", dir);
	st = open_journal_as_is(dir);
	make_ex(&x, 100, CARMY_STATUS_COMPLETED);
	__atomic_store_n(&fdatasync_fails, EIO, __ATOMIC_SEQ_CST);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &x), -EIO);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &xs[0]), -EIO);
	journal_store_ops.close(st);
	ck_assert_int_eq(access(mark, F_OK), 0);
	ck_assert_int_eq(stat(path, &before), 0);

	st = open_journal_as_is(dir);
	ck_assert_int_eq(stat(path, &after), 0);
	ck_assert_uint_ne(after.st_ino, before.st_ino);
	ck_assert_int_ne(access(mark, F_OK), 0);
	ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
	journal_store_ops.close(st);
	ck_assert_int_eq(s.n, 4 - 2 + 1);
	k = find(&s, x.id);
	ck_assert_int_ge(k, 0);
	ck_assert_int_eq(s.e[k].state, CARMY_STORE_RUNNING);
	rm_rf(dir);
	free(dir);
}
END_TEST

/* A journal directory made at open is flushed in the directory above it
 * before anything is written there: one whose name cannot be flushed is
 * refused and removed, since every record in it could vanish with it. */
START_TEST(test_a_new_journal_directory_is_flushed_in_its_parent)
{
	char *dir = temp_dir();
	char sub[256], err[512] = "";
	void *st = NULL;

	snprintf(sub, sizeof(sub), "%s/new", dir);
	__atomic_store_n(&fsync_fails, EIO, __ATOMIC_SEQ_CST);
	ck_assert_int_eq(journal_store_ops.open(sub, &st, err, sizeof(err)),
			 -EIO);
	ck_assert_ptr_null(st);
	ck_assert_int_eq(__atomic_load_n(&fsync_fails, __ATOMIC_SEQ_CST), 0);
	ck_assert_msg(strstr(err, "cannot flush the directory above") != NULL,
		      "%s", err);
	/* Gone, so that the next start makes it and flushes it again. */
	ck_assert_int_ne(access(sub, F_OK), 0);
	st = open_journal(sub);
	journal_store_ops.close(st);
	rm_rf(dir);
	free(dir);
}
END_TEST

/*
 * A lone request may be written on the thread that submits it, sparing a
 * hand-off to the journal's thread; one marked CARMY_STORE_MORE never is.
 * Its caller is carmyd's event loop with other requests in hand: written
 * there, each would wait a whole flush behind it, and with one loop no two
 * requests would ever meet in a batch (64 clients got 4,400 cycles a
 * second instead of 48,500).
 */
static bool submit_where(void *st, const struct ex *x, uint32_t flags)
{
	struct carmy_store_record rec;
	bool here;

	record_of(x, &rec);
	ck_assert_int_eq(submit_flags(st, CARMY_STORE_RESERVE, &rec, flags,
				      &here), 0);
	return here;
}

START_TEST(test_a_request_with_more_behind_it_is_left_to_the_writer)
{
	char *dir = temp_dir();
	struct ex a, b;
	struct seen s = { 0 };
	void *st = open_journal(dir);

	make_ex(&a, 1, 0);
	make_ex(&b, 2, 0);
	/* Nothing in flight, nothing behind it: written right here. */
	ck_assert(submit_where(st, &a, 0));
	/* The same, but the caller has more in hand: the writer's. */
	ck_assert(!submit_where(st, &b, CARMY_STORE_MORE));
	ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
	journal_store_ops.close(st);
	ck_assert_int_ge(find(&s, a.id), 0);
	ck_assert_int_ge(find(&s, b.id), 0);
	rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(test_later_reservation_of_an_identity_stands)
{
	char *dir = temp_dir();
	struct ex a, b;
	struct seen s = { 0 };
	void *st = open_journal(dir);

	make_ex(&a, 1, CARMY_STATUS_COMPLETED);
	make_ex(&b, 2, CARMY_STATUS_FAILED);
	strcpy(b.id, a.id);	/* same identity, another execution */
	/* The release of a was lost: only the later reservation proves it
	 * happened (the segment re-reserves only after a release). */
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &a), 0);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &b), 0);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_COMPLETE, &b), 0);
	/* A second result for the same execution does not replace the
	 * first. */
	strcpy(b.result, "a second result");
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_COMPLETE, &b), 0);
	journal_store_ops.close(st);

	st = open_journal(dir);
	ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
	journal_store_ops.close(st);
	ck_assert_int_eq(s.n, 1);
	ck_assert_mem_eq(s.e[0].exec, b.exec, 16);
	ck_assert_int_eq(s.e[0].state, CARMY_STORE_COMPLETED);
	ck_assert_str_eq(s.e[0].result, "result of 2");
	rm_rf(dir);
	free(dir);
}
END_TEST

/* An operator's records: RESOLVE committed gives a result (with who),
 * RESOLVE not committed and PURGE make an execution forgotten; a PURGE of
 * a running one, or a RESOLVE of a completed one, changes nothing. */
START_TEST(test_resolve_and_purge_records_come_back)
{
	char *dir = temp_dir();
	struct ex a, b, c, d;
	struct seen s = { 0 };
		void *st = open_journal(dir);
	int k;

	make_ex(&a, 1, CARMY_STATUS_COMPLETED);	/* resolved: happened */
	make_ex(&b, 2, CARMY_STATUS_COMPLETED);	/* resolved: did not */
	make_ex(&c, 3, CARMY_STATUS_COMPLETED);	/* completed, purged */
	make_ex(&d, 4, CARMY_STATUS_COMPLETED);	/* running: purge no-op */
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &a), 0);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &b), 0);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &c), 0);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &d), 0);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_COMPLETE, &c), 0);
	strcpy(a.result, "settled by hand");
	ck_assert_int_eq(submit_resolve(st, &a, true), 0);
	ck_assert_int_eq(submit_resolve(st, &b, false), 0);
	ck_assert_int_eq(submit_resolve(st, &c, false), 0);	/* no-op */
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_PURGE, &c), 0);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_PURGE, &d), 0);	/* no-op */
	journal_store_ops.close(st);

	st = open_journal(dir);
	ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
	journal_store_ops.close(st);
	ck_assert_int_eq(s.n, 2);
	k = find(&s, a.id);
	ck_assert_int_ge(k, 0);
	ck_assert_int_eq(s.e[k].state, CARMY_STORE_COMPLETED);
	ck_assert_str_eq(s.e[k].result, "settled by hand");
	ck_assert_uint_eq(s.e[k].resolved_pid, 777);
	ck_assert_int_lt(find(&s, b.id), 0);
	ck_assert_int_lt(find(&s, c.id), 0);
	k = find(&s, d.id);
	ck_assert_int_ge(k, 0);
	ck_assert_int_eq(s.e[k].state, CARMY_STORE_RUNNING);
	rm_rf(dir);
	free(dir);
}
END_TEST

/* A journal mostly made of history is rewritten at start: it shrinks, and
 * every execution standing comes back exactly as before, twice over. */
START_TEST(test_history_is_compacted_at_start)
{
	char *dir = temp_dir();
	char path[256];
	struct seen before = { 0 }, after = { 0 }, again = { 0 };
	struct stat st1, st2;
	size_t len1, len2, *offs = calloc(2001, sizeof(size_t));
	uint8_t *buf;
	/* Built with no compaction while open: this is about the start. */
	void *st = open_journal_as_is(dir);

	/* 600 released executions (history), 20 completed, 5 running and
	 * one resolved by hand. */
	for (int i = 0; i < 626; i++) {
		struct ex x;

		make_ex(&x, i, CARMY_STATUS_COMPLETED + i % 4);
		ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &x), 0);
		if (i < 600)
			ck_assert_int_eq(submit_wait(st, CARMY_STORE_RELEASE,
						     &x), 0);
		else if (i < 620)
			ck_assert_int_eq(submit_wait(st, CARMY_STORE_COMPLETE,
						     &x), 0);
		else if (i == 625)
			ck_assert_int_eq(submit_resolve(st, &x, true), 0);
	}
	journal_store_ops.close(st);
	snprintf(path, sizeof(path), "%s/journal", dir);
	buf = read_file(path, &len1);
	len1 = (size_t)record_starts(buf, len1, offs, 2000);
	len1 = offs[len1];
	free(buf);
	ck_assert_int_eq(stat(path, &st1), 0);

	st = open_journal(dir);	/* compacts */
	ck_assert_int_eq(journal_store_ops.load(st, collect, &after), 0);
	journal_store_ops.close(st);
	buf = read_file(path, &len2);
	len2 = (size_t)record_starts(buf, len2, offs, 2000);	/* records */
	free(buf);
	ck_assert_int_eq(stat(path, &st2), 0);
	ck_assert_uint_ne(st1.st_ino, st2.st_ino);	/* a new file */
	ck_assert_int_eq(after.n, 26);
	for (int i = 600; i < 626; i++) {
		char id[32];
		int k;

		snprintf(id, sizeof(id), "req-%03d", i);
		k = find(&after, id);
		ck_assert_int_ge(k, 0);
		ck_assert_int_eq(after.e[k].state, i < 620 || i == 625 ?
					   CARMY_STORE_COMPLETED :
					   CARMY_STORE_RUNNING);
		if (i < 620)
			ck_assert_int_eq(after.e[k].status,
					 CARMY_STATUS_COMPLETED + i % 4);
		if (i == 625)
			ck_assert_uint_eq(after.e[k].resolved_pid, 777);
	}
	/* Opened again: nothing left to compact, the same executions. */
	st = open_journal(dir);
	ck_assert_int_eq(journal_store_ops.load(st, collect, &again), 0);
	journal_store_ops.close(st);
	ck_assert_int_eq(again.n, after.n);
	free(offs);
	/* History gone: the new journal is about the standing records. */
	ck_assert_uint_lt(len2, 60);
	ck_assert_uint_gt(len1, 10 * 1024);
	(void)before;
	rm_rf(dir);
	free(dir);
}
END_TEST

/* ------------------------------------------------------------ calls */

static ino_t inode_of(const char *dir);

/* What load() handed over of each execution's call, by request id. */
struct calls {
	int n;
	struct {
		char id[32];
		int state;
		uint32_t tool_kept, tool_len, args_kept, args_len;
		uint8_t format;
		uint8_t tool[CARMY_STORE_TOOL_MAX];
		uint8_t args[CARMY_STORE_ARGS_MAX];
	} e[SEEN_MAX];
};

static int collect_calls(void *arg, const struct carmy_store_record *r)
{
	struct calls *s = arg;

	ck_assert_int_lt(s->n, SEEN_MAX);
	ck_assert_uint_lt(r->len[2], sizeof(s->e[0].id));
	memcpy(s->e[s->n].id, r->part[2], r->len[2]);
	s->e[s->n].id[r->len[2]] = '\0';
	s->e[s->n].state = r->state;
	ck_assert_uint_le(r->tool_kept, CARMY_STORE_TOOL_MAX);
	ck_assert_uint_le(r->args_kept, CARMY_STORE_ARGS_MAX);
	s->e[s->n].tool_kept = r->tool_kept;
	s->e[s->n].tool_len = r->tool_len;
	s->e[s->n].args_kept = r->args_kept;
	s->e[s->n].args_len = r->args_len;
	s->e[s->n].format = r->result_format;
	if (r->tool_kept > 0)
		memcpy(s->e[s->n].tool, r->tool, r->tool_kept);
	if (r->args_kept > 0)
		memcpy(s->e[s->n].args, r->args, r->args_kept);
	s->n++;
	return 0;
}

static int find_call(const struct calls *s, const char *id)
{
	for (int i = 0; i < s->n; i++)
		if (strcmp(s->e[i].id, id) == 0)
			return i;
	ck_abort_msg("no execution %s", id);
	return -1;
}

/* x's RESERVE with a call: tool "tool-N" whole, args of 300 bytes of
 * which 256 are kept (as carmyd hands them over), format 1. */
static int submit_call(void *st, const struct ex *x, int i)
{
	struct carmy_store_record rec;
	static uint8_t args[CARMY_STORE_ARGS_MAX];
	char tool[16];

	for (size_t k = 0; k < sizeof(args); k++)
		args[k] = (uint8_t)(k + (size_t)i);
	snprintf(tool, sizeof(tool), "tool-%d", i);
	record_of(x, &rec);
	rec.tool = (const uint8_t *)tool;
	rec.tool_kept = rec.tool_len = (uint32_t)strlen(tool);
	rec.args = args;
	rec.args_kept = sizeof(args);
	rec.args_len = 300;
	rec.result_format = 1;
	return submit_rec(st, CARMY_STORE_RESERVE, &rec);
}

static void has_call(const struct calls *s, const char *id, int i)
{
	int k = find_call(s, id);
	char tool[16];

	snprintf(tool, sizeof(tool), "tool-%d", i);
	ck_assert_uint_eq(s->e[k].tool_kept, strlen(tool));
	ck_assert_uint_eq(s->e[k].tool_len, strlen(tool));
	ck_assert_mem_eq(s->e[k].tool, tool, strlen(tool));
	ck_assert_uint_eq(s->e[k].args_kept, CARMY_STORE_ARGS_MAX);
	ck_assert_uint_eq(s->e[k].args_len, 300);
	for (int b = 0; b < CARMY_STORE_ARGS_MAX; b++)
		ck_assert_uint_eq(s->e[k].args[b], (uint8_t)(b + i));
	ck_assert_uint_eq(s->e[k].format, 1);
}

/* A RESERVE keeps its call; load() gives it back, and a compaction
 * carries it into the new file. Lengths a record cannot hold are cut to
 * what the store keeps. */
START_TEST(test_a_reservation_keeps_its_call)
{
	char *dir = temp_dir();
	struct calls *got = calloc(2, sizeof(*got));
	struct carmy_store_record rec;
	struct ex xs[13];
	char big[200];
	void *st = open_journal_as_is(dir);
	int k;

	ck_assert_ptr_nonnull(got);
	make_ex(&xs[0], 0, CARMY_STATUS_COMPLETED);
	make_ex(&xs[1], 1, CARMY_STATUS_COMPLETED);
	ck_assert_int_eq(submit_call(st, &xs[0], 0), 0);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_COMPLETE, &xs[0]), 0);
	ck_assert_int_eq(submit_call(st, &xs[1], 1), 0);
	/* Kept lengths past the bounds, or past the whole: cut. */
	make_ex(&xs[2], 2, CARMY_STATUS_COMPLETED);
	memset(big, 'b', sizeof(big));
	record_of(&xs[2], &rec);
	rec.tool = (const uint8_t *)big;
	rec.tool_kept = sizeof(big);
	rec.tool_len = sizeof(big);
	rec.args = (const uint8_t *)big;
	rec.args_kept = 50;
	rec.args_len = 20;
	ck_assert_int_eq(submit_rec(st, CARMY_STORE_RESERVE, &rec), 0);
	/* History for a compaction to prune. */
	for (int i = 3; i < 13; i++) {
		make_ex(&xs[i], i, CARMY_STATUS_COMPLETED);
		ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &xs[i]),
				 0);
		ck_assert_int_eq(submit_wait(st, CARMY_STORE_RELEASE, &xs[i]),
				 0);
	}
	journal_store_ops.close(st);

	st = open_journal_as_is(dir);
	ck_assert_int_eq(journal_store_ops.load(st, collect_calls, &got[0]), 0);
	journal_store_ops.close(st);
	ck_assert_int_eq(got[0].n, 3);
	has_call(&got[0], "req-000", 0);
	has_call(&got[0], "req-001", 1);
	k = find_call(&got[0], "req-002");
	ck_assert_uint_eq(got[0].e[k].tool_kept, CARMY_STORE_TOOL_MAX);
	ck_assert_uint_eq(got[0].e[k].tool_len, sizeof(big));
	ck_assert_uint_eq(got[0].e[k].args_kept, 20);
	ck_assert_uint_eq(got[0].e[k].args_len, 20);
	ck_assert_uint_eq(got[0].e[k].format, 0);

	{
		ino_t before = inode_of(dir);

		st = open_journal_min(dir, 1);	/* compacts at start */
		ck_assert_int_eq(journal_store_ops.load(st, collect_calls,
							&got[1]), 0);
		journal_store_ops.close(st);
		ck_assert_uint_ne(inode_of(dir), before);
	}
	ck_assert_int_eq(got[1].n, 3);
	has_call(&got[1], "req-000", 0);
	has_call(&got[1], "req-001", 1);
	ck_assert_int_eq(got[1].e[find_call(&got[1], "req-000")].state,
			 CARMY_STORE_COMPLETED);
	free(got);
	rm_rf(dir);
	free(dir);
}
END_TEST

/*
 * A RESERVE of an earlier carmyd: flags 0 and nothing after the identity.
 * It reads as an execution with no call (format unknown), and the journal goes
 * on after it. Made here from a record the store wrote, written again in
 * the earlier layout and sealed as the store seals.
 */
START_TEST(test_a_reservation_without_a_call_still_reads)
{
	char *dir = temp_dir(), path[256];
	struct calls *got = calloc(1, sizeof(*got));
	struct jrec_reserve rv;
	struct jrec_head h;
	struct ex xs[2];
	size_t len, off[8], at, body;
	uint64_t salt;
	uint8_t *buf;
	void *st = open_journal_as_is(dir);
	int n, k;

	ck_assert_ptr_nonnull(got);
	make_ex(&xs[0], 0, CARMY_STATUS_COMPLETED);
	make_ex(&xs[1], 1, CARMY_STATUS_FAILED);
	ck_assert_int_eq(submit_call(st, &xs[0], 0), 0);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &xs[1]), 0);
	journal_store_ops.close(st);

	snprintf(path, sizeof(path), "%s/journal", dir);
	buf = read_file(path, &len);
	n = record_starts(buf, len, off, 7);
	ck_assert_int_eq(n, 2);
	at = off[1];
	memcpy(&salt, buf + offsetof(struct jfile_head, jf_salt), 8);
	memcpy(&h, buf + at, sizeof(h));
	memcpy(&rv, buf + at + sizeof(h), sizeof(rv));
	ck_assert_uint_eq(rv.rv_flags, JRV_CALL);
	rv.rv_flags = 0;
	body = sizeof(rv) + rv.rv_len[0] + rv.rv_len[1] + rv.rv_len[2];
	memcpy(buf + at + sizeof(h), &rv, sizeof(rv));
	/* The identity stays where it was; the call after it goes. */
	memset(buf + at + sizeof(h) + body, 0, off[2] - at - sizeof(h) - body);
	h.jr_len = (uint32_t)((sizeof(h) + body + 7) / 8 * 8 + 8);
	ck_assert_uint_lt(h.jr_len, off[2] - at);
	memcpy(buf + at, &h, sizeof(h));
	jnl_rec_seal(buf + at, at, salt);
	write_file(dir, buf, len);
	free(buf);

	st = open_journal_as_is(dir);
	ck_assert_int_eq(journal_store_ops.load(st, collect_calls, got), 0);
	ck_assert_int_eq(got->n, 2);
	has_call(got, "req-000", 0);
	k = find_call(got, "req-001");
	ck_assert_int_eq(got->e[k].state, CARMY_STORE_RUNNING);
	ck_assert_uint_eq(got->e[k].tool_kept + got->e[k].tool_len +
			  got->e[k].args_kept + got->e[k].args_len, 0);
	ck_assert_uint_eq(got->e[k].format, CARMY_STORE_FORMAT_UNKNOWN);
	/* It goes on after the shorter record. */
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_COMPLETE, &xs[1]), 0);
	journal_store_ops.close(st);
	memset(got, 0, sizeof(*got));
	st = open_journal_as_is(dir);
	ck_assert_int_eq(journal_store_ops.load(st, collect_calls, got), 0);
	journal_store_ops.close(st);
	ck_assert_int_eq(got->n, 2);
	ck_assert_int_eq(got->e[find_call(got, "req-001")].state,
			 CARMY_STORE_COMPLETED);
	free(got);
	rm_rf(dir);
	free(dir);
}
END_TEST

/* The largest record carmyd can write, a committed RESOLVE with a result
 * of the largest --max-result, is read back (the journal's size limit
 * counts the larger of its record kinds). */
START_TEST(test_largest_resolve_record_reads_back)
{
	char *dir = temp_dir();
	struct carmy_store_record rec;
	struct ex x;
	struct seen s = { 0 };
	void *st = open_journal(dir);
	size_t big = 64u << 20;
	char *result = malloc(big);

	ck_assert_ptr_nonnull(result);
	memset(result, 'r', big);
	make_ex(&x, 1, CARMY_STATUS_COMPLETED);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &x), 0);
	record_of(&x, &rec);
	rec.state = CARMY_STORE_COMPLETED;
	rec.result = result;
	rec.result_len = (uint32_t)big;
	rec.resolved_ns = 1;
	rec.resolved_pid = 777;
	ck_assert_int_eq(submit_rec(st, CARMY_STORE_RESOLVE, &rec), 0);
	journal_store_ops.close(st);
	free(result);
	st = open_journal(dir);
	ck_assert_int_eq(journal_store_ops.load(st, count_only, &s), 0);
	journal_store_ops.close(st);
	ck_assert_int_eq(s.n, 1);
	ck_assert_int_eq(s.e[0].state, CARMY_STORE_COMPLETED);
	rm_rf(dir);
	free(dir);
}
END_TEST

/* Many threads at once: every request is answered, and everything
 * acknowledged comes back. */
struct burst {
	void *st;
	int base;
};

static void *burst_thread(void *arg)
{
	struct burst *b = arg;

	for (int i = 0; i < 50; i++) {
		struct ex x;

		make_ex(&x, b->base + i, CARMY_STATUS_COMPLETED);
		if (submit_wait(b->st, CARMY_STORE_RESERVE, &x) != 0 ||
		    submit_wait(b->st, CARMY_STORE_COMPLETE, &x) != 0)
			return (void *)1;
	}
	return NULL;
}

/* With one batch in flight at a time, and with as many as 4 side by side
 * (CARMY_JOURNAL_FLIGHT). */
static void concurrent_requests(const char *flight)
{
	char *dir = temp_dir();
	struct burst b[4];
	pthread_t t[4];
	static struct seen s;
	void *st;

	memset(&s, 0, sizeof(s));
	ck_assert_int_eq(setenv("CARMY_JOURNAL_FLIGHT", flight, 1), 0);
	st = open_journal(dir);
	ck_assert_int_eq(unsetenv("CARMY_JOURNAL_FLIGHT"), 0);
	for (int i = 0; i < 4; i++) {
		b[i] = (struct burst){ st, i * 50 };
		ck_assert_int_eq(pthread_create(&t[i], NULL, burst_thread,
						&b[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		void *ret;

		ck_assert_int_eq(pthread_join(t[i], &ret), 0);
		ck_assert_ptr_null(ret);
	}
	journal_store_ops.close(st);
	st = open_journal(dir);
	ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
	journal_store_ops.close(st);
	ck_assert_int_eq(s.n, 200);
	for (int i = 0; i < s.n; i++)
		ck_assert_int_eq(s.e[i].state, CARMY_STORE_COMPLETED);
	rm_rf(dir);
	free(dir);
}

START_TEST(test_concurrent_requests_are_all_recorded)
{
	concurrent_requests("1");
	concurrent_requests("4");
}
END_TEST

/* Which of build()'s n executions stand, and how, once its first whole
 * records are read (the rest cut): build() wrote, per execution in order,
 * RESERVE, then RELEASE (i % 3 == 0) or COMPLETE (even). */
static void check_prefix(const struct seen *s, const struct ex *xs, int n,
			 int whole, const char *what, size_t at)
{
	int r = 0;

	for (int i = 0; i < n; i++) {
		int k = find(s, xs[i].id);
		int want = 0;

		if (r < whole)
			want = CARMY_STORE_RUNNING;
		if (r + 1 < whole && i % 3 == 0)
			want = 0;
		else if (r + 1 < whole && i % 2 == 0)
			want = CARMY_STORE_COMPLETED;
		r += (i % 3 == 0 || i % 2 == 0) ? 2 : 1;
		if (want == 0) {
			ck_assert_msg(k < 0, "%s at %zu: %s should not stand",
				      what, at, xs[i].id);
			continue;
		}
		ck_assert_msg(k >= 0, "%s at %zu: %s is missing", what, at,
			      xs[i].id);
		ck_assert_int_eq(s->e[k].state, want);
		ck_assert_mem_eq(s->e[k].exec, xs[i].exec, 16);
		if (want == CARMY_STORE_COMPLETED)
			ck_assert_str_eq(s->e[k].result, xs[i].result);
	}
}

/*
 * A crash in the middle of a write leaves each sector of it written or
 * still the zeros the file grew with. Zero the journal from every sector
 * boundary in its records on (the file keeps its size, as on a disk): it
 * opens, the record the boundary cuts is zeroed as a torn write, and load()
 * gives exactly the executions whose records lie wholly before it. A second
 * open finds nothing to cut, and an append after the cut reads back.
 */
START_TEST(test_torn_write_at_any_sector_recovers_a_clean_prefix)
{
	char *dir = temp_dir(), *cut = temp_dir();
	char path[256], err[512];
	struct journal_report rep;
	struct ex xs[40];
	size_t len, off[128];
	uint8_t *buf, *copy;
	int nrec, tried = 0;

	build(dir, xs, 40);
	snprintf(path, sizeof(path), "%s/journal", dir);
	buf = read_file(path, &len);
	nrec = record_starts(buf, len, off, 127);
	ck_assert_int_ge(nrec, 40);
	copy = malloc(len);
	ck_assert_ptr_nonnull(copy);
	for (size_t at = (HEAD / SECTOR + 1) * SECTOR; at < off[nrec];
	     at += SECTOR) {
		struct seen s = { 0 };
		struct ex y;
		void *st;
		int whole = 0;

		while (whole < nrec && off[whole + 1] <= at)
			whole++;
		memcpy(copy, buf, len);
		memset(copy + at, 0, off[nrec] - at);
		write_file(cut, copy, len);
		st = open_journal(cut);
		ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
		check_prefix(&s, xs, 40, whole, "torn", at);
		make_ex(&y, 99, CARMY_STATUS_COMPLETED);
		ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &y), 0);
		journal_store_ops.close(st);
		ck_assert_int_eq(journal_check(cut, &rep, err, sizeof(err)), 0);
		ck_assert_uint_eq(rep.torn, 0);
		ck_assert_uint_eq(rep.records, (uint64_t)whole + 1);
		ck_assert_uint_eq(rep.file_bytes, len);
		tried++;
	}
	fprintf(stderr, "# %d records, %zu bytes; %d torn writes\n", nrec,
		off[nrec], tried);
	ck_assert_int_ge(tried, 10);
	free(copy);
	free(buf);
	rm_rf(dir);
	rm_rf(cut);
	free(dir);
	free(cut);
}
END_TEST

/*
 * The file grows ahead of its records and never shrinks, so a journal
 * that ends inside a record, at a record's end, or fewer than a head's
 * worth of zeros after it was cut short after carmyd wrote it: refused,
 * by journal_check() and open() alike, naming the byte, and left as it
 * is. Cut further on, in the zeros, nothing is lost: it opens.
 */
START_TEST(test_journal_cut_short_is_refused)
{
	char *dir = temp_dir(), *cut = temp_dir();
	char path[256], err[512];
	struct journal_report rep;
	struct ex xs[12];
	size_t len, off[64];
	uint8_t *buf;
	int nrec;
	unsigned seed = (unsigned)getpid();

	build(dir, xs, 12);
	snprintf(path, sizeof(path), "%s/journal", dir);
	buf = read_file(path, &len);
	nrec = record_starts(buf, len, off, 63);
	fprintf(stderr, "# %d records, %zu bytes; seed %u\n", nrec, off[nrec],
		seed);
	srand(seed);
	for (int trial = 0; trial < 200 + nrec; trial++) {
		size_t at;
		void *st = NULL;

		if (trial < 150)	/* the last records, and after them */
			at = off[nrec] + REC_HEAD - 1 - (size_t)trial;
		else if (trial < 200)
			at = (size_t)HEAD + (size_t)rand() % (off[nrec] - HEAD);
		else			/* at every record boundary */
			at = off[trial - 200 + 1];
		write_file(cut, buf, at);
		ck_assert_int_eq(journal_check(cut, &rep, err, sizeof(err)),
				 CARMY_ECORRUPT);
		ck_assert_msg(strstr(err, "damaged at byte") != NULL,
			      "cut at %zu: %s", at, err);
		ck_assert_int_eq(journal_store_ops.open(cut, &st, err,
							sizeof(err)),
				 CARMY_ECORRUPT);
		ck_assert_ptr_null(st);
		{
			char p2[256];
			size_t len2;
			uint8_t *again;

			snprintf(p2, sizeof(p2), "%s/journal", cut);
			again = read_file(p2, &len2);
			ck_assert_uint_eq(len2, at);
			ck_assert_int_eq(memcmp(again, buf, at), 0);
			free(again);
		}
	}
	/* A head's worth of zeros after the records: all there. */
	for (size_t at = off[nrec] + REC_HEAD; at < off[nrec] + 3 * REC_HEAD;
	     at += 8) {
		struct seen s = { 0 };
		void *st;

		write_file(cut, buf, at);
		st = open_journal(cut);
		ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
		journal_store_ops.close(st);
		check_prefix(&s, xs, 12, nrec, "cut", at);
	}
	free(buf);
	rm_rf(dir);
	rm_rf(cut);
	free(dir);
	free(cut);
}
END_TEST

/*
 * A write cut short leaves the sectors that never reached the disk as the
 * zeros the file was grown with: the last record with one of its 512-byte
 * pieces still zero is a torn write, cut, and appending resumes after it.
 */
START_TEST(test_torn_last_record_is_cut)
{
	char *dir = temp_dir();
	char path[256];
	struct ex xs[6];
	struct seen s = { 0 };
	size_t len, off[32], last, lo, hi;
	uint8_t *buf;
	int nrec;
	void *st;

	build(dir, xs, 6);
	snprintf(path, sizeof(path), "%s/journal", dir);
	buf = read_file(path, &len);
	nrec = record_starts(buf, len, off, 31);
	/* Zero the last record's first piece: from its start to the next
	 * sector boundary (its head, at least). */
	last = off[nrec - 1];
	lo = last;
	hi = (last / 512 + 1) * 512;
	if (hi > off[nrec])
		hi = off[nrec];
	memset(buf + lo, 0, hi - lo);
	write_file(dir, buf, len);
	st = open_journal(dir);
	ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
	/* The last record was 5's RESERVE: 1, 2 and 4 stand. */
	ck_assert_int_eq(s.n, 3);
	ck_assert_int_lt(find(&s, "req-005"), 0);
	{
		struct ex y;

		make_ex(&y, 99, CARMY_STATUS_COMPLETED);
		ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &y), 0);
	}
	journal_store_ops.close(st);
	memset(&s, 0, sizeof(s));
	st = open_journal(dir);
	ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
	journal_store_ops.close(st);
	ck_assert_int_eq(s.n, 4);
	ck_assert_int_ge(find(&s, "req-099"), 0);
	free(buf);
	rm_rf(dir);
	free(dir);
}
END_TEST

/*
 * A torn write whose sectors that reached the disk are light: the last
 * batch, one COMPLETE whose result is zeros but for one bit, of which
 * only the sector holding that bit was written (not its head's, not its
 * checksum's). Its head is zeros, so nothing acknowledged starts there,
 * and no good record follows: it is zeroed, not refused for the few bits
 * set after the records.
 */
START_TEST(test_a_torn_write_of_light_sectors_is_zeroed)
{
	char *dir = temp_dir();
	char path[256], err[512] = "";
	static char result[1500];
	struct journal_report rep;
	struct carmy_store_record r;
	struct seen s = { 0 };
	struct ex xs[3], z;
	size_t len, off[32], b, bit;
	uint8_t *buf;
	uint64_t at;
	int nrec;
	void *st;

	build(dir, xs, 3);
	st = open_journal_as_is(dir);
	make_ex(&z, 77, CARMY_STATUS_COMPLETED);
	record_of(&z, &r);
	ck_assert_int_eq(submit_rec(st, CARMY_STORE_RESERVE, &r), 0);
	/* The COMPLETE goes at j->end: its result starts 72 bytes in (the
	 * head and the fixed part); the bit 100 bytes past the first sector
	 * boundary inside the result. */
	at = ((struct jnl *)st)->end;
	b = (size_t)((at + REC_HEAD + 40) / SECTOR + 1) * SECTOR;
	bit = b + 100;
	memset(result, 0, sizeof(result));
	result[bit - (at + REC_HEAD + 40)] = 0x04;
	r.result = result;
	r.result_len = sizeof(result);
	ck_assert_int_eq(submit_rec(st, CARMY_STORE_COMPLETE, &r), 0);
	journal_store_ops.close(st);

	snprintf(path, sizeof(path), "%s/journal", dir);
	buf = read_file(path, &len);
	nrec = record_starts(buf, len, off, 31);
	ck_assert_uint_eq(off[nrec - 1], at);
	/* Neither its head's sector nor its checksum's is b's. */
	ck_assert_uint_ge(off[nrec] - 8, b + SECTOR);
	/* Only [b, b + 512) reached the disk. */
	memset(buf + at, 0, b - at);
	memset(buf + b + SECTOR, 0, off[nrec] - (b + SECTOR));
	write_file(dir, buf, len);
	ck_assert_msg(journal_check(dir, &rep, err, sizeof(err)) == 0, "%s",
		      err);
	ck_assert_uint_eq(rep.end, at);
	ck_assert_uint_eq(rep.torn, bit + 1 - at);
	st = open_journal_as_is(dir);
	ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
	journal_store_ops.close(st);
	/* 1 and 2 stand from build(), and 77 without its result. */
	ck_assert_int_eq(s.n, 3);
	ck_assert_int_eq(s.e[find(&s, "req-077")].state, CARMY_STORE_RUNNING);
	free(buf);
	buf = read_file(path, &len);
	{
		size_t i = at;

		while (i < len && buf[i] == 0)
			i++;
		ck_assert_msg(i == len, "byte %zu not zeroed", i);
	}
	free(buf);
	rm_rf(dir);
	free(dir);
}
END_TEST

/*
 * The last record whole on disk but failing its checksum (a flipped bit,
 * garbage written over it) cannot be a torn write: its batch may have been
 * acknowledged, so the journal is refused rather than cut. Garbage where
 * the zeros should be is refused the same way.
 */
START_TEST(test_damaged_last_record_is_refused)
{
	char *dir = temp_dir();
	char path[256], err[512] = "";
	struct ex xs[6];
	size_t len, off[32];
	uint8_t *buf;
	void *st = NULL;
	int nrec;

	build(dir, xs, 6);
	snprintf(path, sizeof(path), "%s/journal", dir);
	buf = read_file(path, &len);
	nrec = record_starts(buf, len, off, 31);
	buf[off[nrec] - 12] ^= 0x01;	/* inside the last record */
	write_file(dir, buf, len);
	ck_assert_int_eq(journal_store_ops.open(dir, &st, err, sizeof(err)),
			 CARMY_ECORRUPT);
	ck_assert_ptr_null(st);
	ck_assert_msg(strstr(err, "damaged") != NULL, "%s", err);

	buf[off[nrec] - 12] ^= 0x01;	/* whole again */
	for (size_t i = off[nrec]; i < off[nrec] + 300 && i < len; i++)
		buf[i] = (uint8_t)(i * 131 + 7);
	write_file(dir, buf, len);
	ck_assert_int_eq(journal_store_ops.open(dir, &st, err, sizeof(err)),
			 CARMY_ECORRUPT);
	ck_assert_ptr_null(st);
	free(buf);
	rm_rf(dir);
	free(dir);
}
END_TEST

/* A damaged record that good records of later batches follow was
 * acknowledged: the journal is refused, never cut. */
START_TEST(test_damage_followed_by_good_records_is_refused)
{
	char *dir = temp_dir();
	char path[256], err[512] = "";
	struct ex xs[8];
	size_t len, off[32];
	uint8_t *buf;
	void *st = NULL;
	int nrec, rc;

	build(dir, xs, 8);
	snprintf(path, sizeof(path), "%s/journal", dir);
	buf = read_file(path, &len);
	nrec = record_starts(buf, len, off, 31);
	ck_assert_int_gt(nrec, 4);
	buf[off[2] + REC_HEAD + 3] ^= 0x40;	/* inside the third record */
	write_file(dir, buf, len);
	rc = journal_store_ops.open(dir, &st, err, sizeof(err));
	ck_assert_int_eq(rc, CARMY_ECORRUPT);
	ck_assert_ptr_null(st);
	ck_assert_msg(strstr(err, "damaged") != NULL, "%s", err);
	/* Refusing cut nothing: the file is as it was. */
	{
		size_t len2;
		uint8_t *again = read_file(path, &len2);

		ck_assert_uint_eq(len2, len);
		ck_assert_int_eq(memcmp(again, buf, len), 0);
		free(again);
	}
	free(buf);
	rm_rf(dir);
	free(dir);
}
END_TEST

/*
 * A file made sparse and huge after its records (truncate -s 1T: zeros
 * the disk does not hold) is read in the time its data takes: a clean end
 * as it is, and with a torn record before the hole the search for good
 * records after it skips the hole too. Read byte by byte, a tebibyte would
 * take most of an hour; the test's deadline is the tcase's 60 s.
 */
/* 1 TiB, or 4 GiB where the address space cannot map that much (valgrind's
 * cannot): recovery maps the whole file. */
static uint64_t sparse_size(void)
{
	const uint64_t tib = UINT64_C(1) << 40;
	void *p = mmap(NULL, tib, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		return UINT64_C(1) << 32;
	munmap(p, tib);
	return tib;
}

START_TEST(test_a_sparse_tail_costs_its_data_not_its_length)
{
	const uint64_t huge = sparse_size();
	char *dir = temp_dir();
	char path[256], err[512] = "";
	struct journal_report rep;
	struct ex xs[6], y;
	struct seen s = { 0 };
	size_t len, off[32];
	uint32_t rlen;
	uint8_t *buf, zeros[REC_HEAD] = { 0 };
	void *st;
	int nrec, fd;

	build(dir, xs, 6);
	snprintf(path, sizeof(path), "%s/journal", dir);
	buf = read_file(path, &len);
	nrec = record_starts(buf, len, off, 31);
	free(buf);
	ck_assert_int_eq(truncate(path, (off_t)huge), 0);
	ck_assert_int_eq(journal_check(dir, &rep, err, sizeof(err)), 0);
	ck_assert_uint_eq(rep.file_bytes, huge);
	ck_assert_uint_eq(rep.end, off[nrec]);
	ck_assert_uint_eq(rep.torn, 0);
	ck_assert_uint_eq(rep.records, (uint64_t)nrec);

	/* One more record, its head's sector never written: torn. */
	st = open_journal(dir);
	make_ex(&y, 50, CARMY_STATUS_COMPLETED);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &y), 0);
	journal_store_ops.close(st);
	fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &rlen, 4, (off_t)off[nrec]), 4);
	ck_assert_int_eq(pwrite(fd, zeros, sizeof(zeros), (off_t)off[nrec]),
			 (ssize_t)sizeof(zeros));
	close(fd);
	ck_assert_int_eq(journal_check(dir, &rep, err, sizeof(err)), 0);
	ck_assert_uint_eq(rep.end, off[nrec]);
	ck_assert_uint_le(rep.torn, rlen);
	ck_assert_uint_gt(rep.torn, rlen - 8);
	/* Opened, the tail is zeroed in place: the file keeps its size. */
	st = open_journal(dir);
	ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
	journal_store_ops.close(st);
	ck_assert_int_eq(s.n, 4);	/* 1, 2, 4 and 5 (build()'s pattern) */
	ck_assert_int_eq(journal_check(dir, &rep, err, sizeof(err)), 0);
	ck_assert_uint_eq(rep.file_bytes, huge);
	ck_assert_uint_eq(rep.end, off[nrec]);
	ck_assert_uint_eq(rep.torn, 0);
	rm_rf(dir);
	free(dir);
}
END_TEST

/* Flip bit k of byte at in the journal in dir's file (fd open on it). */
static void flip_bit(int fd, size_t at, int k)
{
	uint8_t c;

	ck_assert_int_eq(pread(fd, &c, 1, (off_t)at), 1);
	c ^= (uint8_t)(1u << k);
	ck_assert_int_eq(pwrite(fd, &c, 1, (off_t)at), 1);
}

/* The byte a refusal names ("damaged at byte N"). */
static size_t named_byte(const char *err)
{
	const char *p = strstr(err, "at byte ");
	unsigned long long n;

	ck_assert_msg(p != NULL, "no byte named: %s", err);
	ck_assert_int_eq(sscanf(p, "at byte %llu", &n), 1);
	return (size_t)n;
}

/*
 * Every single flipped bit in a journal of acknowledged records, its
 * header and every record, is refused as damage: never read as good,
 * never cut as a torn write. The refusal names the byte where the record
 * with the flip starts (0 for the header), or where the records end for a
 * flip in the head's worth of zeros there. A flip further in the zeros after the
 * records touches nothing acknowledged: it is zeroed (a torn tail from
 * the records' end to the flipped byte), and every record stays. The
 * last record holds a result of 1100 zeros but for one bit: pieces of it
 * are light, or zeros as written. Each flip is read by journal_check(); those
 * in the last record and after it, where a cut could happen, by open() as
 * well (one bit of each byte after the records: each zeroing is a flush),
 * which must leave a file it refuses as it is. The file is the journal's
 * first bytes, to 64 bytes past the sector after its records (cut in its
 * zeros: it opens as it is). Under valgrind, every SWEEP_STRIDE-th byte
 * (all its bits), unless CARMY_SWEEP_ALL is set: the full sweep takes a
 * minute there.
 */
#define SWEEP_STRIDE 5

/* Bit k of byte at, in the zeros after the records (which end at end),
 * is flipped in the journal in dir (open at fd; orig: its bytes before):
 * the check calls it a torn tail up to that byte and keeps every record;
 * with open_too, open() zeroes it back and loads them all. The bit is
 * cleared again either way. */
static void zeros_after(const char *dir, int fd, const uint8_t *orig,
			size_t at, int k, size_t end, uint64_t records,
			bool open_too)
{
	struct journal_report rep;
	char err[512] = "";
	uint8_t c;
	void *st = NULL;

	ck_assert_msg(journal_check(dir, &rep, err, sizeof(err)) == 0,
		      "bit %d of byte %zu after the records: %s", k, at, err);
	ck_assert_uint_eq(rep.records, records);
	ck_assert_uint_eq(rep.end, end);
	ck_assert_uint_eq(rep.torn, at + 1 - end);
	if (open_too) {
		ck_assert_msg(journal_store_ops.open(dir, &st, err,
						     sizeof(err)) == 0,
			      "bit %d of byte %zu: %s", k, at, err);
		journal_store_ops.close(st);
	} else {
		flip_bit(fd, at, k);
	}
	ck_assert_int_eq(pread(fd, &c, 1, (off_t)at), 1);
	ck_assert_uint_eq(c, orig[at]);
}

static bool on_valgrind(void)
{
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
	return RUNNING_ON_VALGRIND != 0;
#endif
#endif
	return false;
}

START_TEST(test_every_flipped_bit_is_refused)
{
	char *dir = temp_dir(), *flip = temp_dir();
	char path[256], fpath[256], err[512];
	static char big[1100];
	struct journal_report rep;
	struct carmy_store_record r;
	struct ex xs[3], z;
	size_t len, off[32], n, stride = 1;
	uint8_t *buf, *again;
	int nrec, fd, opens = 0;
	unsigned long flips = 0, zeroed = 0;
	void *st;

	if (on_valgrind() && getenv("CARMY_SWEEP_ALL") == NULL)
		stride = SWEEP_STRIDE;
	st = open_journal(dir);
	for (int i = 0; i < 3; i++) {
		make_ex(&xs[i], i, CARMY_STATUS_COMPLETED);
		ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &xs[i]), 0);
		if (i % 2 == 0)
			ck_assert_int_eq(submit_wait(st, CARMY_STORE_COMPLETE,
						     &xs[i]), 0);
	}
	/* Last: where a flip could pass for a torn write, if anywhere. */
	make_ex(&z, 60, CARMY_STATUS_COMPLETED);
	record_of(&z, &r);
	ck_assert_int_eq(submit_rec(st, CARMY_STORE_RESERVE, &r), 0);
	memset(big, 0, sizeof(big));
	big[900] = 0x10;
	r.result = big;
	r.result_len = sizeof(big);
	ck_assert_int_eq(submit_rec(st, CARMY_STORE_COMPLETE, &r), 0);
	journal_store_ops.close(st);

	snprintf(path, sizeof(path), "%s/journal", dir);
	buf = read_file(path, &len);
	nrec = record_starts(buf, len, off, 31);
	ck_assert_int_eq(nrec, 7);
	n = (off[nrec] / SECTOR + 1) * SECTOR + 64;
	ck_assert_uint_le(n, len);
	write_file(flip, buf, n);
	ck_assert_int_eq(journal_check(flip, &rep, err, sizeof(err)), 0);
	ck_assert_uint_eq(rep.records, (uint64_t)nrec);
	ck_assert_uint_eq(rep.torn, 0);

	snprintf(fpath, sizeof(fpath), "%s/journal", flip);
	fd = open(fpath, O_RDWR);
	ck_assert_int_ge(fd, 0);
	for (size_t at = 0; at < n; at += stride) {
		size_t rec = 0, named;
		int i = 0;

		while (i < nrec && off[i + 1] <= at)
			i++;
		rec = at < HEAD ? 0 : i < nrec ? off[i] : off[nrec];
		for (int k = 0; k < 8; k++) {
			flip_bit(fd, at, k);
			flips++;
			/* After the records, but for the head that would
			 * come next when it is in one sector: a head with
			 * no part of zeros is damage, whatever it holds. */
			if (i == nrec && (at >= off[nrec] + REC_HEAD ||
					  off[nrec] / SECTOR !=
					  (off[nrec] + REC_HEAD - 1) / SECTOR)) {
				zeros_after(flip, fd, buf, at, k, off[nrec],
					    (uint64_t)nrec, k == (int)(at % 8));
				zeroed++;
				continue;
			}
			ck_assert_msg(journal_check(flip, &rep, err,
						    sizeof(err)) ==
					      CARMY_ECORRUPT,
				      "bit %d of byte %zu accepted", k, at);
			named = named_byte(err);
			ck_assert_msg(named == rec,
				      "bit %d of byte %zu: named %zu, not %zu: "
				      "%s", k, at, named, rec, err);
			if (at >= off[nrec - 1]) {
				st = NULL;
				ck_assert_int_eq(journal_store_ops.open(
							 flip, &st, err,
							 sizeof(err)),
						 CARMY_ECORRUPT);
				ck_assert_ptr_null(st);
				opens++;
			}
			flip_bit(fd, at, k);
		}
	}
	close(fd);
	/* What open() refused, it left as it was. */
	{
		size_t len2;

		again = read_file(fpath, &len2);
		ck_assert_uint_eq(len2, n);
		ck_assert_int_eq(memcmp(again, buf, n), 0);
		free(again);
	}
	fprintf(stderr, "# %lu bits of %zu flipped (all %zu records' and the "
		"zeros after them): %lu refused (%d by open "
		"too), %lu further in the zeros zeroed\n", flips, 8 * n, (size_t)nrec,
		flips - zeroed, opens, zeroed);
	free(buf);
	rm_rf(dir);
	rm_rf(flip);
	free(dir);
	free(flip);
}
END_TEST

/*
 * A journal of format 1 (the previous release's: a 24-byte head, one
 * XXH3 over the record), written here by hand as that release wrote it:
 * header, then RESERVE 1, RESERVE 2, COMPLETE 1, RESERVE 3, RELEASE 3,
 * each a batch of its own, and (torn) the head of a sixth record at the
 * end of the file. Returns the bytes.
 */
static size_t v1_journal(uint8_t *f, size_t cap, struct ex *xs)
{
	struct jfile_head h;
	size_t at = HEAD;
	uint64_t seq = 0;
	static const int plan[5][2] = {
		{ CARMY_STORE_RESERVE, 1 }, { CARMY_STORE_RESERVE, 2 },
		{ CARMY_STORE_COMPLETE, 1 }, { CARMY_STORE_RESERVE, 3 },
		{ CARMY_STORE_RELEASE, 3 },
	};

	memset(f, 0, cap);
	memset(&h, 0, sizeof(h));
	memcpy(h.jf_magic, "CARMYJNL", 8);
	h.jf_version = 1;
	h.jf_salt = 0x1234567890abcdefull;
	h.jf_created_ns = 1;
	h.jf_check = XXH3_64bits(&h, offsetof(struct jfile_head, jf_check));
	memcpy(f, &h, sizeof(h));
	for (int i = 1; i <= 3; i++)
		make_ex(&xs[i], i, CARMY_STATUS_COMPLETED);
	for (int k = 0; k < 5; k++) {
		const struct ex *x = &xs[plan[k][1]];
		struct jrec_head_v1 rh = { .jr_op = (uint8_t)plan[k][0] };
		uint8_t *b = f + at + sizeof(rh);
		size_t body;
		uint64_t sum;

		if (rh.jr_op == CARMY_STORE_RESERVE) {
			struct jrec_reserve rv = { .rv_started_ns = 1,
						   .rv_pid = 4242 };

			memcpy(rv.rv_exec, x->exec, 16);
			memcpy(rv.rv_fingerprint, x->fp, 16);
			memcpy(rv.rv_rawprint, x->fp, 16);
			rv.rv_len[0] = 9;
			rv.rv_len[1] = 7;
			rv.rv_len[2] = (uint16_t)strlen(x->id);
			memcpy(b, &rv, sizeof(rv));
			memcpy(b + sizeof(rv), "principalsession", 16);
			memcpy(b + sizeof(rv) + 16, x->id, rv.rv_len[2]);
			body = sizeof(rv) + 16 + rv.rv_len[2];
		} else if (rh.jr_op == CARMY_STORE_COMPLETE) {
			struct jrec_complete cp = {
				.cp_finished_ns = 2, .cp_status = x->status,
				.cp_result_len = (uint32_t)strlen(x->result),
			};

			memcpy(cp.cp_exec, x->exec, 16);
			memcpy(b, &cp, sizeof(cp));
			memcpy(b + sizeof(cp), x->result, cp.cp_result_len);
			body = sizeof(cp) + cp.cp_result_len;
		} else {
			memcpy(b, x->exec, 16);
			body = 16;
		}
		rh.jr_len = (uint32_t)((sizeof(rh) + body + 7) / 8 * 8 + 8);
		rh.jr_seq = rh.jr_batch = ++seq;
		ck_assert_uint_le(at + rh.jr_len + sizeof(rh), cap);
		memcpy(f + at, &rh, sizeof(rh));
		sum = XXH3_64bits_withSeed(f + at, rh.jr_len - 8, h.jf_salt);
		memcpy(f + at + rh.jr_len - 8, &sum, 8);
		at += rh.jr_len;
	}
	/* Torn: a head claiming more than the file holds (format 1 files
	 * were cut to size, so records ran to the end). */
	{
		struct jrec_head_v1 rh = { .jr_len = 400, .jr_op = 1,
					   .jr_seq = 6, .jr_batch = 6 };

		memcpy(f + at, &rh, sizeof(rh));
		at += sizeof(rh);
	}
	return at;
}

/*
 * A format 1 journal opens without losing anything: read by the rules it
 * was written under (its torn tail left out), rewritten in this format
 * (journal_check says which format it finds), and what stood before
 * stands after, and after a reopen. The old file is never changed: a
 * rewrite that cannot start leaves it as it was.
 */
START_TEST(test_a_format_1_journal_is_rewritten_at_open)
{
	char *dir = temp_dir();
	char path[256], err[512];
	static uint8_t f[4096];
	struct journal_report rep;
	struct ex xs[4];
	struct seen s = { 0 };
	size_t n = v1_journal(f, sizeof(f), xs), len;
	uint8_t *buf;
	void *st;

	write_file(dir, f, n);
	ck_assert_int_eq(journal_check(dir, &rep, err, sizeof(err)), 0);
	ck_assert_uint_eq(rep.version, 1);
	ck_assert_uint_eq(rep.records, 5);
	ck_assert_uint_eq(rep.torn, 17);	/* to its last byte not zero */
	/* journal.new cannot be made (a directory has its name): refused,
	 * the old file untouched. */
	snprintf(path, sizeof(path), "%s/journal.new", dir);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	{
		char sub[300];

		snprintf(sub, sizeof(sub), "%s/x", path);
		ck_assert_int_eq(mkdir(sub, 0700), 0);
		st = NULL;
		ck_assert_int_lt(journal_store_ops.open(dir, &st, err,
							sizeof(err)), 0);
		ck_assert_ptr_null(st);
		ck_assert_msg(strstr(err, "journal.new") != NULL, "%s", err);
		rmdir(sub);
		rmdir(path);
	}
	snprintf(path, sizeof(path), "%s/journal", dir);
	buf = read_file(path, &len);
	ck_assert_uint_eq(len, n);
	ck_assert_int_eq(memcmp(buf, f, n), 0);
	free(buf);

	st = open_journal(dir);
	ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
	journal_store_ops.close(st);
	ck_assert_int_eq(s.n, 2);
	ck_assert_int_ge(find(&s, "req-001"), 0);
	ck_assert_int_eq(s.e[find(&s, "req-001")].state, CARMY_STORE_COMPLETED);
	ck_assert_str_eq(s.e[find(&s, "req-001")].result, xs[1].result);
	ck_assert_int_eq(s.e[find(&s, "req-002")].state, CARMY_STORE_RUNNING);
	ck_assert_int_lt(find(&s, "req-003"), 0);
	ck_assert_int_eq(journal_check(dir, &rep, err, sizeof(err)), 0);
	ck_assert_uint_eq(rep.version, JOURNAL_VERSION);
	ck_assert_uint_eq(rep.records, 5);
	ck_assert_uint_eq(rep.torn, 0);
	ck_assert_uint_eq(rep.completed, 1);
	ck_assert_uint_eq(rep.unfinished, 1);
	memset(&s, 0, sizeof(s));
	st = open_journal(dir);
	ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
	journal_store_ops.close(st);
	ck_assert_int_eq(s.n, 2);
	/* The format 1 file is kept, byte for byte, torn tail and all. */
	snprintf(path, sizeof(path), "%s/journal.v1", dir);
	buf = read_file(path, &len);
	ck_assert_uint_eq(len, n);
	ck_assert_int_eq(memcmp(buf, f, n), 0);
	free(buf);
	rm_rf(dir);
	free(dir);
}
END_TEST

/* A journal directory or file that another user could write, or that is
 * a symbolic link, is refused by open() and journal_check(), naming it,
 * its owner and mode; a directory carmyd makes is 0700. */
static void refused(const char *dir, int want, const char *says)
{
	char err[512] = "";
	struct journal_report rep;
	void *st = NULL;

	ck_assert_int_eq(journal_store_ops.open(dir, &st, err, sizeof(err)),
			 want);
	ck_assert_ptr_null(st);
	ck_assert_msg(strstr(err, says) != NULL, "%s: %s", dir, err);
	err[0] = '\0';
	ck_assert_int_eq(journal_check(dir, &rep, err, sizeof(err)), want);
	ck_assert_msg(strstr(err, says) != NULL, "%s: %s", dir, err);
}

START_TEST(test_a_journal_directory_others_can_write_is_refused)
{
	char *dir = temp_dir();
	char sub[256];
	struct stat st;
	void *s;

	snprintf(sub, sizeof(sub), "%s/j", dir);
	s = open_journal(sub);	/* made by carmyd: 0700 */
	journal_store_ops.close(s);
	ck_assert_int_eq(stat(sub, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0700);
	ck_assert_int_eq(chmod(sub, 0777), 0);
	refused(sub, -EPERM, "with mode 0777");
	refused(sub, -EPERM, sub);
	ck_assert_int_eq(chmod(sub, 0720), 0);
	refused(sub, -EPERM, "with mode 0720");
	ck_assert_int_eq(chmod(sub, 0700), 0);
	s = open_journal(sub);
	journal_store_ops.close(s);
	rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(test_a_journal_directory_of_another_user_is_refused)
{
	char *dir = temp_dir();
	char sub[256], says[64];
	void *s;

	if (geteuid() != 0) {
		fprintf(stderr, "# skipped: needs root\n");
		rm_rf(dir);
		free(dir);
		return;
	}
	snprintf(sub, sizeof(sub), "%s/j", dir);
	s = open_journal(sub);
	journal_store_ops.close(s);
	ck_assert_int_eq(chown(sub, 65534, 65534), 0);
	{
		char err[512] = "";
		void *st = NULL;

		ck_assert_int_eq(journal_store_ops.open(sub, &st, err,
							sizeof(err)), -EPERM);
		ck_assert_msg(strstr(err, "owned by uid 65534") != NULL, "%s",
			      err);
	}
	ck_assert_int_eq(chown(sub, 0, 0), 0);
	/* The journal file of another user, in carmyd's directory. */
	snprintf(sub, sizeof(sub), "%s/j/journal", dir);
	ck_assert_int_eq(chown(sub, 65534, 65534), 0);
	snprintf(says, sizeof(says), "owned by uid 65534");
	snprintf(sub, sizeof(sub), "%s/j", dir);
	refused(sub, -EPERM, says);
	rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(test_a_journal_file_others_can_write_is_refused)
{
	char *dir = temp_dir();
	char sub[256], file[300];
	void *s;

	snprintf(sub, sizeof(sub), "%s/j", dir);
	s = open_journal(sub);
	journal_store_ops.close(s);
	snprintf(file, sizeof(file), "%s/journal", sub);
	ck_assert_int_eq(chmod(file, 0666), 0);
	refused(sub, -EPERM, "with mode 0666");
	ck_assert_int_eq(chmod(file, 0600), 0);
	s = open_journal(sub);
	journal_store_ops.close(s);
	rm_rf(dir);
	free(dir);
}
END_TEST

/* Links are never followed: neither to the directory nor to the file. */
START_TEST(test_a_symbolic_link_is_never_followed)
{
	char *dir = temp_dir();
	char real[256], link[256], file[300], slash[300], other[300];
	void *s;

	snprintf(real, sizeof(real), "%s/real", dir);
	snprintf(link, sizeof(link), "%s/link", dir);
	s = open_journal(real);
	journal_store_ops.close(s);
	ck_assert_int_eq(symlink(real, link), 0);
	refused(link, -ELOOP, "symbolic link");
	snprintf(slash, sizeof(slash), "%s/", link);
	refused(slash, -ELOOP, "symbolic link");
	snprintf(slash, sizeof(slash), "%s/./.", link);
	refused(slash, -ELOOP, "symbolic link");
	/* The journal itself a link to a journal elsewhere. */
	snprintf(file, sizeof(file), "%s/journal", real);
	snprintf(other, sizeof(other), "%s/other", dir);
	ck_assert_int_eq(rename(file, other), 0);
	ck_assert_int_eq(symlink(other, file), 0);
	refused(real, -ELOOP, "symbolic link");
	rm_rf(dir);
	free(dir);
}
END_TEST

/*
 * The way to the directory counts too: a directory above it that others
 * can write (not sticky), or a link on the way that another user owns,
 * could lead the same name to another directory of carmyd's (an old copy
 * of its journal) between two starts. Root's and carmyd's own links in
 * directories only they can change are followed.
 */
START_TEST(test_a_way_to_the_directory_others_can_change_is_refused)
{
	char *dir = temp_dir();
	char pub[256], real[256], link[300], via_pub[300], via_link[320];
	char err[512] = "";
	struct journal_report rep;
	void *s;

	snprintf(pub, sizeof(pub), "%s/pub", dir);
	snprintf(real, sizeof(real), "%s/real", dir);
	snprintf(link, sizeof(link), "%s/link", pub);
	snprintf(via_pub, sizeof(via_pub), "%s/j", pub);
	snprintf(via_link, sizeof(via_link), "%s/j", link);
	ck_assert_int_eq(mkdir(pub, 0700), 0);
	s = open_journal(via_pub);
	journal_store_ops.close(s);
	s = open_journal(real);
	journal_store_ops.close(s);
	ck_assert_int_eq(symlink(dir, link), 0);	/* link/j: dir/j */
	ck_assert_int_eq(rename(real, via_link), 0);
	s = open_journal(via_link);	/* our own link, our own directory */
	journal_store_ops.close(s);
	/* pub writable by all, not sticky: anyone could swap link or j. */
	ck_assert_int_eq(chmod(pub, 0777), 0);
	refused(via_pub, -EPERM, "pub on the way to it");
	refused(via_link, -EPERM, "pub on the way to it");
	/* Sticky, like /tmp: nobody else can rename or remove our names. */
	ck_assert_int_eq(chmod(pub, 01777), 0);
	s = open_journal(via_pub);
	journal_store_ops.close(s);
	s = open_journal(via_link);
	journal_store_ops.close(s);
	if (geteuid() != 0) {
		fprintf(stderr, "# skipped a link of another user: needs "
			"root\n");
	} else {
		/* Another user's link there: its owner can point it
		 * anywhere. */
		ck_assert_int_eq(lchown(link, 65534, 65534), 0);
		ck_assert_int_eq(journal_store_ops.open(via_link, &s, err,
							sizeof(err)), -ELOOP);
		ck_assert_msg(strstr(err, "link link on the way is owned by "
				     "uid 65534") != NULL, "%s", err);
		ck_assert_int_eq(journal_check(via_link, &rep, err,
					       sizeof(err)), -EPERM);
		ck_assert_msg(strstr(err, "on the way to it is owned by uid "
				     "65534") != NULL, "%s", err);
	}
	rm_rf(dir);
	free(dir);
}
END_TEST

/* Something other than a file where the journal should be is refused at
 * once, with a sentence: a FIFO would otherwise hold journal_check()'s
 * open() until some writer came along. */
START_TEST(test_a_journal_that_is_not_a_file_is_refused)
{
	char *dir = temp_dir();
	char path[256], err[512] = "";
	struct journal_report rep;
	void *st = NULL;

	snprintf(path, sizeof(path), "%s/journal", dir);
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	ck_assert_int_eq(journal_check(dir, &rep, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "not a regular file") != NULL, "%s", err);
	err[0] = '\0';
	ck_assert_int_eq(journal_store_ops.open(dir, &st, err, sizeof(err)),
			 -EINVAL);
	ck_assert_ptr_null(st);
	ck_assert_msg(strstr(err, "not a regular file") != NULL, "%s", err);
	rm_rf(dir);
	free(dir);
}
END_TEST

/*
 * The file grows in zeros written ahead and flushed. If that flush fails
 * (EIO), the kernel may report the lost write-back only once, to this
 * fsync(): the batch fails, and so does everything after it, as after a
 * failed commit. (It used to fail that batch alone and go on.)
 */
START_TEST(test_a_failed_flush_of_the_zeros_ahead_stops_the_journal)
{
	char *dir = temp_dir();
	struct ex a, b;
	void *st = open_journal(dir);	/* a new journal: its header only */

	make_ex(&a, 1, CARMY_STATUS_COMPLETED);
	make_ex(&b, 2, CARMY_STATUS_COMPLETED);
	__atomic_store_n(&fsync_fails, EIO, __ATOMIC_SEQ_CST);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &a), -EIO);
	/* It was the growth's fsync that failed, and nothing after it
	 * gets through. */
	ck_assert_int_eq(__atomic_load_n(&fsync_fails, __ATOMIC_SEQ_CST), 0);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &b), -EIO);
	journal_store_ops.close(st);
	rm_rf(dir);
	free(dir);
}
END_TEST

/*
 * Two batches in flight (CARMY_JOURNAL_FLIGHT=2): a's flush is held at the
 * gate, b's batch starts meanwhile and its flush returns first. Neither
 * is answered until a's flush returns: a then b, in file order, never b
 * before every record ahead of it is durable. b's record is numbered
 * after a's and names a's as the first not yet durable when it was
 * written (its batch field), which is what lets recovery drop it should
 * a be torn. With fail, a's flush fails: b fails too, although its own
 * flush went through (its record follows one that may not be on the
 * disk), and so does every later request.
 */
static void two_in_flight(bool fail)
{
	char *dir = temp_dir(), path[256];
	static struct waiter wa, wb;
	struct ex a, b, c;
	struct seen s = { 0 };
	struct jrec_head ha, hb;
	size_t len, off[3];
	uint8_t *buf;
	void *st;

	ck_assert_int_eq(setenv("CARMY_JOURNAL_FLIGHT", "2", 1), 0);
	st = open_journal(dir);
	ck_assert_int_eq(unsetenv("CARMY_JOURNAL_FLIGHT"), 0);
	make_ex(&a, 1, 0);
	make_ex(&b, 2, 0);
	make_ex(&c, 3, 0);
	gate_arm();
	/* MORE: to the writers, never written on this thread. */
	submit_async(st, &wa, CARMY_STORE_RESERVE, &a, CARMY_STORE_MORE);
	ck_assert(gate_until(&gate_held, 1));
	submit_async(st, &wb, CARMY_STORE_RESERVE, &b, CARMY_STORE_MORE);
	ck_assert(gate_until(&gate_passed, 1));
	ck_assert(!waiter_done(&wa));
	ck_assert(!waiter_done(&wb));
	gate_release(fail ? EIO : 0);
	ck_assert_int_eq(waiter_wait(&wa), fail ? -EIO : 0);
	ck_assert_int_eq(waiter_wait(&wb), fail ? -EIO : 0);
	ck_assert_uint_lt(wa.order, wb.order);
	if (fail)
		ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &c),
				 -EIO);
	journal_store_ops.close(st);
	snprintf(path, sizeof(path), "%s/journal", dir);
	buf = read_file(path, &len);
	ck_assert_int_eq(record_starts(buf, len, off, 2), 2);
	memcpy(&ha, buf + off[0], sizeof(ha));
	memcpy(&hb, buf + off[1], sizeof(hb));
	ck_assert_uint_eq(ha.jr_batch, ha.jr_seq);
	ck_assert_uint_eq(hb.jr_seq, ha.jr_seq + 1);
	ck_assert_uint_eq(hb.jr_batch, ha.jr_seq);
	free(buf);
	if (!fail) {
		st = open_journal(dir);
		ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
		journal_store_ops.close(st);
		ck_assert_int_ge(find(&s, a.id), 0);
		ck_assert_int_ge(find(&s, b.id), 0);
	}
	pthread_mutex_destroy(&wa.lock);
	pthread_cond_destroy(&wa.cond);
	pthread_mutex_destroy(&wb.lock);
	pthread_cond_destroy(&wb.cond);
	rm_rf(dir);
	free(dir);
}

START_TEST(test_a_later_batch_is_answered_only_after_the_one_before_it)
{
	two_in_flight(false);
}
END_TEST

START_TEST(test_a_failed_flush_fails_the_batch_in_flight_behind_it)
{
	two_in_flight(true);
}
END_TEST

/*
 * A disk that fills up while the file grows fails that batch alone, and
 * the zeros written before it ran out were never flushed: the next batch,
 * small enough to fit in them, must still grow the file (flushed) before
 * it writes there. Otherwise a crash before its fdatasync() can leave its
 * record past the end of a file whose new size never reached the disk,
 * and the journal would be refused as cut short.
 */
START_TEST(test_a_disk_full_while_growing_never_leaves_records_past_the_flushed_size)
{
	char *dir = temp_dir(), *crash = temp_dir();
	struct ex a, b;
	struct seen s = { 0 };
	void *st = open_journal(dir);	/* its header and 32 zeros */
	struct jnl *j = st;

	make_ex(&a, 1, CARMY_STATUS_COMPLETED);
	make_ex(&b, 2, CARMY_STATUS_COMPLETED);
	/* The first 64 KiB of zeros go out, then the disk is full. */
	__atomic_store_n(&enospc_from, j->size + 65536, __ATOMIC_SEQ_CST);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &a), -ENOSPC);
	__atomic_store_n(&enospc_from, UINT64_MAX, __ATOMIC_SEQ_CST);
	ck_assert_uint_le(j->size, fsynced_size);
	/* Room again; b's batch crashes before its flush. */
	__atomic_store_n(&crash_into, crash, __ATOMIC_SEQ_CST);
	ck_assert_int_eq(submit_wait(st, CARMY_STORE_RESERVE, &b), 0);
	ck_assert_ptr_null(__atomic_load_n(&crash_into, __ATOMIC_SEQ_CST));
	journal_store_ops.close(st);
	st = open_journal(crash);
	ck_assert_int_eq(journal_store_ops.load(st, collect, &s), 0);
	journal_store_ops.close(st);
	ck_assert_int_lt(find(&s, "req-001"), 0);
	/* Written before the flush: whole in the copy. */
	ck_assert_int_ge(find(&s, "req-002"), 0);
	rm_rf(crash);
	rm_rf(dir);
	free(crash);
	free(dir);
}
END_TEST

/*
 * A record head's check is CRC-32C, by the processor's instruction where
 * there is one: it must give what the table gives, byte for byte, for
 * every length and alignment (the journal's files are read on machines
 * with and without the instruction), and the standard check value.
 */
START_TEST(test_crc32c_by_instruction_is_the_table_s)
{
	uint8_t buf[300];
	uint64_t x = 0x9e3779b97f4a7c15ull;

	ck_assert_uint_eq(jnl_crc32c("123456789", 9), 0xe3069283u);
	ck_assert_uint_eq(jnl_crc32c_table("123456789", 9), 0xe3069283u);
	ck_assert_uint_eq(jnl_crc32c("", 0), 0);
	for (int round = 0; round < 2000; round++) {
		size_t at = (size_t)round % 8, n = (size_t)round % 280;

		for (size_t i = 0; i < sizeof(buf); i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			/* Some runs of zeros and of ones, as heads hold. */
			buf[i] = round % 3 == 0 ? 0 : round % 3 == 1 ?
				 (uint8_t)x : (uint8_t)(x & 0x81);
		}
		ck_assert_msg(jnl_crc32c(buf + at, n) ==
			      jnl_crc32c_table(buf + at, n),
			      "round %d: %zu bytes at %zu", round, n, at);
	}
}
END_TEST

START_TEST(test_not_a_journal_is_refused)
{
	char *dir = temp_dir();
	char err[512] = "";
	void *st = NULL;
	uint8_t junk[64];

	memset(junk, 'x', sizeof(junk));
	write_file(dir, junk, sizeof(junk));
	ck_assert_int_eq(journal_store_ops.open(dir, &st, err, sizeof(err)),
			 CARMY_ECORRUPT);
	ck_assert_ptr_null(st);
	write_file(dir, junk, 10);	/* shorter than a header */
	ck_assert_int_eq(journal_store_ops.open(dir, &st, err, sizeof(err)),
			 CARMY_ECORRUPT);
	ck_assert_int_eq(journal_store_ops.open("", &st, err, sizeof(err)),
			 -EINVAL);
	rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(test_second_opener_is_refused)
{
	char *dir = temp_dir();
	char err[512] = "";
	void *st = open_journal(dir), *st2 = NULL;

	ck_assert_int_eq(journal_store_ops.open(dir, &st2, err, sizeof(err)),
			 -EBUSY);
	ck_assert_ptr_null(st2);
	journal_store_ops.close(st);
	rm_rf(dir);
	free(dir);
}
END_TEST

/* A compaction's new file left behind by a crash is never read, and is as
 * big as the journal: the next open removes it (a directory of that name,
 * not the journal's to remove, stays). */
/*
 * A compaction starts only with room on the disk for its copy and 48 MB to
 * spare (the copy's own zeros ahead, and the old file growing meanwhile,
 * twice): the copy taken as twice the
 * needed records at the journal's mean record size, at most the journal.
 */
START_TEST(test_compaction_needs_room_for_its_copy)
{
	const uint64_t MB = 1u << 20, spare = 48 * MB;
	/* 100 MB of 1,000,000 records (105 bytes each, rounded up), 100,000
	 * needed: a copy of 21,000,000 bytes. */
	const uint64_t end = 100 * MB, nrec = 1000000, copy = 21000000;

	ck_assert(jnl_compaction_fits(copy + spare, end, nrec, 100000));
	ck_assert(!jnl_compaction_fits(copy + spare - 1, end, nrec, 100000));
	/* Most of it needed: never more than the journal itself. */
	ck_assert(jnl_compaction_fits(end + spare, end, nrec, 900000));
	ck_assert(!jnl_compaction_fits(end + spare - 1, end, nrec, 900000));
	/* Less than the spare alone, or nothing free: no. */
	ck_assert(!jnl_compaction_fits(spare - 1, 1000, 10, 0));
	ck_assert(!jnl_compaction_fits(0, 1000, 10, 1));
	ck_assert(jnl_compaction_fits(spare, 1000, 10, 0));
	/* Huge counts do not overflow into a yes. */
	ck_assert(!jnl_compaction_fits(spare + 1, UINT64_MAX / 2, 1,
				       UINT64_MAX / 4));
}
END_TEST

START_TEST(test_stale_compaction_file_is_removed_at_open)
{
	char *dir = temp_dir();
	char stale[256];
	struct stat sb;
	void *st = open_journal(dir);
	int fd;

	journal_store_ops.close(st);
	snprintf(stale, sizeof(stale), "%s/journal.new", dir);
	fd = open(stale, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "left behind", 11), 11);
	close(fd);
	st = open_journal(dir);
	ck_assert_int_eq(stat(stale, &sb), -1);
	ck_assert_int_eq(errno, ENOENT);
	journal_store_ops.close(st);
	rm_rf(dir);
	free(dir);
}
END_TEST

/* ------------------------------------------------------------ online */

/* What the compactor's hook saw, for a test to wait on; act, if set, is
 * the test's own step at each phase (n: compactions done before this
 * one). The hook runs on the compactor thread: problems are counted in
 * errors and asserted by the test's thread, not there. */
struct watch {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	void *st;
	int started, done, ok, failed, last_rc;
	int shrank;		/* compactions whose file ended up smaller */
	int errors;
	char error[256];
	bool main_done;		/* the test's thread submitted everything */
	void (*act)(struct watch *w, enum journal_compact_phase ph, int n);
	void *ctx;
};

static void watch_init(struct watch *w, void *st)
{
	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->st = st;
}

static void watch_destroy(struct watch *w)
{
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
}

static void watch_error(struct watch *w, const char *what, int rc)
{
	pthread_mutex_lock(&w->lock);
	if (w->errors++ == 0)
		snprintf(w->error, sizeof(w->error), "%s: %d", what, rc);
	pthread_mutex_unlock(&w->lock);
}

static void on_phase(void *arg, enum journal_compact_phase ph, int rc)
{
	struct watch *w = arg;
	struct journal_stats js;
	int n;

	pthread_mutex_lock(&w->lock);
	n = w->done;
	pthread_mutex_unlock(&w->lock);
	if (w->act != NULL)
		w->act(w, ph, n);
	journal_get_stats(w->st, &js);
	pthread_mutex_lock(&w->lock);
	if (ph == JOURNAL_COMPACT_SNAPSHOT) {
		w->started++;
		pthread_cond_broadcast(&w->cond);
	}
	if (ph == JOURNAL_COMPACT_DONE) {
		w->done++;
		if (rc == 0)
			w->ok++;
		else
			w->failed++;
		if (rc == 0 && js.last_new_end < js.last_old_end)
			w->shrank++;
		w->last_rc = rc;
		pthread_cond_broadcast(&w->cond);
	}
	pthread_mutex_unlock(&w->lock);
}

/* Wait, with a deadline, until *counter (a field of w) reaches n, or, with
 * counter NULL, until every compaction started has ended. */
static void watch_wait(struct watch *w, const int *counter, int n)
{
	struct timespec dl;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += WAIT_S;
	pthread_mutex_lock(&w->lock);
	while ((counter != NULL ? *counter < n : w->started != w->done) &&
	       rc == 0)
		rc = pthread_cond_timedwait(&w->cond, &w->lock, &dl);
	pthread_mutex_unlock(&w->lock);
	ck_assert_msg(rc == 0, "no compaction ended within %d s", WAIT_S);
}

/* Wait, with a deadline, until every compaction started has ended. */
static void watch_idle(struct watch *w)
{
	watch_wait(w, NULL, 0);
}

/* A copy of w's counters, to assert on without holding its lock. */
static struct watch watch_now(struct watch *w)
{
	struct watch now;

	pthread_mutex_lock(&w->lock);
	now = *w;
	pthread_mutex_unlock(&w->lock);
	return now;
}

/* The test's thread is done submitting (the hook may wait for that). */
static void watch_main_done(struct watch *w)
{
	pthread_mutex_lock(&w->lock);
	w->main_done = true;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static bool watch_wait_main(struct watch *w)
{
	struct timespec dl;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += WAIT_S;
	pthread_mutex_lock(&w->lock);
	while (!w->main_done && rc == 0)
		rc = pthread_cond_timedwait(&w->cond, &w->lock, &dl);
	pthread_mutex_unlock(&w->lock);
	return rc == 0;
}

/* Execution i, as make_ex() makes it and what it ends up as. */
static int ex_op(void *st, enum carmy_store_op op, int i)
{
	struct ex x;

	make_ex(&x, i, CARMY_STATUS_COMPLETED + i % 4);
	return submit_wait(st, op, &x);
}

/* load() must hand over exactly the executions want[i] says stand (by
 * index, 0..n-1: 0 gone, else their state), with their results. */
static void check_standing(const char *dir, const int *want, int n)
{
	struct seen *s = calloc(1, sizeof(*s));
	void *st = open_journal_as_is(dir);
	int standing = 0;

	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(journal_store_ops.load(st, collect, s), 0);
	journal_store_ops.close(st);
	for (int i = 0; i < n; i++) {
		struct ex x;
		int k;

		make_ex(&x, i, CARMY_STATUS_COMPLETED + i % 4);
		k = find(s, x.id);
		if (want[i] == 0) {
			ck_assert_msg(k < 0, "%s should be gone", x.id);
			continue;
		}
		standing++;
		ck_assert_msg(k >= 0, "%s is missing", x.id);
		ck_assert_mem_eq(s->e[k].exec, x.exec, 16);
		ck_assert_msg(s->e[k].state == want[i], "%s: state %d, not %d",
			      x.id, s->e[k].state, want[i]);
		if (want[i] == CARMY_STORE_COMPLETED) {
			ck_assert_int_eq(s->e[k].status, x.status);
			ck_assert_str_eq(s->e[k].result, x.result);
		}
	}
	ck_assert_int_eq(s->n, standing);
	free(s);
}

static ino_t inode_of(const char *dir)
{
	char path[256];
	struct stat sb;

	snprintf(path, sizeof(path), "%s/journal", dir);
	ck_assert_int_eq(stat(path, &sb), 0);
	return sb.st_ino;
}

/* Execution i's fate in the mixed workloads: released, completed then
 * purged, completed, or left running. */
static int mix_op(void *st, int i, int *want)
{
	int rc = ex_op(st, CARMY_STORE_RESERVE, i);

	want[i] = CARMY_STORE_RUNNING;
	switch (i % 4) {
	case 0:
		if (rc == 0)
			rc = ex_op(st, CARMY_STORE_RELEASE, i);
		want[i] = 0;
		break;
	case 1:
		if (rc == 0)
			rc = ex_op(st, CARMY_STORE_COMPLETE, i);
		if (rc == 0)
			rc = ex_op(st, CARMY_STORE_PURGE, i);
		want[i] = 0;
		break;
	case 2:
		if (rc == 0)
			rc = ex_op(st, CARMY_STORE_COMPLETE, i);
		want[i] = CARMY_STORE_COMPLETED;
		break;
	}
	return rc;
}

#define MIX_THREADS 4
#define MIX_PER_THREAD 200

struct mixer {
	void *st;
	int base, n;
	int *want;
};

static void *mix_thread(void *arg)
{
	struct mixer *m = arg;

	for (int i = m->base; i < m->base + m->n; i++)
		if (mix_op(m->st, i, m->want) != 0)
			return (void *)1;
	return NULL;
}

/*
 * Under a low threshold, a journal that several threads keep reserving,
 * completing, releasing and purging into rewrites itself while open:
 * every request is acknowledged meanwhile, the file ends up smaller than
 * what was written, and a reopen finds exactly what stands.
 */
START_TEST(test_journal_compacts_itself_while_open)
{
	static int want[MIX_THREADS * MIX_PER_THREAD];
	char *dir = temp_dir();
	struct mixer m[MIX_THREADS];
	pthread_t t[MIX_THREADS];
	struct journal_stats js;
	struct watch w, now;
	void *st = open_journal_min(dir, 200);
	uint64_t written = 0;

	watch_init(&w, st);
	journal_set_compact_hook(st, on_phase, &w);
	for (int i = 0; i < MIX_THREADS; i++) {
		m[i] = (struct mixer){ st, i * MIX_PER_THREAD, MIX_PER_THREAD,
				       want };
		ck_assert_int_eq(pthread_create(&t[i], NULL, mix_thread,
						&m[i]), 0);
	}
	for (int i = 0; i < MIX_THREADS; i++) {
		void *ret;

		ck_assert_int_eq(pthread_join(t[i], &ret), 0);
		ck_assert_msg(ret == NULL, "a request failed");
	}
	/* 2 records an execution on average: 1600 went in, far past the
	 * threshold with at most 600 needed, so compactions ran
	 * meanwhile. */
	watch_wait(&w, &w.ok, 1);
	journal_get_stats(st, &js);
	for (int i = 0; i < MIX_THREADS * MIX_PER_THREAD; i++)
		written += (uint64_t)(i % 4 == 0 ? 2 : i % 4 == 1 ? 3 :
				      i % 4 == 2 ? 2 : 1);
	fprintf(stderr, "# %llu compactions, %llu given up, %llu records "
		"in the file of %llu written; last pause %.2f ms for %llu "
		"bytes\n", (unsigned long long)js.compactions,
		(unsigned long long)js.compact_failures,
		(unsigned long long)js.records, (unsigned long long)written,
		(double)js.last_pause_ns / 1e6,
		(unsigned long long)js.last_pause_bytes);
	ck_assert_uint_ge(js.compactions, 1);
	ck_assert_uint_eq(js.compact_failures, 0);
	ck_assert_uint_lt(js.records, written);
	now = watch_now(&w);
	/* Each one left a file smaller than the one it replaced. */
	ck_assert_int_eq(now.shrank, now.ok);
	journal_store_ops.close(st);
	watch_destroy(&w);
	check_standing(dir, want, MIX_THREADS * MIX_PER_THREAD);
	rm_rf(dir);
	free(dir);
}
END_TEST

/* Copy dir's journal files into crash, as a crash at this moment would
 * leave them (both: journal.new is left over too). */
static int copy_file(const char *from, const char *to)
{
	char buf[65536];
	int in = open(from, O_RDONLY), out;
	ssize_t n = 0;

	if (in < 0)
		return -1;
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	while (out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n)
			n = -1;
	close(in);
	if (out >= 0)
		close(out);
	return out < 0 || n < 0 ? -1 : 0;
}

static int crash_copy(const char *dir, const char *crash)
{
	char from[256], to[256];

	snprintf(from, sizeof(from), "%s/journal", dir);
	snprintf(to, sizeof(to), "%s/journal", crash);
	if (copy_file(from, to) != 0)
		return -1;
	snprintf(from, sizeof(from), "%s/journal.new", dir);
	snprintf(to, sizeof(to), "%s/journal.new", crash);
	return copy_file(from, to);
}

/* Indices of the executions in the next test. */
#define A0 0			/* 0..9: completed before the snapshot */
#define R0 10			/* 10, 11: running before it */
#define H0 100			/* 100..139: history that triggers it */
#define S0 200			/* 200..203: submitted during it */
#define T0 1000			/* 1000..1399: by threads during it */
#define T_PER 100
#define DURING_N 1400

/* History: executions from..to-1 (H0 and up) reserved and released, two
 * records each that nothing needs. */
static void history(void *st, int from, int to)
{
	for (int i = from; i < to; i++) {
		ck_assert_int_eq(ex_op(st, CARMY_STORE_RESERVE, i), 0);
		ck_assert_int_eq(ex_op(st, CARMY_STORE_RELEASE, i), 0);
	}
}

/* 22 records that stand (10 completed, 2 running), then 80 of history:
 * with a threshold of 100, the 101st record starts one compaction (more
 * than 100, more than twice 22). */
static void stand_then_history(void *st, int *want)
{
	for (int i = A0; i < A0 + 10; i++) {
		ck_assert_int_eq(ex_op(st, CARMY_STORE_RESERVE, i), 0);
		ck_assert_int_eq(ex_op(st, CARMY_STORE_COMPLETE, i), 0);
		want[i] = CARMY_STORE_COMPLETED;
	}
	for (int i = R0; i < R0 + 2; i++) {
		ck_assert_int_eq(ex_op(st, CARMY_STORE_RESERVE, i), 0);
		want[i] = CARMY_STORE_RUNNING;
	}
	history(st, H0, H0 + 40);
}

struct during {
	const char *dir, *crash;
	int *want;
};

static void *during_thread(void *arg)
{
	struct mixer *m = arg;

	/* Half stand completed, half are released: about 80 KB. */
	for (int i = m->base; i < m->base + m->n; i++) {
		int rc = ex_op(m->st, CARMY_STORE_RESERVE, i);

		if (rc == 0)
			rc = ex_op(m->st, i % 2 ? CARMY_STORE_RELEASE :
					      CARMY_STORE_COMPLETE, i);
		if (rc != 0)
			return (void *)1;
		m->want[i] = i % 2 ? 0 : CARMY_STORE_COMPLETED;
	}
	return NULL;
}

/* Four threads committing T0..T0 + 4 * T_PER at once (about 80 KB, more
 * than a catch-up round's minimum); 0, or why one failed. */
static int during_threads(void *st, int *want)
{
	struct mixer m[4];
	pthread_t t[4];
	int started = 0, rc = 0;

	for (int i = 0; i < 4; i++) {
		m[i] = (struct mixer){ st, T0 + i * T_PER, T_PER, want };
		if (pthread_create(&t[i], NULL, during_thread, &m[i]) != 0) {
			rc = -EAGAIN;
			break;
		}
		started++;
	}
	for (int i = 0; i < started; i++) {
		void *ret = NULL;

		pthread_join(t[i], &ret);
		if (ret != NULL)
			rc = -EIO;
	}
	return rc;
}

/* The first compaction's phases: records go in at each one. */
static void during_act(struct watch *w, enum journal_compact_phase ph, int n)
{
	struct during *d = w->ctx;
	int *want = d->want;
	int rc = 0;

	if (n != 0)
		return;
	switch (ph) {
	case JOURNAL_COMPACT_SNAPSHOT:
		/* After the snapshot: a new one completed, one that stood
		 * released, one that stood purged, one reserved. */
		if (!watch_wait_main(w))
			rc = -ETIMEDOUT;
		if (rc == 0)
			rc = ex_op(w->st, CARMY_STORE_RESERVE, S0);
		if (rc == 0)
			rc = ex_op(w->st, CARMY_STORE_COMPLETE, S0);
		if (rc == 0)
			rc = ex_op(w->st, CARMY_STORE_RELEASE, R0);
		if (rc == 0)
			rc = ex_op(w->st, CARMY_STORE_PURGE, A0);
		if (rc == 0)
			rc = ex_op(w->st, CARMY_STORE_RESERVE, S0 + 1);
		want[S0] = CARMY_STORE_COMPLETED;
		want[R0] = want[A0] = 0;
		want[S0 + 1] = CARMY_STORE_RUNNING;
		break;
	case JOURNAL_COMPACT_REWRITTEN:
		/* Written: several threads at once, more than a catch-up
		 * round's minimum, so these are copied without a pause. */
		rc = during_threads(w->st, want);
		break;
	case JOURNAL_COMPACT_SWITCHING:
		/* Last: these few are copied while commits wait. */
		rc = ex_op(w->st, CARMY_STORE_COMPLETE, S0 + 1);
		if (rc == 0)
			rc = ex_op(w->st, CARMY_STORE_RESERVE, S0 + 2);
		if (rc == 0)
			rc = ex_op(w->st, CARMY_STORE_RELEASE, S0 + 2);
		if (rc == 0)
			rc = ex_op(w->st, CARMY_STORE_RESERVE, S0 + 3);
		want[S0 + 1] = CARMY_STORE_COMPLETED;
		want[S0 + 2] = 0;
		want[S0 + 3] = CARMY_STORE_RUNNING;
		/* A crash now leaves the old journal, with all of it. */
		if (rc == 0 && crash_copy(d->dir, d->crash) != 0)
			rc = -EIO;
		break;
	default:
		break;
	}
	if (rc != 0)
		watch_error(w, "a request during compaction", rc);
}

/*
 * Records submitted after the snapshot, during the rewrite (from several
 * threads), during the catch-up and right before the switch are all in
 * the new journal, with what they did to executions of the snapshot; the
 * last few were copied while commits waited, the rest without a pause. A
 * crash right before the switch leaves the old journal, whole.
 */
START_TEST(test_records_committed_during_compaction_are_in_the_new_journal)
{
	static int want[DURING_N];
	char *dir = temp_dir(), *crash = temp_dir();
	struct during d = { dir, crash, want };
	struct journal_stats js;
	struct watch w, now;
	void *st = open_journal_min(dir, 100);
	ino_t ino = inode_of(dir);

	memset(want, 0, sizeof(want));
	watch_init(&w, st);
	w.act = during_act;
	w.ctx = &d;
	journal_set_compact_hook(st, on_phase, &w);
	stand_then_history(st, want);
	watch_main_done(&w);
	watch_wait(&w, &w.done, 1);
	now = watch_now(&w);
	ck_assert_msg(now.errors == 0, "%s", now.error);
	ck_assert_int_eq(now.ok, 1);
	journal_get_stats(st, &js);
	fprintf(stderr, "# pause %.2f ms for %llu bytes; %llu records\n",
		(double)js.last_pause_ns / 1e6,
		(unsigned long long)js.last_pause_bytes,
		(unsigned long long)js.records);
	ck_assert_uint_eq(js.compactions, 1);
	/* The switch copied the last few records only. */
	ck_assert_uint_gt(js.last_pause_bytes, 0);
	ck_assert_uint_lt(js.last_pause_bytes, CATCHUP_MIN);
	ck_assert_uint_ne(inode_of(dir), ino);	/* one compaction: a new file */
	/* The new journal takes commits too. */
	ck_assert_int_eq(ex_op(st, CARMY_STORE_COMPLETE, S0 + 3), 0);
	journal_store_ops.close(st);
	watch_destroy(&w);

	/* The crash copy: the old journal, with everything acknowledged
	 * up to the switch (journal.new left over is ignored). */
	check_standing(crash, want, DURING_N);
	want[S0 + 3] = CARMY_STORE_COMPLETED;
	check_standing(dir, want, DURING_N);
	rm_rf(dir);
	rm_rf(crash);
	free(dir);
	free(crash);
}
END_TEST

/* The failing test's first compaction: records go in after its snapshot,
 * before it fails, so the index must take them from the file. */
static void fail_act(struct watch *w, enum journal_compact_phase ph, int n)
{
	int *want = w->ctx;
	int rc = 0;

	if (n != 0 || ph != JOURNAL_COMPACT_SNAPSHOT)
		return;
	if (!watch_wait_main(w))
		rc = -ETIMEDOUT;
	if (rc == 0)
		rc = ex_op(w->st, CARMY_STORE_RELEASE, R0);
	if (rc == 0)
		rc = ex_op(w->st, CARMY_STORE_COMPLETE, R0 + 1);
	if (rc == 0)
		rc = ex_op(w->st, CARMY_STORE_RESERVE, S0);
	if (rc == 0)
		rc = ex_op(w->st, CARMY_STORE_COMPLETE, S0);
	if (rc == 0)
		rc = ex_op(w->st, CARMY_STORE_PURGE, A0);
	want[R0] = want[A0] = 0;
	want[R0 + 1] = want[S0] = CARMY_STORE_COMPLETED;
	if (rc != 0)
		watch_error(w, "a request during compaction", rc);
}

/* The bounded failure test's first compaction: at its snapshot, before
 * it fails, several threads commit more than a catch-up round's minimum,
 * which the journal's index must take from the file. */
static uint64_t fail_big_bytes;	/* what fail_big_act() committed */

static void fail_big_act(struct watch *w, enum journal_compact_phase ph, int n)
{
	struct journal_stats js0, js1;
	int rc = 0;

	if (n != 0 || ph != JOURNAL_COMPACT_SNAPSHOT)
		return;
	if (!watch_wait_main(w))
		rc = -ETIMEDOUT;
	journal_get_stats(w->st, &js0);
	if (rc == 0)
		rc = during_threads(w->st, w->ctx);
	journal_get_stats(w->st, &js1);
	fail_big_bytes = js1.end - js0.end;
	if (rc != 0)
		watch_error(w, "a request during compaction", rc);
}

/* A journal whose compactions fail until blocker (DIR/journal.new, made
 * a directory) is removed, with w watching them and act run at each
 * phase; 22 records stand and 80 of history start the first one, which
 * has ended (failed) on return. *ino: the journal's inode before it. */
static void *open_failing(const char *dir, char *blocker, size_t len,
			  struct watch *w,
			  void (*act)(struct watch *, enum journal_compact_phase,
				      int),
			  int *want, ino_t *ino)
{
	void *st = open_journal_min(dir, 100);

	*ino = inode_of(dir);
	snprintf(blocker, len, "%s/journal.new", dir);
	ck_assert_int_eq(mkdir(blocker, 0700), 0);
	watch_init(w, st);
	w->act = act;
	w->ctx = want;
	journal_set_compact_hook(st, on_phase, w);
	stand_then_history(st, want);
	watch_main_done(w);
	watch_wait(w, &w->done, 1);
	return st;
}

/*
 * A compaction that cannot create journal.new (a directory has its name)
 * gives up: the store keeps working on the old journal, whole. Once it
 * can, the next compaction keeps what was committed around the failed
 * one, and a reopen finds every record.
 */
START_TEST(test_failed_compaction_keeps_the_journal)
{
	static int want[H0 + 260];
	char *dir = temp_dir();
	char blocker[256];
	struct journal_stats js;
	struct watch w, now;
	void *st;
	ino_t ino;

	memset(want, 0, sizeof(want));
	st = open_failing(dir, blocker, sizeof(blocker), &w, fail_act, want,
			  &ino);
	now = watch_now(&w);
	ck_assert_msg(now.errors == 0, "%s", now.error);
	ck_assert_int_eq(now.failed, 1);
	ck_assert_int_eq(now.last_rc, -EISDIR);
	ck_assert_uint_eq(inode_of(dir), ino);
	/* Still working, on the same file: more history, and no second
	 * try before the journal has doubled. */
	history(st, H0 + 40, H0 + 60);
	journal_get_stats(st, &js);
	ck_assert_uint_eq(js.compactions + js.compact_failures, 1);
	/* Now it can: the next one (once doubled) succeeds. */
	ck_assert_int_eq(rmdir(blocker), 0);
	history(st, H0 + 60, H0 + 200);
	/* (Not the inode: after two compactions it may be the first's.) */
	watch_wait(&w, &w.ok, 1);
	journal_get_stats(st, &js);
	ck_assert_uint_ge(js.compactions, 1);
	/* A success ends the back-off: the next compaction comes by the
	 * usual rule (more than 100 records, more than twice the 22 that
	 * stand), not once the journal holds twice what it held at the
	 * failure (202 records). */
	watch_idle(&w);
	{
		int started0 = watch_now(&w).started, i = H0 + 200;

		journal_get_stats(st, &js);
		while (js.records <= 110 && watch_now(&w).started == started0) {
			ck_assert_int_lt(i, H0 + 260);
			ck_assert_int_eq(ex_op(st, CARMY_STORE_RESERVE, i), 0);
			ck_assert_int_eq(ex_op(st, CARMY_STORE_RELEASE, i), 0);
			i++;
			journal_get_stats(st, &js);
		}
		watch_wait(&w, &w.started, started0 + 1);
	}
	watch_idle(&w);
	journal_store_ops.close(st);
	watch_destroy(&w);
	check_standing(dir, want, H0 + 260);
	rm_rf(dir);
	free(dir);
}
END_TEST

/*
 * A compaction that fails after more than a catch-up round's worth was
 * committed during it: commits wait only while the journal's index takes
 * the last round's records, not all of them (as the switch of a compaction
 * that succeeds). The index is right: the next compaction, once it can,
 * keeps every execution that stands, and a reopen finds them.
 */
START_TEST(test_failed_compaction_pauses_commits_for_the_last_records_only)
{
	static int want[DURING_N + 600];
	char *dir = temp_dir();
	char blocker[256];
	struct journal_stats js;
	struct watch w, now;
	void *st;
	ino_t ino;

	memset(want, 0, sizeof(want));
	st = open_failing(dir, blocker, sizeof(blocker), &w, fail_big_act,
			  want, &ino);
	now = watch_now(&w);
	ck_assert_msg(now.errors == 0, "%s", now.error);
	ck_assert_int_eq(now.failed, 1);
	journal_get_stats(st, &js);
	fprintf(stderr, "# failed after %llu bytes committed during it: pause "
		"%.2f ms for %llu bytes indexed\n",
		(unsigned long long)fail_big_bytes,
		(double)js.last_pause_ns / 1e6,
		(unsigned long long)js.last_pause_bytes);
	ck_assert_uint_eq(js.compact_failures, 1);
	/* More than a round's minimum came in: the rounds had work. */
	ck_assert_uint_gt(fail_big_bytes, CATCHUP_MIN);
	ck_assert_uint_lt(js.last_pause_bytes, CATCHUP_MIN);
	ck_assert_uint_eq(inode_of(dir), ino);
	/* Once it can, and the journal has doubled, the next one works
	 * from that index. */
	ck_assert_int_eq(rmdir(blocker), 0);
	history(st, DURING_N, DURING_N + 600);
	watch_wait(&w, &w.ok, 1);
	watch_idle(&w);
	journal_store_ops.close(st);
	watch_destroy(&w);
	check_standing(dir, want, DURING_N + 600);
	rm_rf(dir);
	free(dir);
}
END_TEST

/* The same failure, then a reopen with the directory still in the way:
 * the compaction at start fails too, and nothing is lost either way. */
START_TEST(test_failed_compaction_loses_no_record_after_reopen)
{
	static int want[H0 + 100];
	char *dir = temp_dir();
	char blocker[256];
	struct watch w;
	void *st = open_journal_min(dir, 100);
	ino_t ino = inode_of(dir);

	memset(want, 0, sizeof(want));
	snprintf(blocker, sizeof(blocker), "%s/journal.new", dir);
	ck_assert_int_eq(mkdir(blocker, 0700), 0);
	watch_init(&w, st);
	journal_set_compact_hook(st, on_phase, &w);
	for (int i = 0; i < 60; i++)
		ck_assert_int_eq(mix_op(st, i, want), 0);
	for (int i = H0; i < H0 + 60; i++) {
		ck_assert_int_eq(ex_op(st, CARMY_STORE_RESERVE, i), 0);
		ck_assert_int_eq(ex_op(st, CARMY_STORE_RELEASE, i), 0);
	}
	watch_wait(&w, &w.failed, 1);
	journal_store_ops.close(st);
	watch_destroy(&w);
	st = open_journal_min(dir, 100);	/* fails to compact: warns */
	journal_store_ops.close(st);
	ck_assert_uint_eq(inode_of(dir), ino);
	check_standing(dir, want, H0 + 100);
	ck_assert_int_eq(rmdir(blocker), 0);
	st = open_journal_min(dir, 100);	/* compacts at start */
	journal_store_ops.close(st);
	ck_assert_uint_ne(inode_of(dir), ino);
	check_standing(dir, want, H0 + 100);
	rm_rf(dir);
	free(dir);
}
END_TEST

/* ------------------------------------------------- torn batches, flips */

/* A random sample's seed: CARMY_TEST_SEED, or the time and the pid. The
 * test prints it, so that a failure can be run again. */
static uint64_t test_seed(void)
{
	const char *v = getenv("CARMY_TEST_SEED");

	if (v != NULL && *v != '\0')
		return strtoull(v, NULL, 0);
	return (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
}

/* xorshift64*: the same sample from the same seed, whatever else calls
 * rand(). */
static uint64_t next_rand(uint64_t *s)
{
	if (*s == 0)
		*s = 0x9e3779b97f4a7c15ull;
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

/* How many of a random sample to take: n natively, n / 8 under a
 * sanitiser or valgrind (several times slower there), or CARMY_TRIALS. */
static unsigned trials(unsigned n)
{
	const char *v = getenv("CARMY_TRIALS");
	bool slow = on_valgrind();

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	slow = true;
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
	slow = true;
#endif
#endif
	if (v != NULL && *v != '\0')
		return (unsigned)strtoul(v, NULL, 10);
	return slow ? n / 8 : n;
}

/*
 * A journal whose last batch, never acknowledged, holds several records,
 * written as commit() writes one: every record sealed by jnl_rec_put()
 * for its offset, numbered on from the acknowledged ones, all with the
 * first one's number as their batch. The acknowledged part is build()'s,
 * a batch per record. The batch: RESERVE t0, COMPLETE t0, RESERVE t1,
 * RESERVE t2, COMPLETE t2, RELEASE t1, RESERVE t3, COMPLETE t3, with
 * results of dense bytes (no piece of any record is light), about ten
 * sectors. Unless later is TB_ALONE, a RESERVE of t4 follows, a good record
 * of the next batch: written once the torn one was flushed (TB_AFTER: its
 * batch field is its own number), or while it was still in flight
 * (TB_BESIDE: its batch field is the torn batch's first, the first record
 * not yet durable then).
 */
#define TB_ACK 10		/* build()'s executions */
#define TB_RECS 8		/* records in the torn batch */
#define TB_EXECS 4
enum { TB_ALONE, TB_AFTER, TB_BESIDE };

struct torn_batch {
	struct ex xs[TB_ACK];
	struct ex t[TB_EXECS + 1];
	uint8_t *orig;		/* the file, every sector of the batch written */
	size_t len;		/* its bytes: to 2 sectors past the batch */
	int ack;		/* acknowledged records */
	size_t off[TB_RECS + 2];	/* the batch's records, its end, and
					 * the later record's end */
	size_t first_sec, nsec;	/* the sectors the batch writes into */
};

/* Each of the batch's executions: its RESERVE, the record that settles it
 * and how (0: released). */
static const int tb_plan[TB_EXECS][3] = {
	{ 0, 1, CARMY_STORE_COMPLETED }, { 2, 5, 0 },
	{ 3, 4, CARMY_STORE_COMPLETED }, { 6, 7, CARMY_STORE_COMPLETED },
};
static const size_t tb_result_len[TB_EXECS] = { 1300, 0, 600, 1700 };
static uint8_t tb_result[TB_EXECS][1700];

static void tb_build(struct torn_batch *tb, const char *dir, int later)
{
	static const int ops[TB_RECS + 1][2] = {
		{ CARMY_STORE_RESERVE, 0 }, { CARMY_STORE_COMPLETE, 0 },
		{ CARMY_STORE_RESERVE, 1 }, { CARMY_STORE_RESERVE, 2 },
		{ CARMY_STORE_COMPLETE, 2 }, { CARMY_STORE_RELEASE, 1 },
		{ CARMY_STORE_RESERVE, 3 }, { CARMY_STORE_COMPLETE, 3 },
		{ CARMY_STORE_RESERVE, 4 },
	};
	char path[256];
	struct jnl *j;
	uint64_t salt, seq, first;
	size_t flen, at;
	void *st;

	memset(tb, 0, sizeof(*tb));
	build(dir, tb->xs, TB_ACK);
	st = open_journal_as_is(dir);
	j = st;
	salt = j->salt;
	seq = j->seq;
	at = (size_t)j->end;
	tb->ack = (int)j->nrec;
	journal_store_ops.close(st);
	snprintf(path, sizeof(path), "%s/journal", dir);
	tb->orig = read_file(path, &flen);
	for (int e = 0; e < TB_EXECS; e++)
		for (size_t k = 0; k < tb_result_len[e]; k++)
			tb_result[e][k] = (uint8_t)((k * 37 + (size_t)e * 11 +
						      0x5b) | 0x81);
	for (int e = 0; e <= TB_EXECS; e++) {
		make_ex(&tb->t[e], 100 + e, CARMY_STATUS_COMPLETED);
		tb->t[e].state = e < TB_EXECS ? tb_plan[e][2] :
						CARMY_STORE_RUNNING;
	}
	first = seq + 1;
	for (int i = 0; i < TB_RECS + (later != TB_ALONE); i++) {
		struct carmy_store_record rec;
		struct carmy_store_req req = { .op = ops[i][0], .rec = &rec };
		int e = ops[i][1];
		size_t n;

		record_of(&tb->t[e], &rec);
		if (e < TB_EXECS) {
			rec.result = (const char *)tb_result[e];
			rec.result_len = (uint32_t)tb_result_len[e];
		}
		n = jnl_rec_size(&req);
		ck_assert_uint_le(at + n + 3 * SECTOR, flen);
		tb->off[i] = at;
		/* The later record is a batch of its own, after this one. */
		jnl_rec_put(&req, seq + 1 + (uint64_t)i,
			    i < TB_RECS || later == TB_BESIDE ? first :
			    seq + 1 + (uint64_t)i, salt, at, tb->orig + at, n);
		at += n;
	}
	tb->off[TB_RECS + (later != TB_ALONE)] = at;
	if (later == TB_ALONE)
		tb->off[TB_RECS + 1] = at;
	tb->len = (at / SECTOR + 2) * SECTOR;
	tb->first_sec = tb->off[0] / SECTOR;
	tb->nsec = (tb->off[TB_RECS] - 1) / SECTOR + 1 - tb->first_sec;
	ck_assert_uint_le(tb->nsec, 63);
	ck_assert_uint_ge(tb->nsec, 8);
}

/* copy: the file as a crash leaves it when the batch's sectors in
 * missing (bit i: the batch's i-th sector) never reached the disk: the
 * batch's bytes there are the zeros the file grew with, what was there
 * before it (the acknowledged records' end) is not. */
static void tb_tear(const struct torn_batch *tb, uint8_t *copy,
		    uint64_t missing)
{
	memcpy(copy, tb->orig, tb->len);
	for (size_t i = 0; i < tb->nsec; i++) {
		size_t lo = (tb->first_sec + i) * SECTOR, hi = lo + SECTOR;

		if (!(missing & (UINT64_C(1) << i)))
			continue;
		if (lo < tb->off[0])
			lo = tb->off[0];
		if (hi > tb->off[TB_RECS])
			hi = tb->off[TB_RECS];
		memset(copy + lo, 0, hi - lo);
	}
}

/* The batch's records recovery must keep: those before the first one a
 * tear changed (copy); the rest are torn, and go. */
static int tb_kept(const struct torn_batch *tb, const uint8_t *copy)
{
	int m = 0;

	while (m < TB_RECS &&
	       memcmp(copy + tb->off[m], tb->orig + tb->off[m],
		      tb->off[m + 1] - tb->off[m]) == 0)
		m++;
	return m;
}

/* The journal in dir (copy, torn as what): journal_check() and open()
 * accept it, every acknowledged execution stands as built, each of the
 * batch's executions as its first kept records (of its first m) say, and
 * nothing else; after open() the file is its good records, then zeros to
 * its end. */
static void tb_recovers(const struct torn_batch *tb, const char *dir,
			const uint8_t *copy, int m, const char *what,
			uint64_t missing)
{
	char path[256], err[512] = "";
	struct journal_report rep;
	static struct seen s;
	uint8_t *after;
	size_t len2, z;
	int standing = 0;
	void *st;

	memset(&s, 0, sizeof(s));
	write_file(dir, copy, tb->len);
	ck_assert_msg(journal_check(dir, &rep, err, sizeof(err)) == 0,
		      "%s, sectors %#llx missing: %s", what,
		      (unsigned long long)missing, err);
	ck_assert_uint_eq(rep.records, (uint64_t)(tb->ack + m));
	ck_assert_uint_eq(rep.end, tb->off[m]);
	/* Torn: from the good records' end to the last byte set. */
	for (z = tb->len; z > tb->off[m] && copy[z - 1] == 0; z--)
		;
	ck_assert_msg(rep.torn == z - tb->off[m],
		      "%s, sectors %#llx missing: %d kept, %llu torn, not %zu",
		      what, (unsigned long long)missing, m,
		      (unsigned long long)rep.torn, z - tb->off[m]);
	st = open_journal_as_is(dir);
	ck_assert_int_eq(journal_store_ops.load(st, collect_long, &s), 0);
	journal_store_ops.close(st);
	check_prefix(&s, tb->xs, TB_ACK, tb->ack, what, (size_t)missing);
	for (int i = 0; i < TB_ACK; i++)
		standing += tb->xs[i].state != 0;
	for (int e = 0; e < TB_EXECS; e++) {
		int k = find(&s, tb->t[e].id);
		int want = 0;

		if (m > tb_plan[e][1])
			want = tb_plan[e][2];
		else if (m > tb_plan[e][0])
			want = CARMY_STORE_RUNNING;
		if (want == 0) {
			ck_assert_msg(k < 0, "%s, sectors %#llx missing, %d "
				      "kept: %s stands", what,
				      (unsigned long long)missing, m,
				      tb->t[e].id);
			continue;
		}
		ck_assert_msg(k >= 0, "%s, sectors %#llx missing, %d kept: %s "
			      "is missing", what, (unsigned long long)missing,
			      m, tb->t[e].id);
		ck_assert_int_eq(s.e[k].state, want);
		ck_assert_mem_eq(s.e[k].exec, tb->t[e].exec, 16);
		if (want == CARMY_STORE_COMPLETED) {
			ck_assert_uint_eq(s.e[k].result_len, tb_result_len[e]);
			ck_assert_uint_eq(s.e[k].result_sum,
					  XXH3_64bits(tb_result[e],
						      tb_result_len[e]));
		}
		standing++;
	}
	ck_assert_int_eq(s.n, standing);
	snprintf(path, sizeof(path), "%s/journal", dir);
	after = read_file(path, &len2);
	ck_assert_uint_eq(len2, tb->len);
	ck_assert_int_eq(memcmp(after, tb->orig, tb->off[m]), 0);
	for (z = tb->off[m]; z < len2 && after[z] == 0; z++)
		;
	ck_assert_msg(z == len2, "%s, sectors %#llx missing: byte %zu not "
		      "zeroed (good records end at %zu)", what,
		      (unsigned long long)missing, z, tb->off[m]);
	free(after);
}

/* A torn batch test's end: its copy, its file and both directories. */
static void tb_done(struct torn_batch *tb, uint8_t *copy, char *dir,
		    char *cut)
{
	free(copy);
	free(tb->orig);
	rm_rf(dir);
	rm_rf(cut);
	free(dir);
	free(cut);
}

/* Which sectors of the batch a trial leaves unwritten: each one alone
 * first, then a random sample of any of them. */
static uint64_t tb_missing(const struct torn_batch *tb, unsigned trial,
			   uint64_t *rs)
{
	uint64_t all = (UINT64_C(1) << tb->nsec) - 1, m;

	if (trial < tb->nsec)
		return UINT64_C(1) << trial;
	do
		m = next_rand(rs) & all;
	while (m == 0);
	return m;
}

/*
 * A crash while the last batch, several records, was written leaves any
 * of its sectors unwritten, in any order. For each sector missing alone,
 * and a random sample of sets of them: the journal opens, every
 * acknowledged execution is there, and of the batch exactly the records
 * before the first one the tear reached stand (a record is whole and read,
 * or gone: never half applied), even where later records of the batch
 * reached the disk whole; the rest is zeroed, and the file keeps its size.
 */
START_TEST(test_a_multi_record_batch_torn_in_any_order_recovers_a_clean_prefix)
{
	char *dir = temp_dir(), *cut = temp_dir();
	static struct torn_batch tb;
	uint64_t seed = test_seed(), rs = seed;
	unsigned n, kept[TB_RECS + 1] = { 0 };
	uint8_t *copy;

	tb_build(&tb, dir, TB_ALONE);
	n = (unsigned)tb.nsec + trials(240);
	fprintf(stderr, "# torn batch: %d records at %zu..%zu, %zu sectors; "
		"%u trials, seed %llu\n", TB_RECS, tb.off[0], tb.off[TB_RECS],
		tb.nsec, n, (unsigned long long)seed);
	copy = malloc(tb.len);
	ck_assert_ptr_nonnull(copy);
	/* Every sector written: all of it stands. */
	tb_tear(&tb, copy, 0);
	tb_recovers(&tb, cut, copy, TB_RECS, "whole", 0);
	for (unsigned trial = 0; trial < n; trial++) {
		uint64_t missing = tb_missing(&tb, trial, &rs);
		int m;

		tb_tear(&tb, copy, missing);
		m = tb_kept(&tb, copy);
		kept[m]++;
		tb_recovers(&tb, cut, copy, m, "torn", missing);
	}
	/* The sample reached the batch's first, middle and last records. */
	ck_assert_uint_gt(kept[0], 0);
	ck_assert_uint_gt(kept[TB_RECS / 2] + kept[TB_RECS / 2 + 1], 0);
	ck_assert_uint_gt(kept[TB_RECS - 1], 0);
	tb_done(&tb, copy, dir, cut);
}
END_TEST

/*
 * The same torn batch, but a good record of a later batch follows it,
 * written once the torn one was durable (its batch field says so): the
 * torn one may have been acknowledged after all. Refused, naming the
 * byte, and left as it is, by journal_check() and open() alike.
 */
START_TEST(test_a_torn_batch_followed_by_a_later_batch_is_refused)
{
	char *dir = temp_dir(), *cut = temp_dir();
	char path[256], err[512];
	static struct torn_batch tb;
	uint64_t seed = test_seed(), rs = seed;
	unsigned n, refusals = 0;
	uint8_t *copy;

	tb_build(&tb, dir, TB_AFTER);
	n = (unsigned)tb.nsec + trials(120);
	fprintf(stderr, "# torn batch, then a later one at %zu: %u trials, "
		"seed %llu\n", tb.off[TB_RECS], n, (unsigned long long)seed);
	snprintf(path, sizeof(path), "%s/journal", cut);
	copy = malloc(tb.len);
	ck_assert_ptr_nonnull(copy);
	for (unsigned trial = 0; trial < n; trial++) {
		uint64_t missing = tb_missing(&tb, trial, &rs);
		struct journal_report rep;
		uint8_t *again;
		size_t len2;
		void *st = NULL;
		int m;

		tb_tear(&tb, copy, missing);
		m = tb_kept(&tb, copy);
		write_file(cut, copy, tb.len);
		if (m == TB_RECS) {	/* the tear changed nothing */
			ck_assert_int_eq(journal_check(cut, &rep, err,
						       sizeof(err)), 0);
			continue;
		}
		ck_assert_msg(journal_check(cut, &rep, err, sizeof(err)) ==
			      CARMY_ECORRUPT, "sectors %#llx missing, %d kept: "
			      "accepted", (unsigned long long)missing, m);
		ck_assert_msg(strstr(err, "good records follow") != NULL, "%s",
			      err);
		ck_assert_uint_eq(named_byte(err), tb.off[m]);
		ck_assert_int_eq(journal_store_ops.open(cut, &st, err,
							sizeof(err)),
				 CARMY_ECORRUPT);
		ck_assert_ptr_null(st);
		again = read_file(path, &len2);
		ck_assert_uint_eq(len2, tb.len);
		ck_assert_int_eq(memcmp(again, copy, tb.len), 0);
		free(again);
		refusals++;
	}
	ck_assert_uint_ge(refusals, tb.nsec - 1);
	tb_done(&tb, copy, dir, cut);
}
END_TEST

/*
 * Batches overlap: the next one is written while the one before it is
 * still being flushed, and answered only after it. So a crash can leave
 * the earlier batch torn, or not written at all (a hole), and a later one
 * whole after it, its batch field naming the torn batch's first record
 * as not yet durable when it was written. Neither was acknowledged. For
 * each sector of the torn batch missing alone, all of them missing, and
 * a random sample: the journal opens, every acknowledged execution
 * stands, of the torn batch exactly the records before the tear, and the
 * later batch is never read: it is zeroed with the tail (never re-run,
 * never mistaken for acknowledged).
 */
START_TEST(test_a_torn_batch_with_a_later_one_beside_it_recovers_the_acknowledged_prefix)
{
	char *dir = temp_dir(), *cut = temp_dir();
	static struct torn_batch tb;
	uint64_t seed = test_seed(), rs = seed;
	unsigned n, tried = 0;
	uint8_t *copy;

	tb_build(&tb, dir, TB_BESIDE);
	n = (unsigned)tb.nsec + 1 + trials(240);
	fprintf(stderr, "# torn batch, a later one beside it at %zu: %u "
		"trials, seed %llu\n", tb.off[TB_RECS], n,
		(unsigned long long)seed);
	/* tb_recovers() reads the file to 2 sectors past the batch: the
	 * later record must lie inside it, whole. */
	ck_assert_uint_le(tb.off[TB_RECS + 1], tb.len);
	copy = malloc(tb.len);
	ck_assert_ptr_nonnull(copy);
	for (unsigned trial = 0; trial < n; trial++) {
		uint64_t missing = trial == tb.nsec ?
				   (UINT64_C(1) << tb.nsec) - 1 :
				   tb_missing(&tb, trial, &rs);
		int m;

		tb_tear(&tb, copy, missing);
		m = tb_kept(&tb, copy);
		if (m == TB_RECS)	/* the tear changed nothing */
			continue;
		/* The later record reached the disk whole. */
		ck_assert_int_eq(memcmp(copy + tb.off[TB_RECS],
					tb.orig + tb.off[TB_RECS],
					tb.off[TB_RECS + 1] - tb.off[TB_RECS]),
				 0);
		tb_recovers(&tb, cut, copy, m,
			    missing == (UINT64_C(1) << tb.nsec) - 1 ? "a hole" :
			    "torn beside", missing);
		tried++;
	}
	ck_assert_uint_ge(tried, tb.nsec);
	tb_done(&tb, copy, dir, cut);
}
END_TEST

/*
 * A crash while recovery zeroes a torn tail: zero_tail()'s writes reach
 * the disk a sector at a time, in any order, so any of the tail's sectors
 * may be zeros and the others still torn. The next start recovers the
 * same prefix, as if the first had not begun.
 */
START_TEST(test_a_crash_while_zeroing_a_torn_tail_recovers_the_same_prefix)
{
	char *dir = temp_dir(), *cut = temp_dir();
	static struct torn_batch tb;
	uint64_t seed = test_seed(), rs = seed;
	unsigned n, partial = 0;
	uint8_t *copy;

	tb_build(&tb, dir, TB_ALONE);
	n = (unsigned)tb.nsec + trials(240);
	fprintf(stderr, "# torn tails zeroed in part: %u trials, seed %llu\n",
		n, (unsigned long long)seed);
	copy = malloc(tb.len);
	ck_assert_ptr_nonnull(copy);
	for (unsigned trial = 0; trial < n; trial++) {
		uint64_t missing = tb_missing(&tb, trial, &rs);
		uint64_t zeroed = next_rand(&rs);
		size_t from;
		int m;

		tb_tear(&tb, copy, missing);
		m = tb_kept(&tb, copy);
		if (m == TB_RECS)
			continue;
		/* zero_tail() writes from the good records' end on: of
		 * the sectors it covers, those in zeroed reached the disk. */
		from = tb.off[m];
		for (size_t i = from / SECTOR; i * SECTOR < tb.len; i++) {
			size_t lo = i * SECTOR, hi = lo + SECTOR;

			if (!(zeroed & (UINT64_C(1) << (i % 64))))
				continue;
			if (lo < from)
				lo = from;
			if (hi > tb.len)
				hi = tb.len;
			memset(copy + lo, 0, hi - lo);
		}
		ck_assert_int_eq(memcmp(copy, tb.orig, from), 0);
		tb_recovers(&tb, cut, copy, m, "partly zeroed", missing);
		partial++;
	}
	ck_assert_uint_ge(partial, tb.nsec / 2);
	tb_done(&tb, copy, dir, cut);
}
END_TEST

/*
 * Two and three flipped bits in acknowledged records, a random sample
 * (half of them within 64 bytes of each other, half anywhere in the
 * records), in a journal whose last record has light pieces (a result of
 * zeros but for one bit): journal_check() refuses every one, naming the
 * start of the first record a bit was flipped in, and changes nothing;
 * open() (every sixteenth) likewise.
 */
#define FLIP_TRIALS 2000

START_TEST(test_random_two_and_three_bit_flips_are_refused)
{
	char *dir = temp_dir(), *flip = temp_dir();
	char path[256], fpath[256], err[512];
	static char big[1100];
	struct journal_report rep;
	struct carmy_store_record r;
	struct ex xs[12], z;
	size_t len, off[64], n, lo, hi;
	uint64_t seed = test_seed(), rs = seed;
	unsigned count = trials(FLIP_TRIALS), opens = 0;
	uint8_t *buf, *want;
	int nrec, fd;
	void *st;

	build(dir, xs, 12);
	st = open_journal_as_is(dir);
	make_ex(&z, 60, CARMY_STATUS_COMPLETED);
	record_of(&z, &r);
	ck_assert_int_eq(submit_rec(st, CARMY_STORE_RESERVE, &r), 0);
	memset(big, 0, sizeof(big));
	big[900] = 0x10;
	r.result = big;
	r.result_len = sizeof(big);
	ck_assert_int_eq(submit_rec(st, CARMY_STORE_COMPLETE, &r), 0);
	journal_store_ops.close(st);

	snprintf(path, sizeof(path), "%s/journal", dir);
	buf = read_file(path, &len);
	nrec = record_starts(buf, len, off, 63);
	n = (off[nrec] / SECTOR + 1) * SECTOR + 64;
	ck_assert_uint_le(n, len);
	write_file(flip, buf, n);
	ck_assert_int_eq(journal_check(flip, &rep, err, sizeof(err)), 0);
	ck_assert_uint_eq(rep.records, (uint64_t)nrec);
	fprintf(stderr, "# %u samples of 2 and 3 bits flipped in %d records "
		"(%zu bytes), seed %llu\n", count, nrec, off[nrec] - HEAD,
		(unsigned long long)seed);
	snprintf(fpath, sizeof(fpath), "%s/journal", flip);
	fd = open(fpath, O_RDWR);
	ck_assert_int_ge(fd, 0);
	want = malloc(n);
	ck_assert_ptr_nonnull(want);
	lo = (size_t)HEAD * 8;
	hi = off[nrec] * 8;	/* bits of the records */
	for (unsigned t = 0; t < count; t++) {
		size_t bit[3], low, rec, named, len2;
		int nb = 2 + (int)(t % 2);
		bool near = (t / 2) % 2 == 0;
		uint8_t *again;
		int i = 0;

		for (int b = 0; b < nb; b++) {
			bool dup;

			do {
				if (b > 0 && near)
					bit[b] = bit[0] - bit[0] % 8 + 8 * 64 >
							 hi ?
							 hi - 1 - next_rand(&rs) % 512 :
							 bit[0] - bit[0] % 8 +
								 next_rand(&rs) % 512;
				else
					bit[b] = lo + next_rand(&rs) % (hi - lo);
				dup = false;
				for (int c = 0; c < b; c++)
					dup |= bit[c] == bit[b];
			} while (dup);
		}
		memcpy(want, buf, n);
		low = bit[0];
		for (int b = 0; b < nb; b++) {
			want[bit[b] / 8] ^= (uint8_t)(1u << (bit[b] % 8));
			flip_bit(fd, bit[b] / 8, (int)(bit[b] % 8));
			if (bit[b] < low)
				low = bit[b];
		}
		while (i < nrec && off[i + 1] <= low / 8)
			i++;
		rec = off[i];
		ck_assert_msg(journal_check(flip, &rep, err, sizeof(err)) ==
			      CARMY_ECORRUPT, "bits %zu, %zu%s%zu accepted",
			      bit[0], bit[1], nb == 3 ? ", " : "",
			      nb == 3 ? bit[2] : 0);
		named = named_byte(err);
		ck_assert_msg(named == rec, "bits %zu, %zu%s%zu: named %zu, "
			      "not %zu: %s", bit[0], bit[1],
			      nb == 3 ? ", " : "", nb == 3 ? bit[2] : 0,
			      named, rec, err);
		if (t % 16 == 0) {
			st = NULL;
			ck_assert_int_eq(journal_store_ops.open(flip, &st, err,
								sizeof(err)),
					 CARMY_ECORRUPT);
			ck_assert_ptr_null(st);
			opens++;
		}
		again = read_file(fpath, &len2);
		ck_assert_uint_eq(len2, n);
		ck_assert_int_eq(memcmp(again, want, n), 0);
		free(again);
		for (int b = 0; b < nb; b++)
			flip_bit(fd, bit[b] / 8, (int)(bit[b] % 8));
	}
	close(fd);
	fprintf(stderr, "# all %u refused (%u by open too)\n", count, opens);
	free(want);
	free(buf);
	rm_rf(dir);
	rm_rf(flip);
	free(dir);
	free(flip);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("journal");
	TCase *tc = tcase_create("journal");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_acknowledged_records_come_back_after_reopen);
	tcase_add_test(tc,
		       test_what_recovery_read_is_flushed_before_it_is_loaded);
	tcase_add_test(tc, test_a_new_journal_directory_is_flushed_in_its_parent);
	tcase_add_test(tc,
		       test_a_failed_flush_has_the_next_open_rewrite_the_journal);
	tcase_add_test(tc, test_a_request_with_more_behind_it_is_left_to_the_writer);
	tcase_add_test(tc, test_later_reservation_of_an_identity_stands);
	tcase_add_test(tc, test_resolve_and_purge_records_come_back);
	tcase_add_test(tc, test_history_is_compacted_at_start);
	tcase_add_test(tc, test_a_reservation_keeps_its_call);
	tcase_add_test(tc, test_a_reservation_without_a_call_still_reads);
	tcase_add_test(tc, test_largest_resolve_record_reads_back);
	tcase_add_test(tc, test_concurrent_requests_are_all_recorded);
	tcase_add_test(tc, test_torn_write_at_any_sector_recovers_a_clean_prefix);
	tcase_add_test(tc, test_journal_cut_short_is_refused);
	tcase_add_test(tc, test_a_format_1_journal_is_rewritten_at_open);
	tcase_add_test(tc, test_a_journal_directory_others_can_write_is_refused);
	tcase_add_test(tc, test_a_journal_directory_of_another_user_is_refused);
	tcase_add_test(tc, test_a_journal_file_others_can_write_is_refused);
	tcase_add_test(tc, test_a_symbolic_link_is_never_followed);
	tcase_add_test(tc, test_a_way_to_the_directory_others_can_change_is_refused);
	tcase_add_test(tc, test_torn_last_record_is_cut);
	tcase_add_test(tc, test_a_torn_write_of_light_sectors_is_zeroed);
	tcase_add_test(tc, test_damaged_last_record_is_refused);
	tcase_add_test(tc, test_damage_followed_by_good_records_is_refused);
	tcase_add_test(tc, test_a_sparse_tail_costs_its_data_not_its_length);
	tcase_add_test(tc, test_a_journal_that_is_not_a_file_is_refused);
	tcase_add_test(tc, test_a_failed_flush_of_the_zeros_ahead_stops_the_journal);
	tcase_add_test(tc, test_a_later_batch_is_answered_only_after_the_one_before_it);
	tcase_add_test(tc, test_a_failed_flush_fails_the_batch_in_flight_behind_it);
	tcase_add_test(tc,
		test_a_disk_full_while_growing_never_leaves_records_past_the_flushed_size);
	tcase_add_test(tc, test_crc32c_by_instruction_is_the_table_s);
	tcase_add_test(tc, test_not_a_journal_is_refused);
	tcase_add_test(tc, test_second_opener_is_refused);
	tcase_add_test(tc, test_stale_compaction_file_is_removed_at_open);
	tcase_add_test(tc, test_compaction_needs_room_for_its_copy);
	tcase_add_test(tc, test_journal_compacts_itself_while_open);
	tcase_add_test(tc,
		test_records_committed_during_compaction_are_in_the_new_journal);
	tcase_add_test(tc, test_failed_compaction_keeps_the_journal);
	tcase_add_test(tc, test_failed_compaction_loses_no_record_after_reopen);
	tcase_add_test(tc,
		       test_failed_compaction_pauses_commits_for_the_last_records_only);
	suite_add_tcase(s, tc);
	/* A case of its own (CK_RUN_CASE=sweep runs it alone). */
	tc = tcase_create("sweep");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_every_flipped_bit_is_refused);
	suite_add_tcase(s, tc);
	/* Random samples of torn batches and flipped bits (CK_RUN_CASE=torn;
	 * CARMY_TEST_SEED and CARMY_TRIALS to repeat or widen one). */
	tc = tcase_create("torn");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc,
		test_a_multi_record_batch_torn_in_any_order_recovers_a_clean_prefix);
	tcase_add_test(tc, test_a_torn_batch_followed_by_a_later_batch_is_refused);
	tcase_add_test(tc,
		test_a_torn_batch_with_a_later_one_beside_it_recovers_the_acknowledged_prefix);
	tcase_add_test(tc,
		test_a_crash_while_zeroing_a_torn_tail_recovers_the_same_prefix);
	tcase_add_test(tc, test_random_two_and_three_bit_flips_are_refused);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
