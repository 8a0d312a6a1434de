/*
 * file.c - the journal's files, at the bottom of the journal store: opening
 * one of its directory safely, a new file's header and an empty journal,
 * whole reads and writes at an offset, growing a file with zeros ahead of
 * its records, and mapping it for recovery and load(). It calls none of
 * the store's other files (internal.h gives the order).
 *
 * The file grows in pre-written chunks of zeros (JOURNAL_GROW), flushed
 * once, so that the fdatasync() of a commit writes data blocks only, not
 * the inode's size and extent map as well. Zeros are also the clean end:
 * a record head of zeros is where the journal stops.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "common/clock.h"
#include "common/io.h"
#include "common/log.h"
#include "stores/journal/internal.h"

#ifndef JOURNAL_GROW	/* the fuzzer's is smaller: it appends 1000s of times */
#define JOURNAL_GROW (16u << 20)	/* zeros written ahead of the end */
#endif

/* ---------------------------------------------------------------- opening */

/*
 * Open name in the journal's directory (dir_fd; path names it in err) with
 * flags, never through a symbolic link, and only if it is a regular file
 * of uid that neither its group nor others can write: a journal
 * another user could write (or plant) could make carmyd replay a forged
 * result. Created 0600. The descriptor, or -errno and a sentence in err.
 */
int jnl_open_file(int dir_fd, const char *path, const char *name, int flags,
		  uid_t uid, char *err, size_t errlen)
{
	struct stat st;
	int fd, rc;

	/* A file to create is created, never taken over: whatever has the
	 * name (a link, a file of another user) goes first. O_NONBLOCK: a
	 * FIFO there would hold open() until a writer came; on a regular
	 * file it changes nothing. */
	if ((flags & O_CREAT) && unlinkat(dir_fd, name, 0) != 0 &&
	    errno != ENOENT) {
		rc = -errno;
		snprintf(err, errlen, "cannot remove %s: %s", path,
			 strerror(errno));
		return rc;
	}
	if (flags & O_CREAT)
		flags = (flags & ~O_TRUNC) | O_EXCL;
	fd = openat(dir_fd, name, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK,
		    0600);
	if (fd < 0) {
		rc = -errno;
		if (errno == ELOOP)
			snprintf(err, errlen, "%s is a symbolic link: refusing "
				 "to follow it", path);
		else
			snprintf(err, errlen, "cannot open %s: %s", path,
				 strerror(errno));
		return rc;
	}
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot stat %s: %s", path,
			 strerror(errno));
	} else if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		snprintf(err, errlen, "%s is not a regular file", path);
	} else if (st.st_uid != uid || (st.st_mode & 022) != 0) {
		rc = -EPERM;
		snprintf(err, errlen, "%s is owned by uid %u with mode %04o: "
			 "refusing it, since only uid %u may write the "
			 "journal", path, (unsigned)st.st_uid,
			 (unsigned)(st.st_mode & 07777), (unsigned)uid);
	} else {
		return fd;
	}
	close(fd);
	return rc;
}

/* A new file's header, with a salt of its own: a record of another
 * journal (an older one of the same directory) never passes in it. */
void jnl_make_head(struct jfile_head *h)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->jf_magic, JOURNAL_MAGIC, 8);
	h->jf_version = JOURNAL_VERSION;
	if (getrandom(&h->jf_salt, sizeof(h->jf_salt), 0) !=
	    sizeof(h->jf_salt))
		h->jf_salt = clock_real_ns() ^ (uint64_t)getpid() << 32;
	h->jf_created_ns = clock_real_ns();
	h->jf_check = XXH3_64bits(h, offsetof(struct jfile_head, jf_check));
}

int jnl_create_file(struct jnl *j, char *err, size_t errlen)
{
	char tmp[4096 + 8];
	uint8_t first[HEAD_SIZE + JREC_TAIL_MIN];
	struct jfile_head h;
	int fd, rc;

	/* The header and a head's worth of zeros: like every file carmyd
	 * leaves, it has zeros after its last record (none yet). The first
	 * commit grows it. */
	jnl_make_head(&h);
	memset(first, 0, sizeof(first));
	memcpy(first, &h, sizeof(h));
	/* Written whole under another name, flushed, then renamed and the
	 * directory flushed: a crash leaves either no journal or a good
	 * empty one, never a half-written header. */
	snprintf(tmp, sizeof(tmp), "%s.new", j->path);
	fd = jnl_open_file(j->dir_fd, tmp, JOURNAL_NEW,
			   O_RDWR | O_CREAT | O_TRUNC, geteuid(), err, errlen);
	if (fd < 0)
		return fd;
	rc = io_pwrite_all(fd, first, sizeof(first), 0);
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	if (rc == 0 && renameat(j->dir_fd, JOURNAL_NEW, j->dir_fd,
				JOURNAL_FILE) != 0)
		rc = -errno;
	if (rc == 0 && fsync(j->dir_fd) != 0)
		rc = -errno;
	if (rc != 0) {
		close(fd);
		unlinkat(j->dir_fd, JOURNAL_NEW, 0);
		snprintf(err, errlen, "cannot create journal %s: %s", j->path,
			 strerror(-rc));
		return rc;
	}
	j->fd = fd;
	log_info("created journal %s", j->path);
	return 0;
}

/*
 * Each batch in flight flushes through an open file description of its
 * own: the kernel reports a failed write-back once to each description,
 * so with two flushes running through one, the one that returned first
 * could miss an error the other took and answer a batch that is not on
 * the disk. Slot 0 flushes through j->fd; the others open the journal
 * again by its name in the directory (carmyd's own, holding the journal's
 * lock: a compaction renames over it only while nothing is in flight, and
 * opens these again after), and must find the same file. One that cannot
 * leaves fewer slots (j->depth), with a warning.
 */
void jnl_open_flights(struct jnl *j)
{
	struct stat st, again;
	int k;

	jnl_close_flights(j);
	j->flight[0].fd = j->fd;
	if (fstat(j->fd, &st) != 0) {
		j->depth = 1;
		return;
	}
	for (k = 1; k < j->depth; k++) {
		int fd = openat(j->dir_fd, JOURNAL_FILE, O_RDWR | O_NOFOLLOW |
				O_CLOEXEC | O_NONBLOCK);
		int e = errno;

		if (fd >= 0 && fstat(fd, &again) == 0 &&
		    again.st_dev == st.st_dev && again.st_ino == st.st_ino) {
			j->flight[k].fd = fd;
			continue;
		}
		if (fd >= 0) {
			close(fd);
			e = ESTALE;
		}
		log_warn("journal %s: cannot open it again (%s): %d batch%s "
			 "in flight at most", j->path, strerror(e), k,
			 k == 1 ? "" : "es");
		break;
	}
	j->depth = k;
}

void jnl_close_flights(struct jnl *j)
{
	for (int k = 1; k < JOURNAL_FLIGHT_MAX; k++) {
		if (j->flight[k].fd >= 0)
			close(j->flight[k].fd);
		j->flight[k].fd = -1;
	}
	j->flight[0].fd = -1;	/* j->fd, closed with the store */
}

/* Map the file's records for load(), after a compaction at start replaced
 * the file recovery had mapped. */
int jnl_map_file(struct jnl *j)
{
	void *m = mmap(NULL, (size_t)j->end, PROT_READ, MAP_SHARED, j->fd, 0);

	if (m == MAP_FAILED)
		return -errno;
	j->map = m;
	j->map_len = (size_t)j->end;
	return 0;
}

void jnl_unmap_file(struct jnl *j)
{
	if (j->map != NULL)
		munmap(j->map, j->map_len);
	j->map = NULL;
	j->map_len = 0;
}

/* ---------------------------------------------------------------- I/O */

/* Read exactly len bytes at off; a file that ends first is -EIO. */
int jnl_read_all(int fd, void *buf, size_t len, uint64_t off)
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
int jnl_buf_room(uint8_t **buf, size_t *cap, size_t need)
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

/*
 * Make room for need more bytes after end: write zeros ahead, flushed
 * once, so that commits never change the file's size. *size (the bytes
 * records may be written into) counts the growth only once its fsync()
 * has returned: zeros written before a failure (ENOSPC) were never
 * flushed, and a record written into them could be left, after a crash,
 * past the end of a file whose size never reached the disk. The next
 * growth writes them again.
 */
int jnl_grow_file(int fd, uint64_t end, uint64_t *size, uint64_t need)
{
	static const uint8_t zeros[65536];
	uint64_t target = end + need + JOURNAL_GROW, at = *size;

	target = (target + sizeof(zeros) - 1) / sizeof(zeros) * sizeof(zeros);
	while (at < target) {
		uint64_t n = target - at;
		int rc;

		if (n > sizeof(zeros))
			n = sizeof(zeros);
		rc = io_pwrite_all(fd, zeros, n, at);
		if (rc != 0)
			return rc;
		at += n;
	}
	if (fsync(fd) != 0)
		return -errno;
	*size = at;
	return 0;
}
