/*
 * populate_gate.c - holds carmyd's reading in of its segment until a test
 * lets it go.
 *
 * Preloaded (LD_PRELOAD) into carmyd by carmy-bench.test, so that the test
 * finds carmyd's thread carmyd-populate running for as long as it needs,
 * however fast the machine. When CARMY_TEST_POPULATE_GATE names a
 * directory holding two FIFOs, "at" and "go", the first
 * madvise(MADV_POPULATE_WRITE) in the process (populate()'s first step,
 * after the ready line) first opens "at" for writing (returning once the
 * test opens it to read: the thread is there), then opens "go" for reading
 * (returning once the test opens it to write), and only then does what it
 * would have done. Every other madvise() is libc's own, untouched.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "tests/gate.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

typedef int (*madvise_fn)(void *, size_t, int);

int madvise(void *addr, size_t len, int advice)
{
	static bool held;
	madvise_fn real = (madvise_fn)dlsym(RTLD_NEXT, "madvise");
	const char *dir = getenv("CARMY_TEST_POPULATE_GATE");

	if (real == NULL) {
		errno = ENOSYS;
		return -1;
	}
	if (advice == MADV_POPULATE_WRITE && dir != NULL && dir[0] != '\0' &&
	    !__atomic_exchange_n(&held, true, __ATOMIC_RELAXED))
		gate_hold(dir);
	return real(addr, len, advice);
}
