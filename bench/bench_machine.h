/*
 * bench_machine.h - what carmy-bench says about the machine it ran on.
 *
 * A figure alone cannot tell a slow Carmy from a slow or busy machine. Next
 * to the floors (the same work without Carmy, measured in the same run),
 * the bench prints the CPU, the load when it started, and how the CPUs'
 * time went while it ran: busy (anyone's work, ours included), and stolen
 * by the hypervisor from this virtual machine; and what a page of shared
 * memory costs a process the first time it touches it, which some
 * hypervisors make dear even when the kernel has mapped the page already,
 * and whether the segment can be in huge pages here, which take that cost
 * once per 2 MiB instead of per 4 KiB; and what it costs to hand the CPU
 * to another process, on the same CPU and on another; and, for the durable
 * stores, what a flush to the disk costs, which bounds every commit; and
 * whether the CPU kept one pace: some hosts run a virtual CPU far slower
 * at times, for milliseconds to a tenth of a second, and a figure of a
 * fraction of a second can fall in such a time.
 */
#ifndef CARMY_BENCH_MACHINE_H
#define CARMY_BENCH_MACHINE_H

#include <stdint.h>

#define BENCH_DISK_FLUSHES 200	/* timed by bench_machine_disk() */
#define BENCH_PACE_PIECES 5120	/* at most, kept by bench_machine_pace() */
/* A piece that took this many times the fastest or longer ran at a slow
 * pace (docs/performance.md, "The CPU's two paces"). */
#define BENCH_PACE_SLOW 1.25

/* A flush to the disk, timed by bench_machine_disk(): a 4 KiB write and
 * fdatasync() into a file whose blocks were written and flushed before,
 * as the journal's records and PostgreSQL's WAL are, BENCH_DISK_FLUSHES
 * times. What each of their commits waits for at least, whatever the
 * software. */
struct bench_disk {
	const char *dir;	/* where: the caller's string */
	double flush_us;	/* the median, µs */
	double flush_p90_us;	/* the 90th percentile, µs */
};

struct bench_machine {
	char model[96];		/* /proc/cpuinfo's "model name", or "" */
	char kernel[65];	/* uname -r */
	long nproc;
	double load1;		/* 1-minute load average at the start */
	uint64_t t0[3];		/* /proc/stat jiffies: busy, idle, steal */
	double busy_pct;	/* of all CPUs' time during the run; -1 unknown */
	double steal_pct;	/* of all CPUs' time during the run; -1 unknown */
	/* µs a page, the median over 8 MiB of pages (-1 unknown): the first
	 * write to a shared page this process mapped ahead with
	 * MADV_POPULATE_WRITE (as libcarmy maps entries before its reserves
	 * write them), the first write to one it did not map (a page fault),
	 * and a write to one it has written before. Each holds the timer's
	 * own cost, which is most of the last. */
	double touch_us, fault_us, warm_us;
	/* Whether a file in /dev/shm made and mapped as carmyd makes and
	 * maps its segment is mapped with huge pages: 1, 0, or -1 unknown
	 * (the probe failed). */
	int shm_huge;
	/* µs (-1 unknown): from one process to another through a pipe,
	 * half a round trip, the median of five rounds' means: both
	 * pinned to one CPU (a context switch between address spaces, the
	 * system calls included), and each on a CPU of its own (the other
	 * CPU woken from idle). What a cycle pays when a client and carmyd's
	 * loop take turns on a CPU, and when one wakes the other. */
	double switch_us, wake_us;
	struct bench_disk disk;	/* dir NULL: not timed */
	/* The CPU's pace: the µs each piece of fixed work took (an XXH3 hash
	 * of 256 bytes, 20,000 times: about half a millisecond on the
	 * machines of docs/performance.md), timed between the figures. */
	double pace_us[BENCH_PACE_PIECES];
	unsigned pace_n;
};

/* The pieces timed so far: the fastest (µs; 0 if none) and the share of
 * them at BENCH_PACE_SLOW times that or longer. */
struct bench_pace {
	double fast_us, slow_share;
};

/* Read what is known before the run and start the CPU time count. */
void bench_machine_start(struct bench_machine *m);

/* Measure the machine's page costs (touch_us, fault_us, warm_us) and
 * probe /dev/shm for huge pages (shm_huge): a few tens of milliseconds,
 * before the figures. */
void bench_machine_pages(struct bench_machine *m);

/* Measure what handing the CPU to another process costs (switch_us,
 * wake_us): a few tenths of a second, before the figures. */
void bench_machine_switches(struct bench_machine *m);

/* Time n more pieces of the CPU's pace (as many as there is room for):
 * about n x 0.5 ms. */
void bench_machine_pace(struct bench_machine *m, unsigned n);

/* Sum up the pieces timed so far. */
void bench_machine_pace_sum(const struct bench_machine *m,
			    struct bench_pace *p);

/* Time a flush to the disk in dir into d, through a file of 1 MiB made
 * there (unlinked at once): a tenth of a second on a disk of 0.5 ms a
 * flush. 0, or -errno (d untouched). */
int bench_machine_disk(struct bench_disk *d, const char *dir);

/* Close the CPU time count: fills busy_pct and steal_pct. */
void bench_machine_end(struct bench_machine *m);

#endif
