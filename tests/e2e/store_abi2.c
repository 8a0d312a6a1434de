/*
 * store_abi2.c - a store plugin built for CARMY_STORE_ABI 2, whose records
 * were shorter: carmyd must refuse it at start (check_store_plugin.c).
 * Its operations are never called.
 */
#include <errno.h>
#include <stdio.h>

#include "carmy_store.h"

static int open_(const char *args, void **store, char *err, size_t errlen)
{
	(void)args;
	*store = NULL;
	snprintf(err, errlen, "an ABI 2 plugin must not be opened");
	return -ENOSYS;
}

static int load_(void *store, carmy_store_each_fn each, void *arg)
{
	(void)store;
	(void)each;
	(void)arg;
	return -ENOSYS;
}

static void submit_(void *store, struct carmy_store_req *req)
{
	(void)store;
	req->done(req, -ENOSYS);
}

static void close_(void *store)
{
	(void)store;
}

const struct carmy_store_ops carmy_store_plugin = {
	.abi = 2,
	.name = "ABI 2",
	.open = open_,
	.load = load_,
	.submit = submit_,
	.close = close_,
	.durable = 1,
};
