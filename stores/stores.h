/*
 * stores.h - the back-ends built into carmyd, as struct carmy_store_ops
 * (carmy_store.h): "memory" (stores/memory.c) and "journal:DIR"
 * (stores/journal/). Others are plugins loaded by path (stores/pg/,
 * examples/store_text.c).
 */
#ifndef CARMY_STORES_H
#define CARMY_STORES_H

#include "carmy_store.h"

extern const struct carmy_store_ops memory_store_ops;
extern const struct carmy_store_ops journal_store_ops;

#endif
