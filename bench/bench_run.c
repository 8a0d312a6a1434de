/*
 * bench_run.c - carmy-bench's process harness.
 *
 * The parent maps one control block (MAP_SHARED | MAP_ANONYMOUS) before it
 * forks: a barrier, one result slot per worker and the sample array, one
 * uint32_t of nanoseconds per op. Workers write only their own slot and
 * their own slice of the samples; the parent reads them after it has reaped
 * every worker, so waitpid() is the only ordering the results need.
 *
 * The barrier is a counter and a go word. The last worker to arrive sets go
 * and wakes the others with FUTEX_WAKE; the rest spin on go for a while and
 * then FUTEX_WAIT on it, so nobody sleeps for a fixed time. A worker that
 * dies before arriving would leave the others waiting: the parent watches
 * the workers' pidfds and, if one exits while go is still 0, sets abort and
 * go itself.
 *
 * A figure is the rate while every worker runs. The first worker to finish
 * its ops once all have started sets stop, and the others stop after the
 * op they are in (not before their first: the last to reach the barrier
 * starts while the others are still being woken from it). With
 * many workers sharing few CPUs, one the scheduler left behind would
 * otherwise run its last ops alone, and the figure would be that
 * straggler's wall time rather than what the clients got together (one
 * run of 64 journal clients gave 25,066 cycles a second that way, with the
 * same median latency as a run that gave 44,129).
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/futex.h>
#include <linux/perf_event.h>
#include <urcu/arch.h>
#include <urcu/uatomic.h>

#include "bench/bench_run.h"
#include "common/clock.h"

/* Spins on the go word before sleeping in the kernel: about a millisecond,
 * enough for P <= nproc workers to start within nanoseconds of each other. */
#define BARRIER_SPINS (1u << 16)
/* How often (in ops) a worker looks at the abort word. */
#define ABORT_POLL 1024

struct bench_slot {
	uint64_t start_ns;
	uint64_t end_ns;
	uint64_t done;
	long minflt;		/* trapped page faults, or -1: see below */
	long mapped;		/* pages mapped in by the kernel: ru_minflt */
	long csw;
	int fail;
	char msg[BENCH_MSG_MAX];
} __attribute__((aligned(64)));

struct bench_ctl {
	uint32_t arrived;
	uint32_t go;
	uint32_t abort;
	uint32_t running;	/* workers past their first op */
	uint32_t stop;		/* then one has done all its ops */
	uint32_t pad[11];
	struct bench_slot slot[BENCH_MAX_PROCS];
};

static struct bench_ctl *ctl;
static uint32_t *samples;	/* max_procs x ops, after the control block */
static int ctl_max_procs;
static uint64_t ctl_ops;
static size_t ctl_len;
static uint32_t runs;		/* bench_run() calls so far */

static void worker_main(const struct bench_figure *f, int index, int procs)
	__attribute__((noreturn));
static void barrier(int procs);
static long futex(uint32_t *addr, int op, uint32_t val);
static int reap(const pid_t *pids, int procs, struct bench_stats *st);
static void reduce(int procs, struct bench_stats *st);
static int cmp_u32(const void *a, const void *b);

/* ---------------------------------------------------------------- API */

int bench_init(int max_procs, uint64_t ops)
{
	size_t len;
	void *p;

	if (max_procs < 1 || max_procs > BENCH_MAX_PROCS || ops == 0 ||
	    ops > SIZE_MAX / sizeof(uint32_t) / (size_t)max_procs / 2)
		return -EINVAL;
	len = sizeof(struct bench_ctl) +
	      (size_t)max_procs * ops * sizeof(uint32_t);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		 -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	if (ctl != NULL)
		munmap(ctl, ctl_len);	/* the block of another op count */
	ctl = p;
	ctl_len = len;
	samples = (uint32_t *)(ctl + 1);
	ctl_max_procs = max_procs;
	ctl_ops = ops;
	return 0;
}

int bench_run(const struct bench_figure *f, int procs, struct bench_stats *st)
{
	pid_t pids[BENCH_MAX_PROCS];
	int started = 0, rc;

	runs++;

	memset(st, 0, sizeof(*st));
	st->name = f->name;
	st->procs = procs;
	if (procs < 1 || procs > ctl_max_procs) {
		st->fail = BENCH_FAIL;
		snprintf(st->msg, sizeof(st->msg), "bad process count %d", procs);
		return -1;
	}
	memset(ctl, 0, sizeof(*ctl));
	fflush(NULL);	/* children _exit(), but do not inherit pending output */
	for (; started < procs; started++) {
		pid_t pid = fork();

		if (pid == 0)
			worker_main(f, started, procs);
		if (pid < 0) {
			st->fail = BENCH_FAIL;
			snprintf(st->msg, sizeof(st->msg), "fork: %s",
				 strerror(errno));
			/* Release the ones already waiting, with abort set. */
			uatomic_set(&ctl->abort, 1);
			uatomic_set(&ctl->go, 1);
			futex(&ctl->go, FUTEX_WAKE, INT_MAX);
			break;
		}
		pids[started] = pid;
	}
	rc = reap(pids, started, st);
	if (st->fail != BENCH_OK)
		return -1;
	reduce(procs, st);
	return rc;
}

int bench_failf(struct bench_worker *w, int code, const char *fmt, ...)
{
	struct bench_slot *s = &ctl->slot[w->index];
	va_list ap;

	if (s->fail == BENCH_OK) {
		s->fail = code;
		va_start(ap, fmt);
		vsnprintf(s->msg, sizeof(s->msg), fmt, ap);
		va_end(ap);
	}
	uatomic_set(&ctl->abort, 1);
	return code;
}

void bench_prefault(const void *p, size_t len)
{
	const volatile uint8_t *b = p;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	for (size_t off = 0; off < len; off += page)
		(void)b[off];
	if (len > 0)
		(void)b[len - 1];
}

double bench_timer_overhead_us(void)
{
	enum { N = 100001 };
	uint32_t *d = malloc(N * sizeof(*d));
	double med;

	if (d == NULL)
		return 0;
	for (int i = 0; i < N; i++) {
		uint64_t t0 = clock_mono_ns();
		uint64_t t1 = clock_mono_ns();

		d[i] = (uint32_t)(t1 - t0);
	}
	qsort(d, N, sizeof(*d), cmp_u32);
	med = d[N / 2] / 1000.0;
	free(d);
	return med;
}

/* ------------------------------------------------------------ workers */

/*
 * Page faults the timed loop trapped on. getrusage()'s ru_minflt is not
 * that figure: it also counts every page madvise(MADV_POPULATE_WRITE) maps
 * in ahead of use, which is what libcarmy does precisely so that reserves
 * do not fault. perf's software page-fault counter counts only faults
 * taken by the CPU, so it is the one the bench reports as faults; -1 when
 * perf_event_open() is not allowed here (perf_event_paranoid, seccomp),
 * and the table then says so rather than print the wrong figure.
 */
static int fault_counter_open(void)
{
	struct perf_event_attr a = {
		.type = PERF_TYPE_SOFTWARE,
		.size = sizeof(a),
		.config = PERF_COUNT_SW_PAGE_FAULTS,
		.exclude_hv = 1,
	};
	int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1,
			      PERF_FLAG_FD_CLOEXEC);

	if (fd < 0) {
		/* Unprivileged: faults in user mode only, which are the
		 * ones the table's ops take anyway. */
		a.exclude_kernel = 1;
		fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1,
				  PERF_FLAG_FD_CLOEXEC);
	}
	return fd;
}

static long fault_counter_read(int fd)
{
	uint64_t v;

	if (fd < 0 || read(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
		return -1;
	return (long)v;
}

static void worker_main(const struct bench_figure *f, int index, int procs)
{
	struct bench_worker w = {
		.index = index, .procs = procs, .run = runs, .ops = ctl_ops,
		.arg = f->arg,
	};
	struct bench_slot *s = &ctl->slot[index];
	uint32_t *mine = samples + (size_t)index * ctl_ops;
	struct rusage r0, r1;
	uint64_t done = 0;
	long f0 = -1, f1 = -1;
	int rc, trc, faults_fd = fault_counter_open();

	/* Our slice of the samples is written between ops: fault it in now. */
	memset(mine, 0, ctl_ops * sizeof(*mine));
	rc = f->setup != NULL ? f->setup(&w) : BENCH_OK;
	if (rc != BENCH_OK)
		uatomic_set(&ctl->abort, 1);
	barrier(procs);
	if (rc == BENCH_OK && !uatomic_read(&ctl->abort)) {
		getrusage(RUSAGE_SELF, &r0);
		f0 = fault_counter_read(faults_fd);
		s->start_ns = clock_mono_ns();
		for (uint64_t i = 0; i < ctl_ops; i++) {
			uint64_t t0, t1;

			if (f->prep != NULL)
				f->prep(&w, i);
			t0 = clock_mono_ns();
			f->op(&w, i);
			t1 = clock_mono_ns();
			mine[i] = t1 - t0 > UINT32_MAX ? UINT32_MAX :
							 (uint32_t)(t1 - t0);
			if (f->check != NULL) {
				rc = f->check(&w, i);
				if (rc != BENCH_OK)
					break;
			}
			if (++done == 1)
				uatomic_inc(&ctl->running);
			if (uatomic_read(&ctl->stop))
				break;
			if (done % ABORT_POLL == 0 && uatomic_read(&ctl->abort))
				break;
		}
		if (done == ctl_ops &&
		    uatomic_read(&ctl->running) == (uint32_t)procs)
			uatomic_set(&ctl->stop, 1);
		s->end_ns = clock_mono_ns();
		f1 = fault_counter_read(faults_fd);
		getrusage(RUSAGE_SELF, &r1);
		s->minflt = f0 >= 0 && f1 >= f0 ? f1 - f0 : -1;
		s->mapped = r1.ru_minflt - r0.ru_minflt;
		s->csw = (r1.ru_nvcsw - r0.ru_nvcsw) +
			 (r1.ru_nivcsw - r0.ru_nivcsw);
	}
	if (faults_fd >= 0)
		close(faults_fd);
	s->done = done;
	trc = f->teardown != NULL ? f->teardown(&w, done) : BENCH_OK;
	if (rc == BENCH_OK)
		rc = trc;
	if (rc != BENCH_OK && s->fail == BENCH_OK)
		bench_failf(&w, rc, "failed without saying why");
	_exit(rc);
}

static void barrier(int procs)
{
	if (uatomic_add_return(&ctl->arrived, 1) == (uint32_t)procs) {
		uatomic_set(&ctl->go, 1);
		futex(&ctl->go, FUTEX_WAKE, INT_MAX);
		return;
	}
	for (unsigned i = 0; i < BARRIER_SPINS; i++) {
		if (uatomic_read(&ctl->go))
			return;
		caa_cpu_relax();
	}
	while (!uatomic_read(&ctl->go))
		futex(&ctl->go, FUTEX_WAIT, 0);
}

/* The block is MAP_SHARED: the futex must be the shared (not PRIVATE) kind. */
static long futex(uint32_t *addr, int op, uint32_t val)
{
	return syscall(SYS_futex, addr, op, val, NULL, NULL, 0);
}

/* ------------------------------------------------------------ parent */

/* Wait for every worker. A worker gone before the barrier opened (crashed,
 * or killed) would leave the rest waiting for it: open the barrier with
 * abort set. Returns 0, or -1 with st->fail and st->msg set. */
static int reap(const pid_t *pids, int procs, struct bench_stats *st)
{
	struct pollfd pfd[BENCH_MAX_PROCS];
	bool use_pidfd = true;
	int left = procs;

	for (int i = 0; i < procs; i++) {
		pfd[i].fd = (int)syscall(SYS_pidfd_open, pids[i], 0);
		pfd[i].events = POLLIN;
		if (pfd[i].fd < 0)
			use_pidfd = false;
	}
	while (left > 0) {
		int status, idx = -1;

		if (use_pidfd) {
			if (poll(pfd, (nfds_t)procs, -1) < 0)
				continue;	/* EINTR */
			for (int i = 0; i < procs && idx < 0; i++)
				if (pfd[i].fd >= 0 && (pfd[i].revents & POLLIN))
					idx = i;
			if (idx < 0)
				continue;
		} else {
			/* No pidfds (old kernel): wait in order, and rely on
			 * every worker reaching the barrier. */
			idx = procs - left;
		}
		if (waitpid(pids[idx], &status, 0) < 0 &&
		    st->fail == BENCH_OK) {
			st->fail = BENCH_FAIL;
			snprintf(st->msg, sizeof(st->msg), "waitpid: %s",
				 strerror(errno));
			status = 0;
		}
		if (pfd[idx].fd >= 0)
			close(pfd[idx].fd);
		pfd[idx].fd = -1;
		left--;
		if (!uatomic_read(&ctl->go)) {
			uatomic_set(&ctl->abort, 1);
			uatomic_set(&ctl->go, 1);
			futex(&ctl->go, FUTEX_WAKE, INT_MAX);
		}
		if (WIFSIGNALED(status))
			uatomic_set(&ctl->abort, 1);
		if (WIFSIGNALED(status) && st->fail == BENCH_OK) {
			st->fail = BENCH_FAIL;
			snprintf(st->msg, sizeof(st->msg),
				 "worker %d killed by signal %d (%s)", idx,
				 WTERMSIG(status), strsignal(WTERMSIG(status)));
		}
	}
	for (int i = 0; i < procs; i++) {
		const struct bench_slot *s = &ctl->slot[i];

		/* A full table explains every other failure: report it. */
		if (s->fail != BENCH_OK &&
		    (st->fail == BENCH_OK ||
		     (s->fail == BENCH_FULL && st->fail != BENCH_FULL))) {
			st->fail = s->fail;
			snprintf(st->msg, sizeof(st->msg), "worker %d: %s", i,
				 s->msg);
		}
	}
	return st->fail == BENCH_OK ? 0 : -1;
}

static void reduce(int procs, struct bench_stats *st)
{
	uint64_t total = 0, wall = 0;
	long minflt = 0, mapped = 0, csw = 0;
	uint32_t *all;
	size_t n = 0;

	for (int i = 0; i < procs; i++) {
		const struct bench_slot *s = &ctl->slot[i];

		total += s->done;
		if (s->minflt < 0 || minflt < 0)
			minflt = -1;
		else
			minflt += s->minflt;
		mapped += s->mapped;
		csw += s->csw;
		if (s->end_ns - s->start_ns > wall)
			wall = s->end_ns - s->start_ns;
	}
	st->ops = total;
	if (total == 0)
		return;
	all = malloc(total * sizeof(*all));
	if (all == NULL) {
		st->fail = BENCH_FAIL;
		snprintf(st->msg, sizeof(st->msg), "out of memory");
		return;
	}
	for (int i = 0; i < procs; i++) {
		memcpy(all + n, samples + (size_t)i * ctl_ops,
		       ctl->slot[i].done * sizeof(*all));
		n += ctl->slot[i].done;
	}
	qsort(all, n, sizeof(*all), cmp_u32);
	st->median_us = (n % 2 ? all[n / 2] :
			 ((double)all[n / 2 - 1] + all[n / 2]) / 2) / 1000.0;
	/* Nearest rank: the smallest sample with 99% of them at or below. */
	st->p99_us = all[(n * 99 + 99) / 100 - 1] / 1000.0;
	st->ops_per_s = wall > 0 ? (double)total * 1e9 / (double)wall : 0;
	st->minflt_per_op = minflt < 0 ? -1 : (double)minflt / (double)total;
	st->mapped_per_op = (double)mapped / (double)total;
	st->csw_per_op = (double)csw / (double)total;
	free(all);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}
