/*
 * journal.h - the journal store ("journal:DIR", journal_store_ops in
 * stores/stores.h): what carmyd and carmyctl call beyond its ops table.
 */
#ifndef CARMY_STORES_JOURNAL_H
#define CARMY_STORES_JOURNAL_H

#include "stores/stores.h"

/* The journal's format: what carmyd writes (it reads format 1 too, and
 * rewrites it at start). */
#define JOURNAL_VERSION_NOW 2

/* What journal_check() found (carmyctl journal-check). */
struct journal_report {
	uint32_t version;	/* the file's format; 1: rewritten at start,
				 * and not indexed: completed and
				 * unfinished are 0 */
	uint64_t file_bytes;
	uint64_t end;		/* where good records end */
	uint64_t torn;		/* bytes a start would cut after end */
	uint64_t records;
	uint64_t by_op[CARMY_STORE_PURGE + 1];	/* indexed by op */
	uint64_t completed;	/* executions standing with a result */
	uint64_t unfinished;	/* ... without: uncertain after a reboot */
};

int journal_check(const char *dir, struct journal_report *rep, char *err,
		  size_t errlen);

/*
 * Online compaction of an open journal store (a void *store from
 * journal_store_ops.open). The threshold is read at open from the
 * environment, CARMY_JOURNAL_COMPACT_MIN (default 1000 records).
 */
struct journal_stats {
	uint64_t compactions;		/* online compactions done */
	uint64_t compact_failures;	/* ... given up (old journal kept) */
	uint64_t last_pause_ns;		/* the last one's switch: commits */
	uint64_t last_pause_bytes;	/* waited this long, while it copied
					 * this many bytes of records */
	uint64_t last_old_end;		/* the last one done: where records */
	uint64_t last_new_end;		/* ended in the old file and the new,
					 * at the switch */
	uint64_t records;		/* records in the journal file */
	uint64_t end;			/* where they end (header included) */
};

/* Thread-safe; a snapshot as of the last batch or compaction done. */
void journal_get_stats(void *store, struct journal_stats *st);

/* Where a compaction is when it calls its hook. */
enum journal_compact_phase {
	JOURNAL_COMPACT_SNAPSHOT,	/* snapshot taken, nothing written */
	JOURNAL_COMPACT_REWRITTEN,	/* what stood written to journal.new */
	JOURNAL_COMPACT_SWITCHING,	/* about to pause commits and switch */
	JOURNAL_COMPACT_DONE,		/* commits resumed; rc 0 or -errno */
};

/* Called on the compactor thread, holding no lock and not pausing
 * commits: it may submit requests and wait for them. */
typedef void (*journal_compact_hook)(void *arg,
				     enum journal_compact_phase phase, int rc);

/* For tests: fn is called between the phases of every later online
 * compaction (NULL: none). Thread-safe. */
void journal_set_compact_hook(void *store, journal_compact_hook fn, void *arg);

#endif
