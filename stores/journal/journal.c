/*
 * journal.c - the journal store: carmyd's embedded durable store
 * (--store journal:DIR). Format and recovery are drawn in docs/journal.md.
 * This file is the store itself, at the top of the journal's files: its
 * ops table, open/load/submit/close, the writer and the commit path, and
 * journal_check(). It calls the files below it (internal.h gives the
 * order): compact.c rewrites the file, recover.c reads it back, index.c
 * keeps what stands and where, record.c writes and checks records, file.c
 * opens, grows and maps the files.
 *
 * One append-only file, DIR/journal, of checksummed records: RESERVE (a new
 * execution: identity, fingerprints, exec id), COMPLETE (its result),
 * RELEASE (withdrawn), RESOLVE (an operator settled an interrupted one) and
 * PURGE (an operator removed a completed one). A record is acknowledged only
 * once fdatasync() has returned after it was written, so an acknowledged
 * reservation or result survives a power loss.
 *
 * Group commit. A batch is everything queued: it goes out with one pwrite()
 * at the place it reserved in the file and is made durable with one
 * fdatasync(), then every request's done() is called. Up to depth batches
 * (CARMY_JOURNAL_FLIGHT, 1 by default) are in flight at once, each written
 * and flushed by a thread of its own, so the next batch is written while
 * the one before it waits for the disk. They are answered strictly in
 * file order: a batch whose flush returns first waits for the ones before
 * it, so nothing is answered before every record ahead of it is durable,
 * and a batch behind a failed one fails too. While batches wait for the
 * disk, new requests pile up and go out together in the next one, so the
 * cost of a flush is shared by as many clients as are waiting. Each
 * record's batch field names the first record that was not yet durable
 * when it was written (recovery's proof of what was acknowledged, see
 * docs/journal.md). Batches are written by the journal's own threads,
 * except when requests come one at a time (the last batch held one
 * record), none is in flight and the caller has no other in hand (no
 * CARMY_STORE_MORE): then the thread that submits it writes it at once,
 * since on these VMs handing a request to another thread and back costs
 * two wake-ups, a third of a flush. Under load that would stall an event
 * loop for a flush while its other clients wait, so it is not done then.
 *
 * The file grows ahead of its records in flushed chunks of zeros
 * (jnl_grow_file()), so that the fdatasync() of a commit writes data
 * blocks only, not the inode's size and extent map as well.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "carmy_store.h"
#include "common/io.h"
#include "common/log.h"
#include "common/thread.h"
#include "stores/journal/internal.h"
#include "stores/journal/journal.h"

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

static void *writer(void *arg);
static bool can_start(const struct jnl *j);
static void start_writers(struct jnl *j);
static void write_batch(struct jnl *j);
static struct carmy_store_req *take_batch(struct jnl *j, size_t *lenp);
static struct jflight *take_slot(struct jnl *j);
static int grow(struct jnl *j, struct jflight *b, size_t len);
static void reserve(struct jnl *j, struct jflight *b,
		    struct carmy_store_req *batch, size_t len, int rc);
static int write_flight(struct jnl *j, struct jflight *b, uint64_t floor);
static void answer(struct jnl *j);
static void settle(struct jnl *j, const struct jflight *b);
static void token_free(struct jnl *j);
static void index_batch(struct jnl *j, const struct jflight *b);
static void fail_closed(struct jnl *j, int rc);
static void mark_failed(struct jnl *j);
static int after_failure(struct jnl *j, char *err, size_t errlen);
static int flight_env(void);
static struct jnl *new_store(void);
static int open_journal(struct jnl *j, uid_t uid, char *err, size_t errlen);
static int lock_journal(struct jnl *j, char *err, size_t errlen);
static int compact_at_open(struct jnl *j, char *err, size_t errlen);
static int open_dir(struct jnl *j, const char *dir, bool create, uid_t *uid,
		    char *err, size_t errlen);

/* ---------------------------------------------------------------- API */

static int jnl_open(const char *args, void **store, char *err, size_t errlen)
{
	struct jnl *j;
	uid_t uid;
	int rc;

	*store = NULL;
	if (args == NULL || args[0] == '\0') {
		snprintf(err, errlen, "journal needs a directory: "
			 "--store journal:DIR");
		return -EINVAL;
	}
	j = new_store();
	if (j == NULL)
		return -ENOMEM;
	j->alone = true;
	j->compact_min = jnl_compact_min_env();
	j->depth = flight_env();
	uid = geteuid();
	rc = open_dir(j, args, true, &uid, err, errlen);
	if (rc == 0)
		rc = open_journal(j, uid, err, errlen);
	if (rc == 0)
		rc = jnl_recover(j, err, errlen);
	/* A journal of the previous format is rewritten in this one before
	 * anything is appended to it. */
	if (rc == 0 && j->version == 1)
		rc = jnl_upgrade(j, err, errlen);
	if (rc == 0 && faccessat(j->dir_fd, JOURNAL_FAILED, F_OK,
				 AT_SYMLINK_NOFOLLOW) == 0)
		rc = after_failure(j, err, errlen);
	else if (rc == 0 && jnl_needs_compaction(j))
		rc = compact_at_open(j, err, errlen);
	if (rc != 0) {
		jnl_close(j);
		return rc;
	}
	j->durable_end = j->end;
	j->pub_records = j->nrec;
	j->wend = j->end;
	j->wseq = j->seq;
	*store = j;
	return 0;
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
	if (j->map == NULL && (rc = jnl_map_file(j)) != 0)
		return rc;
	for (uint32_t i = 0; i < j->ix.nex && rc == 0; i++) {
		struct carmy_store_record r;

		if (j->ix.ex[i].gone)
			continue;
		jidx_standing(j->map, &j->ix.ex[i], &r);
		rc = each(arg, &r);
	}
	j->ix.map = NULL;
	j->ix.map_end = 0;
	jnl_unmap_file(j);
	return rc;
}

static void jnl_submit(void *store, struct carmy_store_req *req)
{
	struct jnl *j = store;
	int broken;

	pthread_mutex_lock(&j->lock);
	if (!j->started)
		start_writers(j);
	broken = __atomic_load_n(&j->broken, __ATOMIC_ACQUIRE);
	if (broken != 0) {
		pthread_mutex_unlock(&j->lock);
		req->done(req, broken);
		return;
	}
	req->next = NULL;
	*j->tail = req;
	j->tail = &req->next;
	/* Written here only if it is alone (nothing queued before it, the
	 * last batch one record) and nothing follows it at once. Otherwise
	 * this caller (carmyd's event loop) would stall for a flush, and
	 * with one loop the requests behind it would never meet in a
	 * batch: 4,400 cycles a second for 64 clients instead of 48,500
	 * (README, Performance). */
	if (j->inflight == 0 && can_start(j) && j->alone && j->head == req &&
	    !(req->flags & CARMY_STORE_MORE))
		write_batch(j);
	/* A writer: for this request, or for what queued up meanwhile
	 * (glibc makes this free when nobody waits). */
	if (can_start(j))
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
	pthread_cond_broadcast(&j->wake);
	pthread_cond_signal(&j->compact_wake);
	pthread_mutex_unlock(&j->lock);
	for (int k = 0; k < j->nwriters; k++)
		pthread_join(j->writers[k], NULL);
	if (j->compactor_started)
		pthread_join(j->compactor, NULL);
	if (j->flushes > 0)
		log_info("journal %s: %llu records in %llu flushes this run "
			 "(%.1f per flush), %llu compactions", j->path,
			 (unsigned long long)j->records,
			 (unsigned long long)j->flushes,
			 (double)j->records / (double)j->flushes,
			 (unsigned long long)j->stats.compactions);
	jnl_unmap_file(j);
	jidx_free(&j->ix);
	jnl_close_flights(j);
	for (int k = 0; k < JOURNAL_FLIGHT_MAX; k++)
		free(j->flight[k].buf);
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
	struct jnl *j = new_store();
	struct stat st;
	uid_t uid;
	int rc;

	memset(rep, 0, sizeof(*rep));
	if (j == NULL)
		return -ENOMEM;
	j->readonly = true;
	/* Checked as carmyd would, for the directory's owner: whoever runs
	 * the check (root, say) need not be carmyd's user. */
	uid = (uid_t)-1;
	rc = open_dir(j, dir, false, &uid, err, errlen);
	if (rc != 0)
		goto out;
	j->fd = jnl_open_file(j->dir_fd, j->path, JOURNAL_FILE, O_RDONLY, uid,
			      err, errlen);
	if (j->fd < 0) {
		rc = j->fd;
		j->fd = -1;
		goto out;
	}
	if (fstat(j->fd, &st) != 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot stat %s: %s", j->path,
			 strerror(errno));
		goto out;
	}
	j->size = (uint64_t)st.st_size;
	rc = jnl_recover(j, err, errlen);
	rep->file_bytes = (uint64_t)st.st_size;
	rep->version = j->version;
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

/* ---------------------------------------------------------------- opening */

/* A store with no file yet: what jnl_close() can always take back. */
static struct jnl *new_store(void)
{
	struct jnl *j = calloc(1, sizeof(*j));

	if (j == NULL)
		return NULL;
	j->fd = j->dir_fd = j->ix.fd = -1;
	j->tail = &j->head;
	for (int k = 0; k < JOURNAL_FLIGHT_MAX; k++)
		j->flight[k].fd = -1;
	j->youngest = &j->oldest;
	j->depth = 1;
	pthread_mutex_init(&j->lock, NULL);
	pthread_cond_init(&j->wake, NULL);
	pthread_cond_init(&j->compact_wake, NULL);
	pthread_cond_init(&j->idle, NULL);
	return j;
}

/*
 * Open the journal in j->dir_fd (creating an empty one if there is none)
 * into j->fd, take its lock and its size, and remove a compaction's new
 * file that a crash left behind. -errno and a sentence in err.
 */
static int open_journal(struct jnl *j, uid_t uid, char *err, size_t errlen)
{
	int rc;

	j->fd = jnl_open_file(j->dir_fd, j->path, JOURNAL_FILE, O_RDWR, uid,
			      err, errlen);
	if (j->fd == -ENOENT) {
		j->fd = -1;
		rc = jnl_create_file(j, err, errlen);
		if (rc != 0)
			return rc;
	} else if (j->fd < 0) {
		rc = j->fd;
		j->fd = -1;
		return rc;
	}
	rc = lock_journal(j, err, errlen);
	if (rc != 0)
		return rc;
	/* A compaction's new file that a crash left behind: never read, and
	 * as big as the journal. Ours to remove now that we hold the lock. */
	if (unlinkat(j->dir_fd, JOURNAL_NEW, 0) != 0 && errno != ENOENT &&
	    errno != EISDIR)
		log_warn("cannot remove %s.new: %s", j->path, strerror(errno));
	return 0;
}

/* One writer per journal: a second carmyd on the same directory would
 * interleave records. Locks j->fd, and takes its size into j->size. */
static int lock_journal(struct jnl *j, char *err, size_t errlen)
{
	struct stat st, now;

	if (flock(j->fd, LOCK_EX | LOCK_NB) != 0) {
		snprintf(err, errlen, "journal %s is in use by another carmyd",
			 j->path);
		return -EBUSY;
	}
	if (fstat(j->fd, &st) != 0) {
		int rc = -errno;

		snprintf(err, errlen, "cannot stat %s: %s", j->path,
			 strerror(errno));
		return rc;
	}
	/* The lock must be on the file that is the journal: one opened just
	 * before another carmyd's compaction renamed its new file over it
	 * is a file nobody will ever read. */
	if (fstatat(j->dir_fd, JOURNAL_FILE, &now, AT_SYMLINK_NOFOLLOW) != 0 ||
	    now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
		snprintf(err, errlen, "journal %s is in use by another carmyd",
			 j->path);
		return -EBUSY;
	}
	j->size = (uint64_t)st.st_size;
	return 0;
}

/*
 * Compaction at open, before any thread. It is an optimisation: if it
 * failed before the rename, the old journal is still read and in use: go
 * on with it. Once renamed, the new file is the journal, and its directory
 * must be flushed before anything is appended to it (a lost rename would
 * lose those records).
 */
static int compact_at_open(struct jnl *j, char *err, size_t errlen)
{
	bool renamed = false;
	int rc = jnl_compact_at_start(j, &renamed);

	if (rc != 0 && !renamed) {
		log_warn("cannot compact journal %s: %s", j->path,
			 strerror(-rc));
		return 0;
	}
	if (rc != 0)
		snprintf(err, errlen, "journal %s was compacted but its "
			 "directory cannot be flushed: %s", j->path,
			 strerror(-rc));
	return rc;
}

/* Is a name on the way to the journal's directory owned by root or uid?
 * *other: the one owner other than root seen on the way, for
 * journal_check(), which learns uid (the directory's owner) only at the
 * end. */
static bool safe_owner(uid_t owner, uid_t uid, uid_t *other)
{
	if (owner == 0)
		return true;
	if ((uid != (uid_t)-1 && owner != uid) ||
	    (*other != (uid_t)-1 && *other != owner))
		return false;
	*other = owner;
	return true;
}

/* A directory on the way: safe_owner(), and writable by no one else
 * unless sticky (/tmp: others cannot rename or remove what is not theirs
 * there). */
static bool safe_step(const struct stat *st, uid_t uid, uid_t *other)
{
	return safe_owner(st->st_uid, uid, other) &&
	       ((st->st_mode & 022) == 0 || (st->st_mode & S_ISVTX) != 0);
}

/* fsync() the directory dirfd (opened O_PATH) names. 0 or -errno. */
static int flush_dir_at(int dirfd)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) != 0)
		rc = -errno;
	close(fd);
	return rc;
}

/*
 * Walk path (absolute) from /, one component at a time, never through a
 * name that another user could have changed: each directory on the way
 * must pass safe_step(), and a symbolic link on the way is followed only
 * if root or uid owns it (it lies in a directory that passed, so nobody
 * else can have put it there or can swap it). The last component is never
 * a link. With create, the last one is made (0700) if missing. Returns
 * the last directory's descriptor (O_RDONLY), or -errno and a sentence
 * naming what failed in err.
 */
static int walk_dir(const char *dir, const char *path, bool create,
		    uid_t *uid, char *err, size_t errlen)
{
	char rest[4096], link[4096];
	uid_t other = (uid_t)-1;
	struct stat st;
	int fd, hops = 0, rc;

	fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0 || !safe_step(&st, *uid, &other)) {
		rc = fd < 0 ? -errno : -EPERM;
		snprintf(err, errlen, "journal directory %s: / is unsafe or "
			 "cannot be opened", dir);
		goto fail;
	}
	snprintf(rest, sizeof(rest), "%s", path + 1);
	for (;;) {
		char name[256], *p = rest, *slash;
		size_t n;
		int next;
		bool last;

		while (*p == '/')
			p++;
		slash = strchr(p, '/');
		n = slash != NULL ? (size_t)(slash - p) : strlen(p);
		if (n >= sizeof(name)) {
			rc = -ENAMETOOLONG;
			snprintf(err, errlen, "journal directory %s: name too "
				 "long", dir);
			goto fail;
		}
		memcpy(name, p, n);
		name[n] = '\0';
		memmove(rest, p + n, strlen(p + n) + 1);
		for (p = rest; *p == '/'; p++)
			;
		last = *p == '\0';
		if (n == 0 || strcmp(name, ".") == 0) {
			if (last)
				break;	/* "/" itself, after links */
			continue;
		}
		if (last && create && mkdirat(fd, name, 0700) == 0) {
			/* Its name, in the directory above, on the disk
			 * before any record is acknowledged in it; if not,
			 * it goes, to be made (and flushed) again. */
			rc = flush_dir_at(fd);
			if (rc != 0) {
				(void)unlinkat(fd, name, AT_REMOVEDIR);
				snprintf(err, errlen, "cannot flush the "
					 "directory above journal directory "
					 "%s: %s", dir, strerror(-rc));
				goto fail;
			}
			log_info("created journal directory %s (mode 0700)",
				 dir);
		} else if (last && create && errno != EEXIST) {
			rc = -errno;
			snprintf(err, errlen, "cannot create journal directory "
				 "%s: %s", dir, strerror(errno));
			goto fail;
		}
		if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			rc = -errno;
			snprintf(err, errlen, "cannot open journal directory "
				 "%s: %s: %s", dir, name, strerror(errno));
			goto fail;
		}
		if (S_ISLNK(st.st_mode)) {
			ssize_t k;

			rc = -ELOOP;
			if (last) {
				snprintf(err, errlen, "journal directory %s is "
					 "a symbolic link: refusing to follow "
					 "it (name the directory itself)", dir);
				goto fail;
			}
			if (!safe_owner(st.st_uid, *uid, &other) ||
			    ++hops > 40) {
				snprintf(err, errlen, "journal directory %s: "
					 "the symbolic link %s on the way is "
					 "owned by uid %u: refusing to follow "
					 "it (only root's or carmyd's own "
					 "links are)", dir, name,
					 (unsigned)st.st_uid);
				goto fail;
			}
			k = readlinkat(fd, name, link, sizeof(link) - 1);
			if (k <= 0 || (size_t)k + strlen(rest) + 2 >
				      sizeof(rest)) {
				rc = k < 0 ? -errno : -ENAMETOOLONG;
				snprintf(err, errlen, "journal directory %s: "
					 "cannot read the link %s", dir, name);
				goto fail;
			}
			link[k] = '\0';
			memmove(rest + k + 1, rest, strlen(rest) + 1);
			memcpy(rest, link, (size_t)k);
			rest[k] = '/';
			if (link[0] == '/') {
				next = open("/", O_PATH | O_DIRECTORY |
					    O_CLOEXEC);
				if (next < 0) {
					rc = -errno;
					snprintf(err, errlen, "journal "
						 "directory %s: cannot open /",
						 dir);
					goto fail;
				}
				close(fd);
				fd = next;
			}
			continue;
		}
		next = openat(fd, name, (last ? O_RDONLY : O_PATH) |
			      O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0) {
			rc = -errno;
			snprintf(err, errlen, "cannot open journal directory "
				 "%s: %s", dir, strerror(errno));
			goto fail;
		}
		close(fd);
		fd = next;
		if (fstat(fd, &st) != 0) {
			rc = -errno;
			snprintf(err, errlen, "cannot stat journal directory "
				 "%s: %s", dir, strerror(errno));
			goto fail;
		}
		if (last)
			break;
		if (!safe_step(&st, *uid, &other)) {
			rc = -EPERM;
			snprintf(err, errlen, "journal directory %s: %s on "
				 "the way to it is owned by uid %u with mode "
				 "%04o: refusing it, since every directory "
				 "above the journal's must be root's or uid "
				 "%u's and writable by no one else (or "
				 "sticky, like /tmp)", dir, name,
				 (unsigned)st.st_uid,
				 (unsigned)(st.st_mode & 07777),
				 (unsigned)(*uid == (uid_t)-1 ? other : *uid));
			goto fail;
		}
	}
	/* The journal's directory itself (or /, named as such). */
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		goto fail;
	}
	if (*uid == (uid_t)-1)
		*uid = st.st_uid;
	if (other != (uid_t)-1 && other != *uid) {
		snprintf(err, errlen, "journal directory %s: a directory or "
			 "link on the way to it is owned by uid %u, neither "
			 "root nor the directory's owner (uid %u): refusing it",
			 dir, (unsigned)other, (unsigned)*uid);
		rc = -EPERM;
		goto fail;
	}
	if (st.st_uid != *uid || (st.st_mode & 022) != 0) {
		snprintf(err, errlen, "journal directory %s is owned by uid %u "
			 "with mode %04o: refusing it, since it must be owned "
			 "by uid %u and writable by no one else (chmod 700)",
			 dir, (unsigned)st.st_uid,
			 (unsigned)(st.st_mode & 07777), (unsigned)*uid);
		rc = -EPERM;
		goto fail;
	}
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	return rc;
}

/*
 * Open the journal's directory dir into j->dir_fd (create: making it, 0700,
 * if it is missing) and name the journal in it. It must be a directory
 * itself, not a symbolic link to one, owned by *uid and writable by no one
 * else, and so must be the way to it (walk_dir()): whoever can write it,
 * or change which directory its name leads to, can plant a journal (or
 * bring back an old one) that carmyd would replay. With *uid ==
 * (uid_t)-1 (journal_check()) its owner will do, and *uid says who that
 * is. A relative dir is taken from the working directory, whose way from
 * / is checked the same.
 */
static int open_dir(struct jnl *j, const char *dir, bool create, uid_t *uid,
		    char *err, size_t errlen)
{
	char d[sizeof(j->path)], abs[sizeof(j->path)];
	size_t n = strlen(dir);
	int fd;

	/* "DIR/" and "DIR/." would follow a link named DIR: the name
	 * without them. */
	for (;;) {
		if (n > 1 && dir[n - 1] == '/')
			n--;
		else if (n > 2 && dir[n - 1] == '.' && dir[n - 2] == '/')
			n -= 2;
		else
			break;
	}
	if (n >= sizeof(d) - sizeof(JOURNAL_NEW) - 1) {
		snprintf(err, errlen, "journal directory %s: name too long",
			 dir);
		return -ENAMETOOLONG;
	}
	memcpy(d, dir, n);
	d[n] = '\0';
	memcpy(j->path, d, n);
	memcpy(j->path + n, "/" JOURNAL_FILE, sizeof("/" JOURNAL_FILE));
	if (d[0] == '/') {
		snprintf(abs, sizeof(abs), "%s", d);
	} else {
		char cwd[sizeof(abs)];

		if (getcwd(cwd, sizeof(cwd)) == NULL ||
		    strlen(cwd) + 1 + n >= sizeof(abs)) {
			snprintf(err, errlen, "journal directory %s: cannot "
				 "tell the working directory", d);
			return -ENAMETOOLONG;
		}
		n = strlen(cwd);
		memcpy(abs, cwd, n);
		abs[n] = '/';
		memcpy(abs + n + 1, d, strlen(d) + 1);
	}
	fd = walk_dir(d, abs, create, uid, err, errlen);
	if (fd < 0)
		return fd;
	j->dir_fd = fd;
	return 0;
}

/* ---------------------------------------------------------------- writer */

/* How many batches may be in flight: CARMY_JOURNAL_FLIGHT, 1 to
 * JOURNAL_FLIGHT_MAX (anything else: the default). */
static int flight_env(void)
{
	const char *v = getenv(JOURNAL_FLIGHT_ENV);
	char *end;
	long n;

	if (v == NULL || *v == '\0')
		return JOURNAL_FLIGHT_DEFAULT;
	n = strtol(v, &end, 10);
	if (*end != '\0' || n < 1 || n > JOURNAL_FLIGHT_MAX) {
		log_warn("%s=%s is not a number from 1 to %d: %d batches in "
			 "flight", JOURNAL_FLIGHT_ENV, v, JOURNAL_FLIGHT_MAX,
			 JOURNAL_FLIGHT_DEFAULT);
		return JOURNAL_FLIGHT_DEFAULT;
	}
	return (int)n;
}

/* May a batch start now? With j->lock held. The compactor asking for the
 * token goes first: it only waits for the batches in flight. */
static bool can_start(const struct jnl *j)
{
	return j->head != NULL && !j->flushing && !j->want_token &&
	       j->inflight < j->depth;
}

/*
 * At the first request (open and load ran single-threaded, before any
 * thread), with j->lock held: the slots' own descriptions of the file,
 * and a writer per slot and one more, so that a batch can start while
 * one writer answers the batches before it. One writer is enough to go
 * on with (fewer batches in flight); none fails every request.
 */
static void start_writers(struct jnl *j)
{
	int want;

	j->started = true;
	jnl_open_flights(j);
	want = j->depth > 1 ? j->depth + 1 : 1;
	while (j->nwriters < want) {
		int err = pthread_create(&j->writers[j->nwriters], NULL,
					 writer, j);

		if (err != 0) {
			if (j->nwriters == 0)
				fail_closed(j, -err);
			else if (j->depth > j->nwriters)
				j->depth = j->nwriters;
			break;
		}
		j->nwriters++;
	}
}

/* Write the batches that queue up while others are in flight. */
static void *writer(void *arg)
{
	struct jnl *j = arg;

	thread_name("carmyd-journal");
	pthread_mutex_lock(&j->lock);
	for (;;) {
		while (!can_start(j) && !(j->stopping && j->head == NULL))
			pthread_cond_wait(&j->wake, &j->lock);
		if (j->head == NULL)
			break;	/* stopping, nothing left */
		write_batch(j);
	}
	pthread_mutex_unlock(&j->lock);
	return NULL;
}

/*
 * Take the next batch, reserve its place in the file, write and flush it,
 * and answer what is flushed in file order (this batch, if nothing before
 * it is still in flight). Called, after can_start(), and returns with
 * j->lock held, which it lets go while the batch is written.
 */
static void write_batch(struct jnl *j)
{
	struct jflight *b = take_slot(j);
	size_t len;
	struct carmy_store_req *batch = take_batch(j, &len);
	int rc = __atomic_load_n(&j->broken, __ATOMIC_ACQUIRE);

	if (rc == 0 && len > b->cap)	/* before its place is taken */
		rc = jnl_buf_room(&b->buf, &b->cap, len);
	/* Zeros after the records, always: a file whose records run closer
	 * to its end than JREC_TAIL_MIN was cut short (recovery). */
	if (rc == 0 && j->wend + len + JREC_TAIL_MIN > j->size)
		rc = grow(j, b, len);
	reserve(j, b, batch, len, rc);
	if (can_start(j))
		pthread_cond_signal(&j->wake);
	if (rc == 0) {
		/* Every record before the oldest unanswered one is durable;
		 * recovery reads this in each record's batch field. */
		uint64_t floor = j->seq + 1;

		pthread_mutex_unlock(&j->lock);
		rc = write_flight(j, b, floor);
		pthread_mutex_lock(&j->lock);
		if (rc != 0) {
			fail_closed(j, rc);
			mark_failed(j);
		}
		b->rc = rc;
	}
	b->flushed = true;
	answer(j);
}

/* Take what is queued, up to about a batch's worth. With j->lock held. */
static struct carmy_store_req *take_batch(struct jnl *j, size_t *lenp)
{
	struct carmy_store_req *batch = j->head, *last = NULL;
	size_t len = 0;

	for (struct carmy_store_req *r = batch; r != NULL; r = r->next) {
		size_t n = jnl_rec_size(r);

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

/* A free slot, counted in flight from now on. With j->lock held, after
 * can_start(): there is one. */
static struct jflight *take_slot(struct jnl *j)
{
	struct jflight *b = j->flight;

	while (b->busy)
		b++;
	b->busy = true;
	b->flushed = false;
	b->rc = 0;
	j->inflight++;
	return b;
}

/*
 * Grow the file so that len bytes fit after j->wend, with the zeros after
 * them, holding the token: no batch starts meanwhile, and those in flight
 * write below j->size. Through the slot's own description (its flush is
 * the next to use it). Out of room fails this batch alone: the zeros
 * written so far are harmless, and j->size does not count them (the next
 * batch grows the file again, flushed, before it writes into them).
 * Anything else, EIO above all, may be a write-back failure the kernel
 * reports only once: fail closed, as after a failed commit. Called and
 * returns with j->lock held.
 */
static int grow(struct jnl *j, struct jflight *b, size_t len)
{
	uint64_t size = j->size, end = j->wend;
	int rc;

	j->flushing = true;
	pthread_mutex_unlock(&j->lock);
	rc = jnl_grow_file(b->fd, end, &size, len + JREC_TAIL_MIN);
	pthread_mutex_lock(&j->lock);
	j->flushing = false;
	if (rc == 0)
		j->size = size;
	else if (rc != -ENOSPC) {
		fail_closed(j, rc);
		mark_failed(j);
	}
	token_free(j);
	return rc;
}

/* Give the batch (len bytes of records) its place in the file and its
 * sequence numbers, after the batches in flight, and queue it to be
 * answered after them. A batch that failed before (rc) takes no place. */
static void reserve(struct jnl *j, struct jflight *b,
		    struct carmy_store_req *batch, size_t len, int rc)
{
	b->reqs = batch;
	b->off = j->wend;
	b->first = j->wseq + 1;
	b->len = 0;
	b->n = 0;
	if (rc == 0) {
		for (struct carmy_store_req *r = batch; r != NULL; r = r->next)
			b->n++;
		b->len = len;
		j->wend += len;
		j->wseq += b->n;
	} else {
		b->rc = rc;
	}
	b->next = NULL;
	*j->youngest = b;
	j->youngest = &b->next;
}

/* Seal the batch's records at their place, each naming floor as the first
 * record not yet durable, write them and flush, through the slot's own
 * description. Without j->lock: the slot and its place are this
 * thread's, and salt changes only while nothing is in flight. */
static int write_flight(struct jnl *j, struct jflight *b, uint64_t floor)
{
	uint64_t seq = b->first;
	size_t at = 0;
	int rc;

	for (struct carmy_store_req *r = b->reqs; r != NULL; r = r->next) {
		size_t n = jnl_rec_size(r);

		jnl_rec_put(r, seq++, floor, j->salt, b->off + at, b->buf + at,
			    n);
		at += n;
	}
	rc = io_pwrite_all(b->fd, b->buf, b->len, b->off);
	if (rc == 0 && fdatasync(b->fd) != 0)
		rc = -errno;
	return rc;
}

/*
 * Answer the flushed batches at the front of the line, oldest first,
 * stopping at the first still in flight: by each thread whose batch is
 * flushed, one at a time (acking), so done() is called in file order and
 * never before every batch ahead is durable. A batch behind a failed one
 * fails with it (j->broken): its records follow ones that may not be on
 * the disk. Its slot is free before its requests are answered, so the
 * next batch can start meanwhile. Called and returns with j->lock held.
 */
static void answer(struct jnl *j)
{
	while (!j->acking && j->oldest != NULL && j->oldest->flushed) {
		struct jflight *b = j->oldest;
		struct carmy_store_req *reqs = b->reqs;
		int rc = b->rc != 0 ? b->rc :
			 __atomic_load_n(&j->broken, __ATOMIC_ACQUIRE);
		bool index = rc == 0 && !j->compacting && !j->no_index;

		j->acking = true;
		j->oldest = b->next;
		if (j->oldest == NULL)
			j->youngest = &j->oldest;
		if (index) {
			pthread_mutex_unlock(&j->lock);
			index_batch(j, b);
			pthread_mutex_lock(&j->lock);
		}
		if (rc == 0)
			settle(j, b);
		jnl_batch_done(j);
		b->reqs = NULL;
		b->busy = false;
		j->inflight--;
		token_free(j);
		pthread_mutex_unlock(&j->lock);
		while (reqs != NULL) {
			struct carmy_store_req *next = reqs->next;

			reqs->done(reqs, rc);
			reqs = next;
		}
		pthread_mutex_lock(&j->lock);
		j->acking = false;
	}
}

/* A batch made durable is the journal's: where its records end, their
 * number, and the counters. By the one answering it, j->lock held. */
static void settle(struct jnl *j, const struct jflight *b)
{
	j->end = b->off + b->len;
	j->seq = b->first + b->n - 1;
	j->nrec += b->n;
	j->records += b->n;
	j->flushes++;
	j->alone = b->n == 1;
}

/* A slot or the token was given back (j->lock held): the compactor waiting
 * for the file to itself, or a writer, may go on. */
static void token_free(struct jnl *j)
{
	if (j->want_token && !j->flushing && j->inflight == 0)
		pthread_cond_signal(&j->idle);
	else if (can_start(j))
		pthread_cond_signal(&j->wake);
}

/* After a failed write or flush nothing in the page cache can be trusted
 * to reach the disk: refuse every request from now on. */
static void fail_closed(struct jnl *j, int rc)
{
	log_error("journal %s: %s: refusing every reservation and completion "
		  "from now on", j->path, strerror(-rc));
	__atomic_store_n(&j->broken, rc, __ATOMIC_RELEASE);
}

/*
 * A write or flush of the journal failed: say so to the next open, in
 * DIR/journal.failed. After a failed write-back the kernel may mark the
 * pages clean though they never reached the disk, so a carmyd started
 * without a reboot would read them, through the page cache, as records on
 * the disk. Best effort (the disk is failing): said in the log if not.
 */
static void mark_failed(struct jnl *j)
{
	int fd = openat(j->dir_fd, JOURNAL_FAILED, O_WRONLY | O_CREAT |
			O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0 || fsync(fd) != 0 || fsync(j->dir_fd) != 0)
		log_error("journal %s: cannot leave %s for the next start "
			  "(%s): reboot before carmyd starts on this journal "
			  "again, so that it reads only what is on the disk",
			  j->path, JOURNAL_FAILED, strerror(errno));
	if (fd >= 0)
		close(fd);
}

/*
 * At open, after recovery, when an earlier run's write or flush failed
 * (mark_failed()): what was read may hold records the disk does not, so
 * the journal is rewritten whole into a new file, flushed and renamed over
 * it (a compaction) before anything in it is loaded; then the mark goes.
 * Refused if that cannot be done: serving those records could answer from
 * a result a power cut would take back.
 */
static int after_failure(struct jnl *j, char *err, size_t errlen)
{
	bool renamed = false;
	int rc;

	log_warn("journal %s: a write or flush failed in an earlier run "
		 "(%s): rewriting the journal before it is used", j->path,
		 JOURNAL_FAILED);
	rc = jnl_compact_at_start(j, &renamed);
	if (rc == 0 && !renamed)
		rc = -ENOSPC;	/* no room for the copy */
	if (rc == 0 && (unlinkat(j->dir_fd, JOURNAL_FAILED, 0) != 0 ||
			fsync(j->dir_fd) != 0))
		rc = -errno;
	if (rc != 0)
		snprintf(err, errlen, "journal %s: a write or flush failed in "
			 "an earlier run, and the journal cannot be rewritten "
			 "before it is used: %s (see %s in docs/journal.md)",
			 j->path, strerror(-rc), JOURNAL_FAILED);
	return rc;
}

/*
 * Keep the index up to date with a batch just made durable (its bytes
 * still in its slot), by the one answering it. Not while compacting: the
 * compactor owns the index then, and takes these records from the file
 * when it switches (or gives up). An index that missed a record would let
 * a compaction drop an execution, so once one is missed there is no
 * online compaction.
 */
static void index_batch(struct jnl *j, const struct jflight *b)
{
	for (size_t at = 0; at < b->len;) {
		uint32_t n;
		int rc;

		memcpy(&n, b->buf + at, sizeof(n));
		rc = jidx_record(&j->ix, b->buf + at, b->off + at);
		if (rc != 0) {
			jnl_lose_index(j, rc);
			return;
		}
		at += n;
	}
}
