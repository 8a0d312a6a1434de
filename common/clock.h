/*
 * clock.h - the clocks Carmy reads, in nanoseconds. All three are served by
 * the vDSO: no system call.
 *
 *   clock_mono_ns    CLOCK_MONOTONIC: deadlines, intervals, timings
 *   clock_real_ns    CLOCK_REALTIME: times an entry or a log records
 *   clock_coarse_ns  CLOCK_REALTIME_COARSE: the same, as of the clock's
 *                    last tick (a few milliseconds behind at most), for
 *                    a hot path that needs only an age
 *   clock_boot_ns    CLOCK_BOOTTIME: as CLOCK_MONOTONIC, but counting the
 *                    time the machine was suspended too
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

static inline uint64_t clock_boot_ns(void)
{
	return clock_ns_of(CLOCK_BOOTTIME);
}

/* Further than the boot clock by more than this, the wall clock stepped
 * (less is an NTP slew, followed). */
#define CLOCK_STEP_NS 1000000000ull

/*
 * The wall clock as read by a pass that must not see a step forward as
 * time gone by (retention: a clock stepped a day ahead would make every
 * entry a day older at once). c holds the last reading, zeroed before
 * the first. real and boot are the wall and boot clocks now; hold_ns is
 * how long a step is held back.
 *
 * real itself, unless it went further than the boot clock since the last
 * reading by more than CLOCK_STEP_NS: a step. Then, for hold_ns of boot
 * time from the step, the last reading plus the boot time since (so what
 * was hold_ns old by the clock before the step is that old by this one
 * when the hold ends), and after it, the wall clock again. *stepped is
 * how far the clock stepped when one is first seen, else 0. A step back
 * is followed (what it makes younger is kept longer).
 */
struct clock_held {
	uint64_t real;		/* the last reading */
	uint64_t boot;		/* the boot clock then */
	uint64_t until;		/* boot time a hold ends; 0: none */
};

static inline uint64_t clock_real_held(struct clock_held *c, uint64_t real,
				       uint64_t boot, uint64_t hold_ns,
				       uint64_t *stepped)
{
	*stepped = 0;
	if (c->until != 0 && boot >= c->until)
		c->until = 0;		/* held long enough: the wall clock */
	else if (c->boot != 0 && boot >= c->boot) {
		uint64_t bound = c->real + (boot - c->boot);

		if (c->until != 0) {
			real = bound < real ? bound : real;
		} else if (real > bound + CLOCK_STEP_NS) {
			*stepped = real - bound;
			c->until = boot + hold_ns;
			real = bound;
		}
	}
	c->real = real;
	c->boot = boot;
	return real;
}

#endif
