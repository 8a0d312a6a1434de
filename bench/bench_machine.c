/*
 * bench_machine.c - the machine's side of a carmy-bench run: its CPU, load
 * and where its CPU time went while the figures were measured, read from
 * /proc and uname(), and what a page of shared memory costs, a switch
 * between processes, a flush to the disk and the CPU's pace, measured.
 * Anything missing is reported as unknown, never guessed.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <xxhash.h>

#include "bench/bench_machine.h"
#include "common/clock.h"
#include "common/hugepage.h"
#include "common/io.h"
#include "shm/shm.h"

static void read_model(char *buf, size_t size)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[256];

	buf[0] = '\0';
	if (f == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *colon = strchr(line, ':');

		if (strncmp(line, "model name", 10) != 0 || colon == NULL)
			continue;
		colon += 1 + (colon[1] == ' ');
		colon[strcspn(colon, "\n")] = '\0';
		snprintf(buf, size, "%s", colon);
		break;
	}
	fclose(f);
}

/* The first line of /proc/stat, all CPUs: busy (user, nice, system, irq,
 * softirq), idle (idle, iowait) and steal, in jiffies. 0 or -1. */
static int read_cpu_time(uint64_t t[3])
{
	unsigned long long v[8] = { 0 };
	FILE *f = fopen("/proc/stat", "r");
	int n;

	if (f == NULL)
		return -1;
	n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
		   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	if (n < 8)
		return -1;
	t[0] = v[0] + v[1] + v[2] + v[5] + v[6];
	t[1] = v[3] + v[4];
	t[2] = v[7];
	return 0;
}

void bench_machine_start(struct bench_machine *m)
{
	struct utsname u;
	double load[1];

	memset(m, 0, sizeof(*m));
	read_model(m->model, sizeof(m->model));
	if (uname(&u) == 0)
		snprintf(m->kernel, sizeof(m->kernel), "%s", u.release);
	m->nproc = sysconf(_SC_NPROCESSORS_ONLN);
	m->load1 = getloadavg(load, 1) == 1 ? load[0] : -1;
	m->busy_pct = m->steal_pct = -1;
	m->touch_us = m->fault_us = m->warm_us = -1;
	m->shm_huge = -1;
	m->switch_us = m->wake_us = -1;
	if (read_cpu_time(m->t0) != 0)
		m->t0[0] = m->t0[1] = m->t0[2] = UINT64_MAX;
}

void bench_machine_end(struct bench_machine *m)
{
	uint64_t t1[3], d[3], all;

	if (m->t0[0] == UINT64_MAX || read_cpu_time(t1) != 0)
		return;
	for (int i = 0; i < 3; i++)
		d[i] = t1[i] - m->t0[i];
	all = d[0] + d[1] + d[2];
	if (all == 0)
		return;
	m->busy_pct = 100.0 * (double)d[0] / (double)all;
	m->steal_pct = 100.0 * (double)d[2] / (double)all;
}

/*
 * Page costs. A shared mapping of PAGES_BYTES, like the segment's:
 * the kernel's work on a page is a fault or MADV_POPULATE_WRITE, but under
 * some hypervisors (shadow paging) the first access to a page by a process
 * exits to the hypervisor as well, even after the kernel mapped it, and
 * every process that touches the page pays it once. Each figure is the
 * median of single writes, one a page, timed apart (a write, as a
 * reserve's into its entry: a read fault would map its neighbours too).
 */
#define PAGES_BYTES ((size_t)8 << 20)

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* The median µs of one write a page over n pages from p. */
static double write_pages(volatile uint8_t *p, size_t page, uint64_t *d,
			  size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t t0 = clock_mono_ns();

		p[i * page] = 1;
		d[i] = clock_mono_ns() - t0;
	}
	qsort(d, n, sizeof(*d), cmp_u64);
	return (double)d[n / 2] / 1000.0;
}

/*
 * Whether carmyd's segment can be in huge pages here: a file of
 * HUGE_PROBE_BYTES in /dev/shm made as carmyd makes its segment (its size,
 * then its pages allocated, mapped on a 2 MiB boundary with MADV_HUGEPAGE,
 * populated, collapsed: daemon/store.c, populate()), then asked of this
 * process's page table.
 * Its name is ours alone (O_EXCL) and gone at once; 1, 0, or -1.
 */
#define HUGE_PROBE_BYTES ((size_t)4 << 20)

static int probe_shm_huge(void)
{
	const size_t len = HUGE_PROBE_BYTES;
	char name[64];
	uint8_t *p;
	int64_t huge;
	int fd;

	snprintf(name, sizeof(name), "/carmy-bench-huge-%ld", (long)getpid());
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	shm_unlink(name);
	if (ftruncate(fd, (off_t)len) != 0 ||
	    posix_fallocate(fd, 0, (off_t)len) != 0) {
		close(fd);
		return -1;
	}
	p = shm_mmap(fd, len, true);
	close(fd);
	if (p == MAP_FAILED)
		return -1;
	(void)madvise(p, len, MADV_HUGEPAGE);
	if (madvise(p, len, MADV_POPULATE_WRITE) != 0) {
		munmap(p, len);
		return -1;
	}
	(void)madvise(p, len, MADV_COLLAPSE);
	huge = hugepage_mapped(p);
	munmap(p, len);
	return huge < 0 ? -1 : huge > 0;
}

void bench_machine_pages(struct bench_machine *m)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), len = PAGES_BYTES;
	size_t n = page > 0 && page <= len ? len / page : 0;
	uint64_t *d = n > 0 ? malloc(n * sizeof(*d)) : NULL;
	int fd = memfd_create("carmy-bench-pages", MFD_CLOEXEC);
	uint8_t *a = MAP_FAILED, *b = MAP_FAILED;

	m->shm_huge = probe_shm_huge();
	if (d == NULL || fd < 0 || ftruncate(fd, (off_t)len) != 0)
		goto out;
	a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (a == MAP_FAILED || b == MAP_FAILED)
		goto out;
	/* The pages exist once a is mapped ahead, as the segment's do (carmyd
	 * zeroes them): b's first writes are faults that map them. */
	if (madvise(a, len, MADV_POPULATE_WRITE) != 0)
		goto out;
	m->touch_us = write_pages(a, page, d, n);
	m->warm_us = write_pages(a, page, d, n);
	m->fault_us = write_pages(b, page, d, n);
out:
	if (a != MAP_FAILED)
		munmap(a, len);
	if (b != MAP_FAILED)
		munmap(b, len);
	if (fd >= 0)
		close(fd);
	free(d);
}

/*
 * Handing the CPU over. A child echoes bytes back through two pipes; the
 * parent times SWITCH_TRIPS round trips SWITCH_ROUNDS times, both pinned
 * to cpu_a and cpu_b (the same CPU: each trip is two context switches;
 * two CPUs: two wake-ups of a CPU whose process sleeps in read()). The
 * child first says whether it could pin itself, and reads until the
 * parent closes its pipe whatever happens, so the parent never writes to
 * a pipe nobody reads (SIGPIPE). The parent's affinity is put back after.
 */
#define SWITCH_TRIPS 2000
#define SWITCH_ROUNDS 5

static int pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void echo_child(int in, int out, int cpu)
{
	char c = pin(cpu) == 0 ? 0 : 1;
	bool echo = write(out, &c, 1) == 1 && c == 0;

	while (read(in, &c, 1) == 1)
		if (echo && write(out, &c, 1) != 1)
			echo = false;
	_exit(0);
}

/* µs one way between two processes on cpu_a and cpu_b, or -1. */
static double ping_pong(int cpu_a, int cpu_b)
{
	int to[2] = { -1, -1 }, from[2] = { -1, -1 };
	double means[SWITCH_ROUNDS], us = -1;
	pid_t pid = -1;
	char c = 1;
	int r;

	if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0)
		goto out;
	pid = fork();
	if (pid == 0) {
		close(to[1]);
		close(from[0]);
		echo_child(to[0], from[1], cpu_b);
	}
	close(to[0]);
	close(from[1]);
	to[0] = from[1] = -1;
	if (pid < 0 || read(from[0], &c, 1) != 1 || c != 0 ||
	    pin(cpu_a) != 0)
		goto out;
	for (r = 0; r < SWITCH_ROUNDS; r++) {
		uint64_t t0 = clock_mono_ns();

		for (int i = 0; i < SWITCH_TRIPS; i++)
			if (write(to[1], &c, 1) != 1 || read(from[0], &c, 1) != 1)
				goto out;
		means[r] = (double)(clock_mono_ns() - t0) / 1000.0 /
			   (2.0 * SWITCH_TRIPS);
	}
	qsort(means, SWITCH_ROUNDS, sizeof(means[0]), cmp_double);
	us = means[SWITCH_ROUNDS / 2];
out:
	for (int i = 0; i < 2; i++) {
		if (to[i] >= 0)
			close(to[i]);	/* the child reads the end and exits */
		if (from[i] >= 0)
			close(from[i]);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
	return us;
}

void bench_machine_switches(struct bench_machine *m)
{
	cpu_set_t mine;
	int cpu[2], n = 0;

	if (sched_getaffinity(0, sizeof(mine), &mine) != 0)
		return;
	for (int i = 0; i < CPU_SETSIZE && n < 2; i++)
		if (CPU_ISSET(i, &mine))
			cpu[n++] = i;
	if (n >= 1)
		m->switch_us = ping_pong(cpu[0], cpu[0]);
	if (n >= 2)
		m->wake_us = ping_pong(cpu[0], cpu[1]);
	(void)sched_setaffinity(0, sizeof(mine), &mine);
}

/*
 * The CPU's pace. A piece is PACE_HASHES hashes of a buffer that stays in
 * the first-level cache, each hash's input changed by the one before, so
 * that no two overlap and no compiler drops one: instructions and nothing
 * else, as most of a reserve is. Where a virtual CPU shares its core with
 * another guest's at times, the same piece takes up to about twice as long
 * then; pieces timed between the figures (carmy-bench: 100 before them,
 * 20 after each round) say how often that was.
 */
#define PACE_HASHES 20000
#define PACE_BYTES 256

void bench_machine_pace(struct bench_machine *m, unsigned n)
{
	uint8_t buf[PACE_BYTES];
	uint64_t h = 0;

	for (unsigned i = 0; i < PACE_BYTES; i++)
		buf[i] = (uint8_t)i;
	for (; n > 0 && m->pace_n < BENCH_PACE_PIECES; n--) {
		uint64_t t0 = clock_mono_ns();

		for (unsigned i = 0; i < PACE_HASHES; i++) {
			buf[i % PACE_BYTES] ^= (uint8_t)h;
			h += XXH3_64bits(buf, sizeof(buf));
		}
		m->pace_us[m->pace_n++] =
			(double)(clock_mono_ns() - t0) / 1000.0;
	}
	/* h is live: the hashes cannot be left out. */
	__asm__ volatile("" : : "r"(h));
}

void bench_machine_pace_sum(const struct bench_machine *m,
			    struct bench_pace *p)
{
	unsigned slow = 0;

	p->fast_us = p->slow_share = 0;
	if (m->pace_n == 0)
		return;
	p->fast_us = m->pace_us[0];
	for (unsigned i = 1; i < m->pace_n; i++)
		if (m->pace_us[i] < p->fast_us)
			p->fast_us = m->pace_us[i];
	for (unsigned i = 0; i < m->pace_n; i++)
		slow += m->pace_us[i] >= BENCH_PACE_SLOW * p->fast_us;
	p->slow_share = (double)slow / m->pace_n;
}

/*
 * A flush. The file is written whole and flushed first, as the journal
 * grows its file with zeros ahead of its records and PostgreSQL fills a
 * WAL segment before it uses it, so that each timed fdatasync() writes
 * data blocks only, no allocation or size change; the timed writes go to
 * successive blocks, as records do. It is unlinked as soon as it is
 * made, before that first flush: nothing is left behind, even by a run
 * that is killed.
 */
#define DISK_FILE ((size_t)1 << 20)
#define DISK_BLOCK 4096u

int bench_machine_disk(struct bench_disk *d, const char *dir)
{
	static const uint8_t zeros[65536];
	static uint8_t block[DISK_BLOCK];
	uint64_t t[BENCH_DISK_FLUSHES];
	char path[PATH_MAX];
	int fd, rc = 0, n;

	n = snprintf(path, sizeof(path), "%s/carmy-bench-flush.XXXXXX", dir);
	if (n < 0 || (size_t)n >= sizeof(path))
		return -ENAMETOOLONG;
	fd = mkostemp(path, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (unlink(path) != 0)
		rc = -errno;
	for (size_t off = 0; rc == 0 && off < DISK_FILE; off += sizeof(zeros))
		rc = io_pwrite_all(fd, zeros, sizeof(zeros), off);
	if (rc == 0 && fdatasync(fd) != 0)
		rc = -errno;
	memset(block, 0xa5, sizeof(block));
	for (int i = 0; rc == 0 && i < BENCH_DISK_FLUSHES; i++) {
		uint64_t t0 = clock_mono_ns();

		rc = io_pwrite_all(fd, block, sizeof(block),
				   (size_t)i * DISK_BLOCK % DISK_FILE);
		if (rc == 0 && fdatasync(fd) != 0)
			rc = -errno;
		t[i] = clock_mono_ns() - t0;
	}
	close(fd);
	if (rc != 0)
		return rc;
	qsort(t, BENCH_DISK_FLUSHES, sizeof(t[0]), cmp_u64);
	d->dir = dir;
	d->flush_us = (double)t[BENCH_DISK_FLUSHES / 2] / 1000.0;
	d->flush_p90_us = (double)t[BENCH_DISK_FLUSHES * 9 / 10] / 1000.0;
	return 0;
}
