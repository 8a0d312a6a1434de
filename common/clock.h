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

/* A wall-clock time real, read with the monotonic time mono, as a clock
 * that never runs faster than the monotonic one: real itself, unless it
 * went further than mono since the last call (*last_real and *last_mono,
 * both 0 before the first); then the last value plus the monotonic time
 * since, and *ahead how much further real went (else 0). A step back is
 * followed. Updates *last_real and *last_mono. */
static inline uint64_t clock_real_bounded(uint64_t real, uint64_t mono,
					  uint64_t *last_real,
					  uint64_t *last_mono, uint64_t *ahead)
{
	*ahead = 0;
	if (*last_mono != 0 && mono >= *last_mono) {
		uint64_t bound = *last_real + (mono - *last_mono);

		if (real > bound) {
			*ahead = real - bound;
			real = bound;
		}
	}
	*last_real = real;
	*last_mono = mono;
	return real;
}

#endif
