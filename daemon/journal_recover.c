/*
 * journal_recover.c - reading a journal file back, and starting one: the
 * file's header (a new one, and checking one), whether a record is whole
 * and good, and recovery, which reads every record at open (or for
 * journal_check()) into the index and decides where the journal ends.
 * Format and recovery are drawn in docs/journal.md.
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
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "carmy.h"
#include "carmy_store.h"
#include "daemon/journal_int.h"
#include "daemon/log.h"

static bool torn(const struct jnl *j, uint64_t off);
static bool next_extent(const struct jnl *j, uint64_t p, uint64_t *start,
			uint64_t *end);
static uint64_t now_ns(void);

/* ---------------------------------------------------------------- recovery */

/* A new file's header, with a salt of its own: a record of another
 * journal (an older one of the same directory) never passes in it. */
void jnl_make_head(struct jfile_head *h)
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

int jnl_create_file(struct jnl *j, char *err, size_t errlen)
{
	char tmp[4096 + 8];
	struct jfile_head h;
	int fd, rc;

	jnl_make_head(&h);
	/* Written whole under another name, flushed, then renamed and the
	 * directory flushed: a crash leaves either no journal or a good
	 * empty one, never a half-written header. */
	snprintf(tmp, sizeof(tmp), "%s.new", j->path);
	fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		goto fail;
	}
	rc = jnl_write_all(fd, &h, sizeof(h), 0);
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

int jnl_recover(struct jnl *j, char *err, size_t errlen)
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
		size_t n = jnl_rec_valid(j->salt, j->map + off,
					 j->size - off, j->seq + 1);

		if (n == 0)
			break;
		j->by_op[j->map[off + offsetof(struct jrec_head, jr_op)]]++;
		rc = jidx_record(&j->ix, j->map + off, off);
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
	uint64_t last = off, s, e;

	for (uint64_t p = off; next_extent(j, p, &s, &e); p = e) {
		for (uint64_t q = s; q < e; q++) {
			if (j->map[q] != 0) {
				zeros = false;
				last = q;
			}
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

		e = 0;
		for (uint64_t p = off + 8; p + REC_MIN <= j->size; p += 8) {
			struct jrec_head rh;

			/* A hole is zeros, never a head: skip it. */
			if (p >= e) {
				if (!next_extent(j, p, &s, &e))
					break;
				if (s > p)
					p = (s + 7) / 8 * 8;
				if (p + REC_MIN > j->size)
					break;
			}
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
			if (jnl_rec_valid(j->salt, j->map + p, j->size - p,
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

/*
 * The next stretch of j's file at or after p that may hold anything but
 * zeros: [*start, *end), or false if there is none. A hole reads as zeros
 * and is skipped, so that a file made sparse and huge (truncate -s 1T) is
 * read in the time its data takes, not its length. Where the file system
 * cannot tell, all the rest is one stretch.
 */
static bool next_extent(const struct jnl *j, uint64_t p, uint64_t *start,
			uint64_t *end)
{
	off_t d, h;

	if (p >= j->size)
		return false;
	d = lseek(j->fd, (off_t)p, SEEK_DATA);
	if (d < 0 && errno == ENXIO)
		return false;	/* a hole to the end */
	if (d < 0 || (uint64_t)d >= j->size) {
		*start = p;
		*end = j->size;
		return d < 0;
	}
	h = lseek(j->fd, d, SEEK_HOLE);
	*start = (uint64_t)d;
	*end = h < 0 || (uint64_t)h > j->size ? j->size : (uint64_t)h;
	return *start < *end;
}

/* Is there a whole, good record with sequence number seq at p? Returns its
 * length, or 0. Only bytes below avail are read. */
size_t jnl_rec_valid(uint64_t salt, const uint8_t *p, size_t avail,
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

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
