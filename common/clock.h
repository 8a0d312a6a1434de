/*
 * clock.h - the clocks Carmy reads, in nanoseconds. All three are served by
 * the vDSO: no system call.
 *
 *   clock_mono_ns    CLOCK_MONOTONIC: deadlines, intervals, timings
 *   clock_real_ns    CLOCK_REALTIME: times an entry or a log records
 *   clock_coarse_ns  CLOCK_REALTIME_COARSE: the same, as of the clock's
 *                    last tick (a few milliseconds behind at most), for
 *                    a hot path that needs only an age
 */
#ifndef CARMY_COMMON_CLOCK_H
#define CARMY_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_ns_of(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t clock_mono_ns(void)
{
	return clock_ns_of(CLOCK_MONOTONIC);
}

static inline uint64_t clock_real_ns(void)
{
	return clock_ns_of(CLOCK_REALTIME);
}

static inline uint64_t clock_coarse_ns(void)
{
	return clock_ns_of(CLOCK_REALTIME_COARSE);
}

#endif
