/*
 * memory.c - the "memory" store, carmyd's default: the shared segment is
 * the record. Nothing outlives the machine, so there is nothing to load and
 * nothing to write: clients reserve and release in the segment without a
 * round trip, and carmyd records results there.
 */
#include <stddef.h>

#include "stores/stores.h"

static int mem_open(const char *args, void **store, char *err, size_t errlen)
{
	(void)args;
	(void)err;
	(void)errlen;
	*store = NULL;
	return 0;
}

static int mem_load(void *store, carmy_store_each_fn each, void *arg)
{
	(void)store;
	(void)each;
	(void)arg;
	return 0;
}

/* Never called (durable is 0); answers at once if it ever is. */
static void mem_submit(void *store, struct carmy_store_req *req)
{
	(void)store;
	req->done(req, 0);
}

static void mem_close(void *store)
{
	(void)store;
}

const struct carmy_store_ops memory_store_ops = {
	.abi = CARMY_STORE_ABI,
	.name = "memory",
	.open = mem_open,
	.load = mem_load,
	.submit = mem_submit,
	.close = mem_close,
	.durable = 0,
};
