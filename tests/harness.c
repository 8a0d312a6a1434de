/*
 * harness.c - see harness.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/harness.h"

uint64_t harness_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const char *harness_path(const char *rel, char *buf, size_t size)
{
	const char *top = getenv("CARMY_BUILDDIR");

	snprintf(buf, size, "%s/%s", top != NULL ? top : ".", rel);
	return buf;
}

/* Read carmyd's stdout until its ready line, with a deadline. */
static int wait_ready(int fd, int timeout_ms)
{
	uint64_t deadline = harness_now_ns() + (uint64_t)timeout_ms * 1000000u;
	char buf[512];
	size_t have = 0;

	for (;;) {
		int64_t left = (int64_t)(deadline - harness_now_ns()) / 1000000;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return -1;
		n = read(fd, buf + have, sizeof(buf) - 1 - have);
		if (n <= 0)
			return -1;
		have += (size_t)n;
		buf[have] = '\0';
		if (strstr(buf, "carmyd ready") != NULL && strchr(buf, '\n'))
			return 0;
		if (have == sizeof(buf) - 1)
			return -1;
	}
}

static int spawn(struct carmyd_proc *d, const char *const *extra)
{
	char prog[512];
	const char *argv[32];
	int n = 0, p[2];
	pid_t pid;

	argv[n++] = harness_path("daemon/carmyd", prog, sizeof(prog));
	argv[n++] = "--foreground";
	argv[n++] = "--transient";
	argv[n++] = "--socket";
	argv[n++] = d->socket;
	argv[n++] = "--segment";
	argv[n++] = d->segment;
	argv[n++] = "--log-level";
	argv[n++] = getenv("CARMY_TEST_LOG") ? getenv("CARMY_TEST_LOG") : "warn";
	for (int i = 0; extra != NULL && extra[i] != NULL && n < 31; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	if (pipe2(p, O_CLOEXEC) != 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(p[1], STDOUT_FILENO);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	d->pid = pid;
	if (wait_ready(p[0], 10000) != 0) {
		close(p[0]);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		d->pid = 0;
		return -1;
	}
	close(p[0]);
	return 0;
}

int harness_start(struct carmyd_proc *d, const char *const *extra)
{
	static unsigned seq;

	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/tmp/carmy-test.XXXXXX");
	if (mkdtemp(d->dir) == NULL)
		return -1;
	snprintf(d->socket, sizeof(d->socket), "%s/carmyd.sock", d->dir);
	snprintf(d->segment, sizeof(d->segment), "/carmy-test.%d.%u",
		 (int)getpid(), seq++);
	return spawn(d, extra);
}

int harness_restart(struct carmyd_proc *d, const char *const *extra)
{
	return spawn(d, extra);
}

int harness_waitpid(pid_t pid, int timeout_ms)
{
	uint64_t deadline = harness_now_ns() + (uint64_t)timeout_ms * 1000000u;
	unsigned backoff_us = 50;

	/* No pidfd in every libc we build on: poll waitpid(WNOHANG) with a
	 * bounded back-off; the deadline is what matters. */
	for (;;) {
		int st;
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			return st;
		if (r < 0 && errno != EINTR)
			return -1;
		if (harness_now_ns() > deadline)
			return -1;
		usleep(backoff_us);
		if (backoff_us < 5000)
			backoff_us *= 2;
	}
}

int harness_stop(struct carmyd_proc *d)
{
	char lock[200];
	int st = -1;

	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		st = harness_waitpid(d->pid, 10000);
		if (st == -1) {
			kill(d->pid, SIGKILL);
			waitpid(d->pid, NULL, 0);
		}
		d->pid = 0;
	}
	snprintf(lock, sizeof(lock), "%s.lock", d->socket);
	unlink(lock);
	unlink(d->socket);
	rmdir(d->dir);
	return st;
}

void harness_kill9(struct carmyd_proc *d)
{
	if (d->pid > 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
		d->pid = 0;
	}
}
