/*
 * journal_recover.c - reading a journal file back, and starting one: the
 * file's header (a new one, and checking one), whether a record is whole
 * and good, sealing one, and recovery, which reads every record at open
 * (or for journal_check()) into the index and decides where the journal
 * ends; and the rewrite of a journal of the previous format. Format and
 * recovery are drawn in docs/journal.md.
 *
 * Recovery reads records from the start, checking each one's head (its own
 * CRC), sequence number (one more than the last) and checksum (XXH3 under
 * the file's random salt, so a record from another journal never passes).
 * The first record that fails is the end. Only a write cut short by a
 * crash may be cut off there, and only what such a write can leave counts
 * as one: sectors of the last batch still holding the zeros the file grew
 * with, in a file never shorter than the zeros ahead of its records. A
 * bad record that cannot be that is damage, and so is one that a good
 * record of a later batch follows: the journal is refused rather than
 * cut, since cutting would lose acknowledged records.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "carmy.h"
#include "carmy_store.h"
#include "common/clock.h"
#include "common/log.h"
#include "stores/journal/internal.h"


typedef size_t (*rec_valid_fn)(uint64_t salt, const uint8_t *p, size_t avail,
			       uint64_t seq);

static int judge(const struct jnl *j, uint64_t off, char *err,
		 size_t errlen);
static bool torn_v1(const struct jnl *j, uint64_t off);
static int later_batches(const struct jnl *j, uint64_t off, rec_valid_fn valid,
			 size_t rec_min, char *err, size_t errlen);
static unsigned tail_bits(const struct jnl *j, uint64_t off, uint64_t *first,
			  uint64_t *last);
static int zero_tail(const struct jnl *j, uint64_t off, uint64_t end);
static size_t rec_valid_v1(uint64_t salt, const uint8_t *p, size_t avail,
			   uint64_t seq);
static bool body_ok(uint8_t op, const uint8_t *body, size_t blen);
static bool head_ok(uint64_t salt, const uint8_t *p);
static uint32_t head_check(uint64_t salt, const uint8_t *p);
static uint64_t rec_sum(const uint8_t *p, size_t len, uint64_t salt);
static void pieces(const uint8_t *p, uint64_t off, size_t len,
		   uint32_t *light, uint32_t *zero);
static bool all_zero(const uint8_t *p, size_t n);
static bool next_extent(const struct jnl *j, uint64_t p, uint64_t *start,
			uint64_t *end);

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
	rc = jnl_write_all(fd, first, sizeof(first), 0);
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

int jnl_recover(struct jnl *j, char *err, size_t errlen)
{
	struct jfile_head h;
	uint64_t off = HEAD_SIZE, records = 0, first, last;
	rec_valid_fn valid = jnl_rec_valid;
	unsigned bits;
	int rc;

	if (j->size < HEAD_SIZE) {
		snprintf(err, errlen, "journal %s is %llu bytes, shorter than "
			 "its header: not a journal, or damaged at byte 0",
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
			 "is damaged at byte 0", j->path);
		return CARMY_ECORRUPT;
	}
	if (h.jf_version != JOURNAL_VERSION && h.jf_version != 1) {
		snprintf(err, errlen, "journal %s has format %u; this carmyd "
			 "reads formats 1 and %u", j->path, h.jf_version,
			 JOURNAL_VERSION);
		return CARMY_ELAYOUT;
	}
	j->version = h.jf_version;
	j->salt = h.jf_salt;
	/* Identities are read from the mapping while it holds the records;
	 * those appended later are read from the file. */
	j->ix.fd = j->fd;
	j->ix.map = j->map;
	j->ix.map_end = j->map_len;
	if (j->version == 1)
		valid = rec_valid_v1;

	for (;;) {
		size_t n = valid(j->salt, j->map + off, j->size - off,
				 j->seq + 1);

		if (n == 0)
			break;
		j->by_op[j->map[off + offsetof(struct jrec_head, jr_op)]]++;
		/* A format 1 journal is only read, to be rewritten: the
		 * index is built from the rewrite. */
		rc = j->version == 1 ? 0 : jidx_record(&j->ix, j->map + off, off);
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

	/* The file grows ahead of its records and never shrinks (a torn
	 * tail is zeroed, not cut off): records that run to within a head
	 * of its end were cut short. Format 1 files were cut. */
	if (j->version != 1 && j->size - off < JREC_TAIL_MIN) {
		snprintf(err, errlen, "journal %s is damaged at byte %llu: the "
			 "file ends %llu bytes after it, where carmyd always "
			 "leaves at least %zu bytes of zeros, so it was cut "
			 "short and acknowledged records may be lost. Keep a "
			 "copy and see docs/journal.md", j->path,
			 (unsigned long long)off,
			 (unsigned long long)(j->size - off), JREC_TAIL_MIN);
		return CARMY_ECORRUPT;
	}
	/* Is what follows the end zeros (a clean end), a torn tail, or
	 * damage? */
	bits = tail_bits(j, off, &first, &last);
	if (bits == 0)
		goto done;
	if (j->version == 1 && !torn_v1(j, off)) {
		snprintf(err, errlen, "journal %s is damaged at byte %llu: the "
			 "record there is whole on disk but fails its checksum, "
			 "so it may have been acknowledged; refusing to cut it "
			 "off. Keep a copy and see docs/journal.md", j->path,
			 (unsigned long long)off);
		return CARMY_ECORRUPT;
	}
	if (j->version != 1 &&
	    (rc = judge(j, off, err, errlen)) != 0)
		return rc;
	rc = later_batches(j, off, valid,
			   j->version == 1 ? REC_MIN_V1 : REC_MIN, err, errlen);
	if (rc != 0)
		return rc;
	j->torn = last + 1 - off;
	/* A format 1 file is rewritten without its tail, never changed. */
	if (j->readonly || j->version == 1)
		goto done;
	if (bits > JREC_LIGHT_BITS)
		log_warn("journal %s: zeroing a torn tail of %llu bytes at "
			 "byte %llu (a write cut short by a crash)", j->path,
			 (unsigned long long)j->torn,
			 (unsigned long long)off);
	else
		log_warn("journal %s: zeroing %u bit%s set at byte %llu, after "
			 "the last record (which ends at byte %llu): a write of "
			 "nearly empty sectors cut short by a crash, or bits "
			 "flipped in the zeros after the records; nothing "
			 "acknowledged lies there", j->path, bits,
			 bits == 1 ? "" : "s", (unsigned long long)first,
			 (unsigned long long)off);
	rc = zero_tail(j, off, last + 1);
	if (rc != 0) {
		snprintf(err, errlen, "cannot zero the torn tail of %s: %s",
			 j->path, strerror(-rc));
		return rc;
	}
done:
	if (!j->readonly && j->version != 1)
		log_info("journal %s: %llu records, %u executions standing",
			 j->path, (unsigned long long)records, j->ix.live);
	return 0;
}

/*
 * Can a write cut short by a crash explain the bad record at off, in a
 * file of this format? Bytes the journal never wrote are the zeros it grew
 * with, and a disk writes a 512-byte sector whole or not at all, so each
 * sector of a torn batch holds what was written or zeros. What
 * JREC_LIGHT_BITS flipped bits can do must not pass for that:
 *
 *  - a head that passes its own check is trusted: a record that runs to
 *    within a head of the file's end was cut short, one that is not the
 *    next is damage, and one that fails its checksum is torn only if more
 *    of its pieces are zeros than were light when it was written (flips
 *    can zero only a light piece);
 *  - a head that fails its check is torn only if a part of it in a
 *    sector of its own is zeros: never a flip, since each part holds a
 *    JREC_MARK, so no acknowledged record starts at off. Whatever is set
 *    after it, a few bits (a torn write of light sectors, or flips in the
 *    zeros after the last record) or many, was never acknowledged unless
 *    a good record of a later batch follows, which later_batches() looks
 *    for next.
 *
 * 0 if torn, or CARMY_ECORRUPT and a sentence naming the byte.
 */
static int judge(const struct jnl *j, uint64_t off, char *err,
		 size_t errlen)
{
	const uint8_t *p = j->map + off;
	uint64_t b = (off / JREC_SECTOR + 1) * JREC_SECTOR;
	const char *why;
	struct jrec_head h;
	bool zeros;

	memcpy(&h, p, sizeof(h));
	if (head_ok(j->salt, p)) {
		uint32_t light, zero;

		if (h.jr_len < REC_MIN || h.jr_len % 8 != 0 ||
		    h.jr_len > REC_MAX)
			why = "its head passes its check but gives a length no "
			      "record has";
		else if (h.jr_seq != j->seq + 1 || h.jr_batch > h.jr_seq)
			why = "the record there is not the next one";
		else if (h.jr_len > j->size - off - JREC_TAIL_MIN)
			why = "the record there runs to the end of the file, "
			      "so the file was cut short";
		else {
			pieces(p, off, h.jr_len, &light, &zero);
			if (zero > (h.jr_light & 0xffffffu))
				return 0;
			why = "the record there is whole on disk but fails its "
			      "checksum, so it may have been acknowledged";
		}
	} else {
		if (b < off + sizeof(h))
			zeros = all_zero(p, b - off) ||
				all_zero(p + (b - off), off + sizeof(h) - b);
		else
			zeros = all_zero(p, sizeof(h));
		/* However few bits are set after it: those are a torn
		 * write of light sectors, or flips in the zeros after the
		 * last record, and either way nothing acknowledged starts
		 * here (later_batches() then looks for one further on). */
		if (zeros)
			return 0;
		why = "the record head there fails its check";
	}
	snprintf(err, errlen, "journal %s is damaged at byte %llu: %s; "
		 "refusing to cut it off. Keep a copy and see docs/journal.md",
		 j->path, (unsigned long long)off, why);
	return CARMY_ECORRUPT;
}

/*
 * The same question for a format 1 file, by the rules it was written
 * under: a torn record runs past the end of the file, or has a piece,
 * from off or a sector boundary to the next boundary, that is still all
 * zeros. A length that cannot be read leaves only the head to judge by.
 */
static bool torn_v1(const struct jnl *j, uint64_t off)
{
	struct jrec_head_v1 h;
	uint64_t end;

	if (j->size - off < sizeof(h))
		return true;
	memcpy(&h, j->map + off, sizeof(h));
	if (h.jr_len >= REC_MIN_V1 && h.jr_len <= REC_MAX &&
	    h.jr_len % 8 == 0) {
		if (h.jr_len > j->size - off)
			return true;
		end = off + h.jr_len;
	} else {
		end = off + sizeof(h);
	}
	for (uint64_t p = off; p < end;) {
		uint64_t q = (p / JREC_SECTOR + 1) * JREC_SECTOR;

		if (q > end)
			q = end;
		if (all_zero(j->map + p, q - p))
			return true;
		p = q;
	}
	return false;
}

/*
 * A torn tail at off: records of the batch that was being written when
 * the crash came may have reached the disk out of order: they were never
 * acknowledged, and go with the tail. A good record of a later batch
 * proves the bad one was acknowledged (a batch is written only once the
 * one before it was flushed): then CARMY_ECORRUPT and a sentence.
 */
static int later_batches(const struct jnl *j, uint64_t off, rec_valid_fn valid,
			 size_t rec_min, char *err, size_t errlen)
{
	uint64_t hashed = 0, s, e = 0;

	for (uint64_t p = off + 8; p + rec_min <= j->size; p += 8) {
		struct jrec_head_v1 rh;	/* len, seq, batch: both formats */

		/* A hole is zeros, never a head: skip it. */
		if (p >= e) {
			if (!next_extent(j, p, &s, &e))
				break;
			if (s > p)
				p = (s + 7) / 8 * 8;
			if (p + rec_min > j->size)
				break;
		}
		memcpy(&rh, j->map + p, sizeof(rh));
		/* Only a head that could be one of ours is hashed: a later
		 * sequence number, no more records than the bytes could
		 * hold. Crafted bytes full of such heads could still cost a
		 * hash each: past a budget of 8x the file, the tail is
		 * judged damaged (refused), never cut on a guess. */
		if (rh.jr_batch <= j->seq + 1 || rh.jr_seq <= j->seq ||
		    rh.jr_seq - j->seq > (j->size - off) / rec_min ||
		    rh.jr_len < rec_min || rh.jr_len > j->size - p)
			continue;
		hashed += rh.jr_len;
		if (hashed > 8 * j->size) {
			snprintf(err, errlen, "journal %s: too many record-like "
				 "heads after byte %llu to tell a torn tail "
				 "from damage: refusing to cut. Keep a copy "
				 "and see docs/journal.md", j->path,
				 (unsigned long long)off);
			return CARMY_ECORRUPT;
		}
		if (valid(j->salt, j->map + p, j->size - p, rh.jr_seq) != 0) {
			snprintf(err, errlen, "journal %s is damaged at byte "
				 "%llu, and good records follow at byte %llu: "
				 "refusing to cut them off. Keep a copy and "
				 "see docs/journal.md", j->path,
				 (unsigned long long)off,
				 (unsigned long long)p);
			return CARMY_ECORRUPT;
		}
	}
	return 0;
}

/* The bits set in j's file after off, counted up to JREC_LIGHT_BITS + 1,
 * and the first and last bytes that are not zero (if any). Holes are
 * skipped. */
static unsigned tail_bits(const struct jnl *j, uint64_t off, uint64_t *first,
			  uint64_t *last)
{
	unsigned bits = 0;
	uint64_t s, e;

	*first = *last = off;
	for (uint64_t p = off; next_extent(j, p, &s, &e); p = e) {
		for (uint64_t q = s; q < e; q++) {
			if (j->map[q] == 0)
				continue;
			if (bits == 0)
				*first = q;
			*last = q;
			if (bits <= JREC_LIGHT_BITS)
				bits += (unsigned)__builtin_popcount(j->map[q]);
		}
	}
	return bits;
}

/* Zero a torn tail in place, [off, end), and flush: the file keeps its
 * size, so a record that runs past it is never a torn write. Holes are
 * zeros already. */
static int zero_tail(const struct jnl *j, uint64_t off, uint64_t end)
{
	static const uint8_t zeros[65536];
	uint64_t s, e;

	for (uint64_t p = off; p < end && next_extent(j, p, &s, &e); p = e) {
		if (e > end)
			e = end;
		for (uint64_t q = s; q < e;) {
			size_t n = e - q > sizeof(zeros) ? sizeof(zeros) :
							   (size_t)(e - q);
			int rc = jnl_write_all(j->fd, zeros, n, q);

			if (rc != 0)
				return rc;
			q += n;
		}
	}
	if (fdatasync(j->fd) != 0)
		return -errno;
	return 0;
}

/*
 * Rewrite the format 1 journal recovery just read (j->map, records up to
 * j->end) in this format: every record, in order, with its own sequence
 * number and a batch of its own, under a new salt, into journal.new,
 * flushed, renamed over the journal and the directory flushed, like a
 * compaction; then read the new file as the journal. The old file is never
 * changed: a failure before the rename leaves it as it was. A torn tail
 * of the old file is left behind with it.
 */
int jnl_upgrade(struct jnl *j, char *err, size_t errlen)
{
	char tmp[sizeof(j->path) + 8];
	struct jfile_head h;
	uint8_t *buf = NULL;
	size_t cap = 0, len = 0;
	uint64_t at = HEAD_SIZE, size, seq = 0, records = j->nrec;
	int fd, rc;

	snprintf(tmp, sizeof(tmp), "%s.new", j->path);
	fd = jnl_open_file(j->dir_fd, tmp, JOURNAL_NEW,
			   O_RDWR | O_CREAT | O_TRUNC, geteuid(), err, errlen);
	if (fd < 0)
		return fd;
	jnl_make_head(&h);
	rc = flock(fd, LOCK_EX | LOCK_NB) != 0 ? -errno : 0;
	if (rc == 0)
		rc = jnl_write_all(fd, &h, sizeof(h), 0);
	for (uint64_t off = HEAD_SIZE; rc == 0 && off < j->end;) {
		struct jrec_head_v1 o;
		struct jrec_head n;
		uint8_t *q;

		memcpy(&o, j->map + off, sizeof(o));
		memset(&n, 0, sizeof(n));
		n.jr_len = o.jr_len + (uint32_t)(sizeof(n) - sizeof(o));
		n.jr_op = o.jr_op;
		n.jr_seq = n.jr_batch = ++seq;
		rc = jnl_buf_room(&buf, &cap, len + n.jr_len);
		if (rc != 0)
			break;
		q = buf + len;
		memcpy(q, &n, sizeof(n));
		memcpy(q + sizeof(n), j->map + off + sizeof(o),
		       o.jr_len - sizeof(o) - 8);
		jnl_rec_seal(q, at + len, h.jf_salt);
		len += n.jr_len;
		off += o.jr_len;
		if (len >= JOURNAL_BATCH_MAX || off >= j->end) {
			rc = jnl_write_all(fd, buf, len, at);
			at += len;
			len = 0;
		}
	}
	free(buf);
	size = at;
	if (rc == 0)
		rc = jnl_grow_file(fd, at, &size, JREC_TAIL_MIN);
	/* The old file stays, as journal.v1 (a second name, flushed with the
	 * rename): what its rules called a torn tail is not carried over,
	 * and nothing should be lost beyond an operator's reach. */
	if (rc == 0 && unlinkat(j->dir_fd, JOURNAL_V1, 0) != 0 &&
	    errno != ENOENT)
		rc = -errno;
	if (rc == 0 && linkat(j->dir_fd, JOURNAL_FILE, j->dir_fd, JOURNAL_V1,
			      0) != 0)
		rc = -errno;
	if (rc == 0 && renameat(j->dir_fd, JOURNAL_NEW, j->dir_fd,
				JOURNAL_FILE) != 0)
		rc = -errno;
	if (rc != 0) {
		close(fd);
		unlinkat(j->dir_fd, JOURNAL_NEW, 0);
		snprintf(err, errlen, "cannot rewrite journal %s (format 1) "
			 "in format %d: %s; it is unchanged", j->path,
			 JOURNAL_VERSION, strerror(-rc));
		return rc;
	}
	log_info("journal %s: rewrote its %llu records from format 1 into "
		 "format %d; the format 1 file is kept as %s.v1, to remove "
		 "once carmyd runs well", j->path, (unsigned long long)records,
		 JOURNAL_VERSION, j->path);
	if (j->torn != 0)
		log_warn("journal %s: the torn tail of %llu bytes at byte %llu "
			 "of the format 1 file was not carried over", j->path,
			 (unsigned long long)j->torn,
			 (unsigned long long)j->end);
	/* The new file is the journal now, and holds the lock. */
	close(j->fd);
	j->fd = fd;
	if (fsync(j->dir_fd) != 0) {
		rc = -errno;
		snprintf(err, errlen, "journal %s was rewritten in format %d "
			 "but its directory cannot be flushed: %s", j->path,
			 JOURNAL_VERSION, strerror(-rc));
		return rc;
	}
	jnl_unmap_file(j);
	jidx_free(&j->ix);
	j->size = size;
	j->seq = j->nrec = j->torn = 0;
	memset(j->by_op, 0, sizeof(j->by_op));
	return jnl_recover(j, err, errlen);
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

/* ---------------------------------------------------------------- records */

/* Is there a whole, good record with sequence number seq at p? Returns its
 * length, or 0. Only bytes below avail are read. */
size_t jnl_rec_valid(uint64_t salt, const uint8_t *p, size_t avail,
		     uint64_t seq)
{
	struct jrec_head h;
	uint64_t sum;

	if (avail < REC_MIN)
		return 0;
	memcpy(&h, p, sizeof(h));
	if (h.jr_len < REC_MIN || h.jr_len > avail || h.jr_len % 8 != 0 ||
	    h.jr_len > REC_MAX || h.jr_seq != seq || h.jr_batch > h.jr_seq ||
	    !head_ok(salt, p))
		return 0;
	memcpy(&sum, p + h.jr_len - 8, 8);
	if (sum != rec_sum(p, h.jr_len, salt))
		return 0;
	/* The checksum proves these bytes were written by us; the sizes
	 * inside must still agree with the length. */
	if (!body_ok(h.jr_op, p + sizeof(h), h.jr_len - sizeof(h) - 8))
		return 0;
	return h.jr_len;
}

/* The same for a record of a format 1 file. */
static size_t rec_valid_v1(uint64_t salt, const uint8_t *p, size_t avail,
			   uint64_t seq)
{
	struct jrec_head_v1 h;
	uint64_t sum;

	if (avail < REC_MIN_V1)
		return 0;
	memcpy(&h, p, sizeof(h));
	if (h.jr_len < REC_MIN_V1 || h.jr_len > avail || h.jr_len % 8 != 0 ||
	    h.jr_len > REC_MAX || h.jr_seq != seq || h.jr_batch > h.jr_seq)
		return 0;
	memcpy(&sum, p + h.jr_len - 8, 8);
	if (sum != XXH3_64bits_withSeed(p, h.jr_len - 8, salt))
		return 0;
	if (!body_ok(h.jr_op, p + sizeof(h), h.jr_len - sizeof(h) - 8))
		return 0;
	return h.jr_len;
}

/* Do the sizes inside a payload of op (blen bytes, with its padding)
 * agree with it? */
static bool body_ok(uint8_t op, const uint8_t *body, size_t blen)
{
	switch (op) {
	case CARMY_STORE_RESERVE: {
		struct jrec_reserve rv;
		size_t id = 0;

		if (blen < sizeof(rv))
			return false;
		memcpy(&rv, body, sizeof(rv));
		for (int k = 0; k < 3; k++) {
			if (rv.rv_len[k] == 0 ||
			    rv.rv_len[k] > CARMY_STORE_ID_MAX)
				return false;
			id += rv.rv_len[k];
		}
		return sizeof(rv) + id <= blen;
	}
	case CARMY_STORE_COMPLETE:
	case CARMY_STORE_RESOLVE: {
		/* Both end in a result whose length is in their fixed part. */
		bool cp = op == CARMY_STORE_COMPLETE;
		size_t fixed = cp ? sizeof(struct jrec_complete) :
				    sizeof(struct jrec_resolve);
		uint32_t rlen;

		if (blen < fixed)
			return false;
		memcpy(&rlen, body + (cp ? offsetof(struct jrec_complete,
						    cp_result_len) :
					   offsetof(struct jrec_resolve,
						    rs_result_len)),
		       sizeof(rlen));
		return fixed + (size_t)rlen <= blen;
	}
	case CARMY_STORE_RELEASE:
	case CARMY_STORE_PURGE:
		return blen >= sizeof(struct jrec_release);
	default:
		return false;
	}
}

/*
 * Seal the record at p, which goes at file offset off: its head's len, op,
 * seq and batch and its payload are written, padding zeroed. Sets the
 * marks, the checksum, the count of light pieces (which depends on where
 * the sector boundaries fall, so a record copied elsewhere is sealed
 * again) and, last, the head's check over all of that.
 */
void jnl_rec_seal(uint8_t *p, uint64_t off, uint64_t salt)
{
	struct jrec_head h;
	uint32_t light, zero;
	uint64_t sum;

	memcpy(&h, p, sizeof(h));
	h.jr_mark = JREC_MARK;
	h.jr_pad = 0;
	h.jr_light = h.jr_check = 0;
	memcpy(p, &h, sizeof(h));
	sum = rec_sum(p, h.jr_len, salt);
	memcpy(p + h.jr_len - 8, &sum, 8);
	pieces(p, off, h.jr_len, &light, &zero);
	h.jr_light = light | JREC_MARK << 24;
	memcpy(p, &h, sizeof(h));
	h.jr_check = head_check(salt, p);
	memcpy(p, &h, sizeof(h));
}

/* The head at p is whole: its marks, and its check. */
static bool head_ok(uint64_t salt, const uint8_t *p)
{
	struct jrec_head h;

	memcpy(&h, p, sizeof(h));
	return h.jr_mark == JREC_MARK && h.jr_light >> 24 == JREC_MARK &&
	       h.jr_check == head_check(salt, p);
}

/*
 * CRC-32C (Castagnoli) of the salt, then the head at p up to jr_check. A
 * CRC rather than a hash: it finds every error of up to 5 bits in these 36
 * bytes, where a hash would only be unlikely to miss one; the salt makes a
 * head of another journal fail it.
 */
static uint32_t head_check(uint64_t salt, const uint8_t *p)
{
	uint8_t in[8 + offsetof(struct jrec_head, jr_check)];

	memcpy(in, &salt, 8);
	memcpy(in + 8, p, sizeof(in) - 8);
	return jnl_crc32c(in, sizeof(in));
}

/* CRC-32C a byte at a time, by table (reflected polynomial 0x82f63b78):
 * where the processor has no instruction for it. */
uint32_t jnl_crc32c_table(const void *buf, size_t n)
{
	static const uint32_t t[256] = {
	0x00000000, 0xf26b8303, 0xe13b70f7, 0x1350f3f4,
	0xc79a971f, 0x35f1141c, 0x26a1e7e8, 0xd4ca64eb,
	0x8ad958cf, 0x78b2dbcc, 0x6be22838, 0x9989ab3b,
	0x4d43cfd0, 0xbf284cd3, 0xac78bf27, 0x5e133c24,
	0x105ec76f, 0xe235446c, 0xf165b798, 0x030e349b,
	0xd7c45070, 0x25afd373, 0x36ff2087, 0xc494a384,
	0x9a879fa0, 0x68ec1ca3, 0x7bbcef57, 0x89d76c54,
	0x5d1d08bf, 0xaf768bbc, 0xbc267848, 0x4e4dfb4b,
	0x20bd8ede, 0xd2d60ddd, 0xc186fe29, 0x33ed7d2a,
	0xe72719c1, 0x154c9ac2, 0x061c6936, 0xf477ea35,
	0xaa64d611, 0x580f5512, 0x4b5fa6e6, 0xb93425e5,
	0x6dfe410e, 0x9f95c20d, 0x8cc531f9, 0x7eaeb2fa,
	0x30e349b1, 0xc288cab2, 0xd1d83946, 0x23b3ba45,
	0xf779deae, 0x05125dad, 0x1642ae59, 0xe4292d5a,
	0xba3a117e, 0x4851927d, 0x5b016189, 0xa96ae28a,
	0x7da08661, 0x8fcb0562, 0x9c9bf696, 0x6ef07595,
	0x417b1dbc, 0xb3109ebf, 0xa0406d4b, 0x522bee48,
	0x86e18aa3, 0x748a09a0, 0x67dafa54, 0x95b17957,
	0xcba24573, 0x39c9c670, 0x2a993584, 0xd8f2b687,
	0x0c38d26c, 0xfe53516f, 0xed03a29b, 0x1f682198,
	0x5125dad3, 0xa34e59d0, 0xb01eaa24, 0x42752927,
	0x96bf4dcc, 0x64d4cecf, 0x77843d3b, 0x85efbe38,
	0xdbfc821c, 0x2997011f, 0x3ac7f2eb, 0xc8ac71e8,
	0x1c661503, 0xee0d9600, 0xfd5d65f4, 0x0f36e6f7,
	0x61c69362, 0x93ad1061, 0x80fde395, 0x72966096,
	0xa65c047d, 0x5437877e, 0x4767748a, 0xb50cf789,
	0xeb1fcbad, 0x197448ae, 0x0a24bb5a, 0xf84f3859,
	0x2c855cb2, 0xdeeedfb1, 0xcdbe2c45, 0x3fd5af46,
	0x7198540d, 0x83f3d70e, 0x90a324fa, 0x62c8a7f9,
	0xb602c312, 0x44694011, 0x5739b3e5, 0xa55230e6,
	0xfb410cc2, 0x092a8fc1, 0x1a7a7c35, 0xe811ff36,
	0x3cdb9bdd, 0xceb018de, 0xdde0eb2a, 0x2f8b6829,
	0x82f63b78, 0x709db87b, 0x63cd4b8f, 0x91a6c88c,
	0x456cac67, 0xb7072f64, 0xa457dc90, 0x563c5f93,
	0x082f63b7, 0xfa44e0b4, 0xe9141340, 0x1b7f9043,
	0xcfb5f4a8, 0x3dde77ab, 0x2e8e845f, 0xdce5075c,
	0x92a8fc17, 0x60c37f14, 0x73938ce0, 0x81f80fe3,
	0x55326b08, 0xa759e80b, 0xb4091bff, 0x466298fc,
	0x1871a4d8, 0xea1a27db, 0xf94ad42f, 0x0b21572c,
	0xdfeb33c7, 0x2d80b0c4, 0x3ed04330, 0xccbbc033,
	0xa24bb5a6, 0x502036a5, 0x4370c551, 0xb11b4652,
	0x65d122b9, 0x97baa1ba, 0x84ea524e, 0x7681d14d,
	0x2892ed69, 0xdaf96e6a, 0xc9a99d9e, 0x3bc21e9d,
	0xef087a76, 0x1d63f975, 0x0e330a81, 0xfc588982,
	0xb21572c9, 0x407ef1ca, 0x532e023e, 0xa145813d,
	0x758fe5d6, 0x87e466d5, 0x94b49521, 0x66df1622,
	0x38cc2a06, 0xcaa7a905, 0xd9f75af1, 0x2b9cd9f2,
	0xff56bd19, 0x0d3d3e1a, 0x1e6dcdee, 0xec064eed,
	0xc38d26c4, 0x31e6a5c7, 0x22b65633, 0xd0ddd530,
	0x0417b1db, 0xf67c32d8, 0xe52cc12c, 0x1747422f,
	0x49547e0b, 0xbb3ffd08, 0xa86f0efc, 0x5a048dff,
	0x8ecee914, 0x7ca56a17, 0x6ff599e3, 0x9d9e1ae0,
	0xd3d3e1ab, 0x21b862a8, 0x32e8915c, 0xc083125f,
	0x144976b4, 0xe622f5b7, 0xf5720643, 0x07198540,
	0x590ab964, 0xab613a67, 0xb831c993, 0x4a5a4a90,
	0x9e902e7b, 0x6cfbad78, 0x7fab5e8c, 0x8dc0dd8f,
	0xe330a81a, 0x115b2b19, 0x020bd8ed, 0xf0605bee,
	0x24aa3f05, 0xd6c1bc06, 0xc5914ff2, 0x37faccf1,
	0x69e9f0d5, 0x9b8273d6, 0x88d28022, 0x7ab90321,
	0xae7367ca, 0x5c18e4c9, 0x4f48173d, 0xbd23943e,
	0xf36e6f75, 0x0105ec76, 0x12551f82, 0xe03e9c81,
	0x34f4f86a, 0xc69f7b69, 0xd5cf889d, 0x27a40b9e,
	0x79b737ba, 0x8bdcb4b9, 0x988c474d, 0x6ae7c44e,
	0xbe2da0a5, 0x4c4623a6, 0x5f16d052, 0xad7d5351,
	};
	const uint8_t *p = buf;
	uint32_t crc = 0xffffffffu;

	while (n-- > 0)
		crc = crc >> 8 ^ t[(crc ^ *p++) & 0xff];
	return ~crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same with SSE4.2's crc32 instruction, 8 bytes at a time: a head
 * is checked in a few nanoseconds instead of a hundred and more, which
 * a restart reading millions of records feels. */
__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42(const void *buf, size_t n)
{
	const uint8_t *p = buf;
	uint64_t crc = 0xffffffffu;

	for (; n >= 8; p += 8, n -= 8) {
		uint64_t w;

		memcpy(&w, p, 8);
		crc = __builtin_ia32_crc32di(crc, w);
	}
	for (; n > 0; p++, n--)
		crc = __builtin_ia32_crc32qi((uint32_t)crc, *p);
	return ~(uint32_t)crc;
}
#endif

/* CRC-32C of n bytes at buf (initial value and final xor 0xffffffff, as
 * iSCSI and ext4 use it: "123456789" gives 0xe3069283), with the
 * processor's instruction when it has one. */
uint32_t jnl_crc32c(const void *buf, size_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (__builtin_cpu_supports("sse4.2"))
		return crc32c_sse42(buf, n);
#endif
	return jnl_crc32c_table(buf, n);
}

/* A record's checksum: XXH3 of its head up to jr_light (which it leaves
 * out: the light pieces are counted with the checksum in place), seeding
 * XXH3 of its payload and padding, under the file's salt. */
static uint64_t rec_sum(const uint8_t *p, size_t len, uint64_t salt)
{
	const size_t hl = sizeof(struct jrec_head);
	uint64_t seed = XXH3_64bits_withSeed(p, offsetof(struct jrec_head,
							 jr_light), salt);

	return XXH3_64bits_withSeed(p + hl, len - hl - 8, seed);
}

/*
 * The pieces of the record at p (len bytes at file offset off) after its
 * head: from the head's end or a sector boundary to the next boundary or
 * the record's end. How many are light (at most JREC_LIGHT_BITS bits set)
 * and how many all zeros. A piece stops being counted once it is heavy,
 * so a record of ordinary bytes costs a word or two per piece.
 */
static void pieces(const uint8_t *p, uint64_t off, size_t len,
		   uint32_t *light, uint32_t *zero)
{
	*light = *zero = 0;
	for (uint64_t a = off + sizeof(struct jrec_head); a < off + len;) {
		uint64_t b = (a / JREC_SECTOR + 1) * JREC_SECTOR;
		unsigned bits = 0;

		if (b > off + len)
			b = off + len;
		for (uint64_t q = a; q < b && bits <= JREC_LIGHT_BITS; q += 8) {
			uint64_t w;

			memcpy(&w, p + (q - off), 8);
			bits += (unsigned)__builtin_popcountll(w);
		}
		*light += bits <= JREC_LIGHT_BITS;
		*zero += bits == 0;
		a = b;
	}
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != 0)
			return false;
	return true;
}

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

