/*
 * bench_run.h - carmy-bench's process harness: fork P workers, start them
 * together, time every operation, and reduce the samples to a figure.
 *
 * A figure is a set of callbacks. Each worker process runs setup (untimed),
 * waits at a barrier in shared memory until all P have arrived, then for
 * each of its ops calls prep (untimed), op (timed with CLOCK_MONOTONIC
 * around the call, one sample per op into a preallocated shared array) and
 * check (untimed), and finally teardown (untimed).
 */
#ifndef CARMY_BENCH_RUN_H
#define CARMY_BENCH_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BENCH_MAX_PROCS 64
#define BENCH_MSG_MAX 240

/* Worker exit codes the harness reports on. */
enum bench_fail {
	BENCH_OK = 0,
	BENCH_FAIL = 1,		/* unexpected outcome: abort the run */
	BENCH_FULL = 2,		/* carmyd's table is full */
};

struct bench_worker {
	int index;		/* 0 .. procs - 1 */
	int procs;
	uint32_t run;		/* the figure's number in this process, from
				 * 1: with index, a name for the worker that
				 * no other in the run has (a PID may be) */
	uint64_t ops;
	void *arg;		/* the figure's arg, inherited over fork */
	void *state;		/* whatever setup wants to keep */
};

struct bench_figure {
	const char *name;
	void *arg;
	/* Each returns BENCH_OK or a bench_fail after bench_failf(). Only op
	 * is timed; prep, check and teardown may be NULL. teardown runs even
	 * when an op failed, with w->state as setup left it. */
	int (*setup)(struct bench_worker *w);
	void (*prep)(struct bench_worker *w, uint64_t i);
	void (*op)(struct bench_worker *w, uint64_t i);
	int (*check)(struct bench_worker *w, uint64_t i);
	int (*teardown)(struct bench_worker *w, uint64_t done);
};

/* What a figure came to, over all its workers. */
struct bench_stats {
	const char *name;
	int procs;
	uint64_t ops;		/* completed, all workers */
	double ops_per_s;	/* ops / wall time of the slowest worker */
	double median_us;
	double p99_us;
	double minflt_per_op;	/* page faults trapped per op, timed loop;
				 * -1 if perf_event_open() is refused */
	double mapped_per_op;	/* pages the kernel mapped in per op
				 * (ru_minflt: faults and madvise() both) */
	double csw_per_op;	/* context switches per op, timed loop */
	int fail;		/* enum bench_fail of the first failing worker */
	char msg[BENCH_MSG_MAX];
};

/* Map the shared control block for up to procs workers of ops each, in
 * place of any block mapped before. Returns 0 or -errno. */
int bench_init(int max_procs, uint64_t ops);

/* Run one figure with procs workers and fill *st: each does up to ops, and
 * all stop once the first has done them all (bench_run.c). Returns 0 when
 * no worker failed; otherwise st->fail and st->msg say why. */
int bench_run(const struct bench_figure *f, int procs, struct bench_stats *st);

/* From a worker: record why it fails (first caller wins). Returns code. */
int bench_failf(struct bench_worker *w, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Touch every page of [p, p + len) so that the timed loop does not take
 * this process's first-touch faults on memory that is not being measured. */
void bench_prefault(const void *p, size_t len);

/* Median of the time of two back-to-back clock_gettime() calls, in µs:
 * the floor under every sample. */
double bench_timer_overhead_us(void);

#endif /* CARMY_BENCH_RUN_H */
