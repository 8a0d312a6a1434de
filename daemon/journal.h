/*
 * journal.h - the stores built into carmyd, as struct carmy_store_ops
 * (carmy_store.h): "memory" (store_mem.c) and "journal:DIR" (journal.c).
 */
#ifndef CARMY_DAEMON_JOURNAL_H
#define CARMY_DAEMON_JOURNAL_H

#include "carmy_store.h"

extern const struct carmy_store_ops memory_store_ops;
extern const struct carmy_store_ops journal_store_ops;

/* What journal_check() found (carmyctl journal-check). */
struct journal_report {
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

#endif
