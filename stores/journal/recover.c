/*
 * recover.c - reading a journal file back: recovery, which reads every
 * record at open (or for journal_check()) into the index and decides
 * where the journal ends, and the rewrite of a journal of the previous
 * format. Format and recovery are drawn in docs/journal.md. Records are
 * checked by record.c, files read and written by file.c.
 *
 * Recovery reads records from the start, checking each one's head (its own
 * CRC), sequence number (one more than the last) and checksum (XXH3 under
 * the file's random salt, so a record from another journal never passes).
 * The first record that fails is the end. Only a write cut short by a
 * crash may be cut off there, and only what such a write can leave counts
 * as one: sectors of the last batch still holding the zeros the file grew
 * with, in a file never shorter than the zeros ahead of its records. A
 * bad record that cannot be that is damage, and so is one followed by a
 * good record written once the bad one was durable (its batch field says
 * so): the journal is refused rather than cut, since cutting would lose
 * acknowledged records. Good records of batches that were in flight
 * beside the torn one go with the tail: none of them was answered.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/file.h>
#include <unistd.h>

#include <xxhash.h>

#include "carmy.h"
#include "carmy_store.h"
#include "common/io.h"
#include "common/log.h"
#include "stores/journal/internal.h"

typedef size_t (*rec_valid_fn)(uint64_t salt, const uint8_t *p, size_t avail,
			       uint64_t seq);

static int map_head(struct jnl *j, char *err, size_t errlen);
static int read_records(struct jnl *j, rec_valid_fn valid, char *err,
			size_t errlen);
static int check_tail(struct jnl *j, rec_valid_fn valid, unsigned *bits,
		      uint64_t *first, char *err, size_t errlen);
static int cut_tail(struct jnl *j, unsigned bits, uint64_t first, char *err,
		    size_t errlen);
static int judge(const struct jnl *j, uint64_t off, char *err,
		 size_t errlen);
static bool torn_v1(const struct jnl *j, uint64_t off);
static int later_batches(const struct jnl *j, uint64_t off, rec_valid_fn valid,
			 size_t rec_min, char *err, size_t errlen);
static unsigned tail_bits(const struct jnl *j, uint64_t off, uint64_t *first,
			  uint64_t *last);
static int zero_tail(const struct jnl *j, uint64_t off, uint64_t end);
static bool all_zero(const uint8_t *p, size_t n);
static bool next_extent(const struct jnl *j, uint64_t p, uint64_t *start,
			uint64_t *end);

/* ---------------------------------------------------------------- recovery */

/*
 * Read j's file (j->fd, j->size bytes) as the journal: its header, then
 * its records into j->ix up to the first that fails, which is the end;
 * then what follows them, zeros or a torn tail (zeroed unless readonly or
 * format 1) or damage (refused). 0, or a code and a sentence in err.
 */
int jnl_recover(struct jnl *j, char *err, size_t errlen)
{
	rec_valid_fn valid;
	uint64_t first = 0;
	unsigned bits = 0;
	int rc;

	rc = map_head(j, err, errlen);
	if (rc != 0)
		return rc;
	valid = j->version == 1 ? jnl_rec_valid_v1 : jnl_rec_valid;
	rc = read_records(j, valid, err, errlen);
	if (rc == 0)
		rc = check_tail(j, valid, &bits, &first, err, errlen);
	/* A format 1 file is rewritten without its tail, never changed. */
	if (rc == 0 && bits != 0 && !j->readonly && j->version != 1)
		rc = cut_tail(j, bits, first, err, errlen);
	if (rc != 0)
		return rc;
	/* What was read may be a killed carmyd's last batch, written and
	 * never flushed: in the page cache, not yet on the disk. Flushed
	 * before anything read is loaded or answered, or a result served
	 * from it could be lost to a power cut after all. (A format 1 file
	 * is rewritten into a flushed new one.) */
	if (!j->readonly && j->version != 1 && fdatasync(j->fd) != 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot flush journal %s: %s", j->path,
			 strerror(errno));
		return rc;
	}
	if (!j->readonly && j->version != 1)
		log_info("journal %s: %llu records, %u executions standing",
			 j->path, (unsigned long long)j->nrec, j->ix.live);
	return 0;
}

/* Map the file and check its header: the format it is in, and its salt. */
static int map_head(struct jnl *j, char *err, size_t errlen)
{
	struct jfile_head h;

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
	return 0;
}

/* Every good record from the header on, in order, into j->ix (and
 * j->by_op); sets where they end (j->end), and how many (j->nrec). */
static int read_records(struct jnl *j, rec_valid_fn valid, char *err,
			size_t errlen)
{
	uint64_t off = HEAD_SIZE, records = 0;
	int rc;

	/* Identities are read from the mapping while it holds the records;
	 * those appended later are read from the file. */
	j->ix.fd = j->fd;
	j->ix.map = j->map;
	j->ix.map_end = j->map_len;
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
	return 0;
}

/*
 * Is what follows the records zeros (a clean end: *bits 0), a torn tail,
 * or damage (refused)? For a torn tail, *bits counts the bits set in it
 * (up to JREC_LIGHT_BITS + 1), *first is its first byte not zero, and
 * j->torn how many bytes a cut would remove.
 */
static int check_tail(struct jnl *j, rec_valid_fn valid, unsigned *bits,
		      uint64_t *first, char *err, size_t errlen)
{
	uint64_t off = j->end, last;
	int rc;

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
	*bits = tail_bits(j, off, first, &last);
	if (*bits == 0)
		return 0;
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
	return 0;
}

/* Zero the torn tail check_tail() found, saying what it was. */
static int cut_tail(struct jnl *j, unsigned bits, uint64_t first, char *err,
		    size_t errlen)
{
	uint64_t off = j->end;
	int rc;

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
	rc = zero_tail(j, off, off + j->torn);
	if (rc != 0) {
		snprintf(err, errlen, "cannot zero the torn tail of %s: %s",
			 j->path, strerror(-rc));
		return rc;
	}
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
	if (jnl_rec_head_ok(j->salt, p)) {
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
			jnl_rec_pieces(p, off, h.jr_len, &light, &zero);
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
 * A torn tail at off: the records of the batches in flight when the crash
 * came (up to CARMY_JOURNAL_FLIGHT of them, written side by side) may have
 * reached the disk in any order, whole, in part or not at all: none of
 * them was answered (batches are answered in file order, each after its
 * flush and the ones before it), and they go with the tail, even whole
 * ones after a hole. Each record's batch field is the first record that
 * was not yet durable when it was written, so a good record further on
 * whose batch field is past the bad one's number proves the bad one was
 * durable, and maybe acknowledged: then CARMY_ECORRUPT and a sentence.
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
		/* Only a head that could prove something is hashed: written
		 * once the bad record was durable, a later sequence number,
		 * no more records than the bytes could hold. Crafted bytes full of such heads could still cost a
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
			int rc = io_pwrite_all(j->fd, zeros, n, q);

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
		rc = io_pwrite_all(fd, &h, sizeof(h), 0);
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
			rc = io_pwrite_all(fd, buf, len, at);
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

/* ---------------------------------------------------------------- helpers */

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != 0)
			return false;
	return true;
}
