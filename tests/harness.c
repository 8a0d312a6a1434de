/*
 * harness.c - see harness.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
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
	const char *argv[40];
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
	/* Two event loops whatever the machine (the default on two CPUs is
	 * one), so that connections on different loops are always tested;
	 * a test's own --threads, later, wins. */
	argv[n++] = "--threads";
	argv[n++] = "2";
	for (int i = 0; extra != NULL && extra[i] != NULL; i++) {
		if (n == (int)(sizeof(argv) / sizeof(argv[0])) - 1) {
			fprintf(stderr, "harness: too many carmyd arguments\n");
			return -1;
		}
		argv[n++] = extra[i];
	}
	argv[n] = NULL;
	if (pipe2(p, O_CLOEXEC) != 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		const char *nofile = getenv("CARMY_TEST_NOFILE");

		dup2(p[1], STDOUT_FILENO);
		if (nofile != NULL) {
			rlim_t lim = (rlim_t)strtoul(nofile, NULL, 10);
			struct rlimit rl = { lim, lim };

			if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
				_exit(125);
		}
		if (d->as_user && harness_become(d->uid, d->gid, NULL, 0) != 0)
			_exit(126);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	d->pid = pid;
	if (wait_ready(p[0], HARNESS_WAIT_MS) != 0) {
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

int harness_start_as(struct carmyd_proc *d, uid_t uid, gid_t gid,
		     const char *const *extra)
{
	static unsigned seq;

	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/tmp/carmy-test.XXXXXX");
	if (mkdtemp(d->dir) == NULL)
		return -1;
	if (chown(d->dir, uid, gid) != 0) {
		rmdir(d->dir);
		return -1;
	}
	snprintf(d->socket, sizeof(d->socket), "%s/carmyd.sock", d->dir);
	snprintf(d->segment, sizeof(d->segment), "/carmy-test.%d.u%u.%u",
		 (int)getpid(), (unsigned)uid, seq++);
	d->as_user = true;
	d->uid = uid;
	d->gid = gid;
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
		st = harness_waitpid(d->pid, HARNESS_WAIT_MS);
		if (st == -1) {
			kill(d->pid, SIGKILL);
			waitpid(d->pid, NULL, 0);
		}
		d->pid = 0;
	}
	/* A carmyd that had to be killed leaves its segment behind. */
	shm_unlink(d->segment);
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

/* ------------------------------------------------------------ users */

/* Run a user-management tool quietly; its exit status, or -1. */
static int run_quiet(const char *const *argv)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		if (null >= 0) {
			dup2(null, STDOUT_FILENO);
			dup2(null, STDERR_FILENO);
		}
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/*
 * Look the name up, creating it with argv if missing. Test programs run in
 * parallel and may create the same name at once: useradd and groupadd then
 * fail on their lock or on "already exists", so the lookup, not their exit
 * status, decides, retried for a few seconds.
 */
static int ensure(const char *name, const char *const *argv, bool user,
		  uid_t *uid, gid_t *gid)
{
	uint64_t deadline = harness_now_ns() + 20ull * 1000000000u;

	if (geteuid() != 0)
		return -1;
	for (;;) {
		if (user) {
			struct passwd *pw = getpwnam(name);

			if (pw != NULL) {
				*uid = pw->pw_uid;
				*gid = pw->pw_gid;
				return 0;
			}
		} else {
			struct group *gr = getgrnam(name);

			if (gr != NULL) {
				*gid = gr->gr_gid;
				return 0;
			}
		}
		if (harness_now_ns() > deadline)
			return -1;
		if (run_quiet(argv) == 127)
			return -1;	/* no such tool here */
		usleep(20000);
	}
}

int harness_user(const char *tag, uid_t *uid, gid_t *gid)
{
	char name[33];
	const char *argv[] = { "useradd", "--system", "--user-group",
			       "--no-create-home", "--home-dir", "/nonexistent",
			       "--shell", "/usr/sbin/nologin", name, NULL };

	if (snprintf(name, sizeof(name), "carmy-test-%s", tag) >=
	    (int)sizeof(name))
		return -1;
	return ensure(name, argv, true, uid, gid);
}

int harness_group(const char *tag, gid_t *gid)
{
	char name[33];
	const char *argv[] = { "groupadd", "--system", name, NULL };
	uid_t unused;

	if (snprintf(name, sizeof(name), "carmy-test-%s", tag) >=
	    (int)sizeof(name))
		return -1;
	return ensure(name, argv, false, &unused, gid);
}

int harness_become(uid_t uid, gid_t gid, const gid_t *groups, size_t n)
{
	if (setgroups(n, groups) != 0 || setresgid(gid, gid, gid) != 0 ||
	    setresuid(uid, uid, uid) != 0)
		return -1;
	return geteuid() == uid && getegid() == gid ? 0 : -1;
}
