/*
 * bench_machine.c - the machine's side of a carmy-bench run: its CPU, load
 * and where its CPU time went while the figures were measured. Everything
 * here is read from /proc and uname(); anything missing is reported as
 * unknown, never guessed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench/bench_machine.h"

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
