/*
 * internal.h - what the journal store's files share, and nothing else:
 * struct jnl, the index, the record formats, and the functions one file
 * calls in another. Private to carmyd (and the programs that link the
 * journal's files): not installed; the store's public face is journal.h.
 *
 * The files form one chain, lowest first: each calls only the files
 * before it, never one after it, so there are no circles
 * (scripts/layering.py checks the build). The sections below follow the
 * same order, each named after the file that defines its functions.
 *
 *   file.c     opening the journal's files, a new header, whole reads
 *              and writes, growing a file with zeros, mapping it
 *   record.c   the record format: size, write, seal, check (both formats)
 *   index.c    what stands and where (struct jidx)
 *   recover.c  reading the file back at open, the format 1 rewrite
 *   compact.c  compaction, at start and online, and the token's hand-back
 *              after a batch, where an online compaction starts
 *   journal.c  the store: open/load/submit/close, writer, commits;
 *              nothing calls it but carmyd and carmyctl (journal.h)
 */
#ifndef CARMY_STORES_JOURNAL_INTERNAL_H
#define CARMY_STORES_JOURNAL_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "carmy_store.h"
#include "stores/journal/journal.h"

#define JOURNAL_MAGIC "CARMYJNL"
#define JOURNAL_FILE "journal"
#define JOURNAL_NEW "journal.new"
/* Left by a run whose write or flush failed: the next open rewrites the
 * journal before it trusts what it reads (journal.c, after_failure()). */
#define JOURNAL_FAILED "journal.failed"
#define JOURNAL_V1 "journal.v1"	/* a format 1 file, kept once upgraded */
#define JOURNAL_VERSION JOURNAL_VERSION_NOW
#define JOURNAL_BATCH_MAX (4u << 20)	/* bytes per pwrite, about */
/* Batches written and not yet answered, at most: CARMY_JOURNAL_FLIGHT
 * (1 to JOURNAL_FLIGHT_MAX), read when the store opens. */
#define JOURNAL_FLIGHT_ENV "CARMY_JOURNAL_FLIGHT"
#define JOURNAL_FLIGHT_MAX 4
#define JOURNAL_FLIGHT_DEFAULT 1

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

/*
 * One batch from the moment its place in the file is reserved until it is
 * answered. Batches are answered in file order: one whose flush returns
 * before an older one's waits for it. Each slot flushes through an open
 * file description of its own (fd), so that a write-back error is
 * reported to every flush that follows it, not only to the first of two
 * running at once (the kernel reports it once per description).
 */
struct jflight {
	struct carmy_store_req *reqs;	/* its requests, in order */
	uint8_t *buf;		/* its records, sealed */
	size_t cap;
	size_t len;		/* bytes of records */
	uint64_t off;		/* where they go in the file */
	uint64_t first;		/* the first one's sequence number */
	uint64_t n;		/* records */
	int fd;			/* the file, opened for this slot */
	int rc;			/* how its write and flush went */
	bool busy;		/* reserved and not yet answered */
	bool flushed;		/* written and flushed, or failed (rc) */
	struct jflight *next;	/* the next younger batch in flight */
};

struct jnl {
	int fd;
	int dir_fd;
	char path[4096];
	uint64_t salt;
	uint64_t end;		/* where the answered records end */
	uint64_t size;		/* bytes in the file, zeros after its records */
	uint64_t seq;		/* of the last record answered */
	uint64_t nrec;		/* records in the file, answered */
	int broken;		/* -errno once a write or flush failed */

	pthread_t writers[JOURNAL_FLIGHT_MAX + 1];
	int nwriters;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct carmy_store_req *head, **tail;	/* queued, oldest first */
	/*
	 * Batches in flight (under lock): each reserves its bytes and
	 * numbers at wend and wseq, is written and flushed by the thread
	 * that took it, and is answered in file order by whoever holds
	 * acking, which also owns end, seq, nrec, alone and the counters
	 * (under lock) and, unless compacting, ix.
	 */
	struct jflight flight[JOURNAL_FLIGHT_MAX];
	int depth;		/* slots in use: batches in flight at most */
	int inflight;		/* slots reserved and not yet answered */
	struct jflight *oldest, **youngest;	/* in flight, in file order */
	bool acking;
	uint64_t wend;		/* where the next batch goes */
	uint64_t wseq;		/* the last sequence number handed out */
	/* The token: whoever set it (under lock) has the file to itself: no
	 * batch starts meanwhile. A batch that must grow the file holds it
	 * while it grows it (the batches in flight write below j->size);
	 * the compactor while it switches files, once nothing is in
	 * flight: it owns fd, salt, end, size, seq, nrec and ix then. */
	bool flushing;
	bool alone;		/* the last batch held one record */
	bool stopping;

	uint64_t flushes;	/* batches made durable, and their records */
	uint64_t records;
	bool readonly;		/* journal_check(): read, never cut */
	uint32_t version;	/* of the file recovery read (1: to rewrite) */
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

/*
 * Every record: this head, its payload, zero padding to 8 bytes, and an
 * 8-byte checksum of all that (the head's last word left out: it holds
 * what is computed from the checksum). jr_len counts all of it.
 *
 * The head has a check of its own, jr_check, so that its length is
 * trusted, or the head known to be damaged, before the payload is looked
 * at: a CRC, which finds every error of up to 5 bits in it, not only most.
 * Its first and last words each hold JREC_MARK, so that no error of fewer
 * than 4 bits can turn either half of a head split by a sector boundary
 * into zeros, which is what an unwritten sector looks like. jr_light
 * counts the record's light pieces as written (docs/journal.md,
 * Recovery): recovery calls a record torn only if it shows more pieces of
 * zeros than that, which no error of up to JREC_LIGHT_BITS bits can do.
 */
struct jrec_head {
	uint32_t jr_len;
	uint8_t jr_op;		/* enum carmy_store_op */
	uint8_t jr_mark;	/* JREC_MARK */
	uint16_t jr_pad;
	uint64_t jr_seq;	/* one more than the record before */
	uint64_t jr_batch;	/* the first record not yet durable when it
				 * was written: its batch's first, or an
				 * earlier one still in flight */
	uint32_t jr_light;	/* light pieces, | JREC_MARK << 24 */
	uint32_t jr_check;	/* CRC-32C of the salt, then the head above */
};

/* The head of a format 1 record (a journal of an earlier carmyd, read
 * once and rewritten in this format at open). */
struct jrec_head_v1 {
	uint32_t jr_len;
	uint8_t jr_op;
	uint8_t jr_pad[3];
	uint64_t jr_seq;
	uint64_t jr_batch;
};

#define JREC_MARK 0xa5u
/* A piece of a record (its bytes after the head, from the head or a
 * 512-byte sector boundary to the next boundary) with at most this many
 * bits set is light: that many flipped bits could turn it into zeros. */
#define JREC_LIGHT_BITS 3
#define JREC_SECTOR 512
/* Zeros after the last record in every file carmyd leaves (crashes
 * included): the file grows ahead of its records and never shrinks, so a
 * file whose records run closer to its end than this was cut short. */
#define JREC_TAIL_MIN sizeof(struct jrec_head)

struct jrec_reserve {
	uint8_t rv_exec[16];
	uint8_t rv_fingerprint[16];
	uint8_t rv_rawprint[16];
	uint64_t rv_started_ns;
	uint32_t rv_pid;
	uint16_t rv_len[3];
	uint16_t rv_flags;	/* JRV_*; 0 in a record of an older carmyd */
	/* then the three identity parts, back to back; then, with
	 * JRV_CALL, a struct jrec_call and the bytes it keeps */
};

/* rv_flags: a struct jrec_call follows the identity. No other bit is
 * ever set: a record with one is not ours. */
#define JRV_CALL 1u

/* What the call of a RESERVE was (struct carmy_store_record's tool, args
 * and result_format): the whole lengths, how many bytes of each are
 * kept, and the format; then the kept bytes of the tool name and of the
 * arguments, back to back. Unaligned in the record: read with memcpy. */
struct jrec_call {
	uint32_t jc_tool_len;
	uint32_t jc_args_len;
	uint16_t jc_tool_kept;	/* <= CARMY_STORE_TOOL_MAX, <= jc_tool_len */
	uint16_t jc_args_kept;	/* <= CARMY_STORE_ARGS_MAX, <= jc_args_len */
	uint8_t jc_format;
	uint8_t jc_pad[3];
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
#define REC_MIN_V1 (sizeof(struct jrec_head_v1) + sizeof(struct jrec_release) + 8)
/* The largest record: a COMPLETE or a committed RESOLVE with the largest
 * result carmyd allows (and the padding and checksum after it). */
#define REC_FIXED_MAX (sizeof(struct jrec_resolve) > sizeof(struct jrec_complete) ? \
		       sizeof(struct jrec_resolve) : sizeof(struct jrec_complete))
#define REC_MAX (sizeof(struct jrec_head) + REC_FIXED_MAX + (64u << 20) + 16)
_Static_assert(sizeof(struct jrec_reserve) + 3 * CARMY_STORE_ID_MAX +
	       sizeof(struct jrec_call) + CARMY_STORE_TOOL_MAX +
	       CARMY_STORE_ARGS_MAX < REC_FIXED_MAX + (64u << 20),
	       "a RESERVE fits under REC_MAX");
_Static_assert(sizeof(struct jrec_call) == 16, "a call's fixed part");
_Static_assert(sizeof(struct jrec_head) == 32, "the head is four words");
_Static_assert(REC_MAX / JREC_SECTOR + 2 < (1u << 24),
	       "a record's light pieces fit in jr_light's 24 bits");

/* ------------------------------------------------------------------ file.c */

/* Open a file of the journal's directory: uid's own, not a link, a
 * regular file no one else can write; -errno and a sentence in err */
int jnl_open_file(int dir_fd, const char *path, const char *name, int flags,
		  uid_t uid, char *err, size_t errlen);
/* A new file header, its own salt: jnl_create_file(), new_file(), the
 * upgrade */
void jnl_make_head(struct jfile_head *h);
/* Create an empty journal at j->path, crash-safe: jnl_open() */
int jnl_create_file(struct jnl *j, char *err, size_t errlen);
/* Open the file again for each slot of j->flight past the first (which
 * flushes through j->fd); fewer slots (j->depth) if it cannot: the writers'
 * start, switch_to() */
void jnl_open_flights(struct jnl *j);
/* Close what jnl_open_flights() opened: jnl_close(), switch_to() */
void jnl_close_flights(struct jnl *j);
/* Map the records at j->map: jnl_load(), after a compaction at start */
int jnl_map_file(struct jnl *j);
/* Drop j->map, if any: jnl_load(), jnl_close(), switch_to(), the upgrade */
void jnl_unmap_file(struct jnl *j);
/* pread() len bytes at off, -EIO at EOF: same_ident(), read_records() */
int jnl_read_all(int fd, void *buf, size_t len, uint64_t off);
/* Grow *buf to need bytes, 0 or -ENOMEM: commit(), the compaction, the
 * upgrade */
int jnl_buf_room(uint8_t **buf, size_t *cap, size_t need);
/* Write zeros ahead so need bytes fit: commit(), rewrite_standing(),
 * copy_delta(), the upgrade */
int jnl_grow_file(int fd, uint64_t end, uint64_t *size, uint64_t need);

/* ---------------------------------------------------------------- record.c */

/* Bytes req's record takes, sealed: commit path, put_standing() */
size_t jnl_rec_size(const struct carmy_store_req *req);
/* Write and seal req's record at p, for file offset off: commit(),
 * put_standing() */
void jnl_rec_put(const struct carmy_store_req *req, uint64_t seq,
		 uint64_t batch, uint64_t salt, uint64_t off, uint8_t *p,
		 size_t len);
/* Seal the record at p (head's len, op, seq and batch and its payload
 * written) for file offset off: jnl_rec_put(), reseal(), the upgrade */
void jnl_rec_seal(uint8_t *p, uint64_t off, uint64_t salt);
/* Good record numbered seq at p? Its length or 0: recovery, compaction */
size_t jnl_rec_valid(uint64_t salt, const uint8_t *p, size_t avail,
		     uint64_t seq);
/* The same for a format 1 record: recovery of a format 1 file */
size_t jnl_rec_valid_v1(uint64_t salt, const uint8_t *p, size_t avail,
			uint64_t seq);
/* Does the head at p pass its own check (marks and CRC)? judge() */
bool jnl_rec_head_ok(uint64_t salt, const uint8_t *p);
/* Count the light and the all-zero pieces of the record at p (len bytes
 * at file offset off) after its head: jnl_rec_seal(), judge() */
void jnl_rec_pieces(const uint8_t *p, uint64_t off, size_t len,
		    uint32_t *light, uint32_t *zero);
/* CRC-32C of n bytes, by the processor's instruction where it has one:
 * a record head's check */
uint32_t jnl_crc32c(const void *buf, size_t n);
/* The same by table, always: the fallback, and tests that compare them */
uint32_t jnl_crc32c_table(const void *buf, size_t n);

/* ----------------------------------------------------------------- index.c */

/* Apply the record at off to ix: recovery, commits, compaction */
int jidx_record(struct jidx *ix, const uint8_t *p, uint64_t off);
/* Room for one more execution: jidx_record(), put_standing() */
int jidx_room(struct jidx *ix);
/* Add a standing execution, after jidx_room(): same callers */
struct jexec *jidx_add(struct jidx *ix, const uint8_t exec[16],
		       uint64_t ih, uint64_t off, uint32_t *ident_slot);
/* Free ix's tables, empty it: jnl_close(), jnl_lose_index(), compaction */
void jidx_free(struct jidx *ix);
/* Execution x as a record pointing into map: jnl_load(), put_standing() */
void jidx_standing(const uint8_t *map, const struct jexec *x,
		   struct carmy_store_record *r);

/* --------------------------------------------------------------- recover.c */

/* Read records into j->ix, find the end: jnl_open(), journal_check() */
int jnl_recover(struct jnl *j, char *err, size_t errlen);
/* Rewrite a format 1 journal that recovery read in this format: jnl_open() */
int jnl_upgrade(struct jnl *j, char *err, size_t errlen);

/* --------------------------------------------------------------- compact.c */

/* Give the token back (lock held), maybe compact: writer, submit, compactor */
void jnl_batch_done(struct jnl *j);
/* Stop trusting the index (token held): index_batch(), abandon() */
void jnl_lose_index(struct jnl *j, int rc);
/* Worth compacting now? (token's holder): jnl_open(), jnl_batch_done() */
bool jnl_needs_compaction(const struct jnl *j);
/* Compact before any thread runs (*renamed: it took over): jnl_open() */
int jnl_compact_at_start(struct jnl *j, bool *renamed);
/* Room on the disk for a compaction's copy? room_to_compact(), tests */
bool jnl_compaction_fits(uint64_t free_bytes, uint64_t end, uint64_t nrec,
			 uint64_t needed);
/* The threshold, CARMY_JOURNAL_COMPACT_MIN or 1000: jnl_open() */
uint64_t jnl_compact_min_env(void);

#endif
