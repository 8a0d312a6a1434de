/*
 * journal.h - the stores built into carmyd, as struct carmy_store_ops
 * (carmy_store.h): "memory" (store_mem.c) and "journal:DIR" (journal.c).
 */
#ifndef CARMY_DAEMON_JOURNAL_H
#define CARMY_DAEMON_JOURNAL_H

#include "carmy_store.h"

extern const struct carmy_store_ops memory_store_ops;
extern const struct carmy_store_ops journal_store_ops;

#endif
