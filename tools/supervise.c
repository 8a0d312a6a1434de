/*
 * supervise.c - COMMAND under a watcher.
 *
 * carmy-run forks a watcher, and the watcher forks COMMAND. The watcher is
 * a child subreaper (PR_SET_CHILD_SUBREAPER): every process COMMAND starts
 * and leaves behind becomes the watcher's child instead of init's, so the
 * watcher can find all of them (/proc/self/task/PID/children) and kill
 * them, whatever process group or session they moved to. It does so when
 * carmy-run asks (a timeout, a cancellation) and when carmy-run is gone:
 * the watcher holds one end of a socket pair whose other end only
 * carmy-run has, and reads end of file there however carmy-run died,
 * SIGKILL included. Without it, a shell COMMAND's background job would go
 * on after carmy-run was killed and the call was reported uncertain, and
 * could commit its effect after an operator, finding none, had resolved
 * the call as not run.
 *
 * COMMAND itself gets SIGKILL if the watcher dies (PR_SET_PDEATHSIG). The
 * watcher ignores the signals a terminal sends a whole job, so that ^C
 * cannot take it before it has done its work; COMMAND gets back the
 * dispositions carmy-run had.
 *
 * The watcher tells carmy-run, on a pipe, in records of two ints: whether
 * COMMAND was exec'd ('R') or why not ('E', errno), then how it ended
 * ('X', wait status).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/supervise.h"

enum { REC_RUNNING = 'R', REC_EXEC_FAILED = 'E', REC_EXITED = 'X' };

struct rec {
	int32_t type;
	int32_t value;
};

/* The signals a terminal (or a shell killing a job) sends every process
 * of a job. SIGPIPE too: the watcher writes to carmy-run, which may be
 * gone. */
static const int job_signals[] = { SIGINT, SIGQUIT, SIGHUP, SIGTERM,
				   SIGPIPE };
#define NJOB (sizeof(job_signals) / sizeof(job_signals[0]))

static void watch(char **argv, pid_t parent, int ctl, int st, int out)
	__attribute__((noreturn));
static void tell(int st, int type, int value);
static void reap(pid_t cmd, int st, bool *cmd_reaped, bool block);
static void kill_all(pid_t cmd, int st, bool *cmd_reaped);
static int read_rec(int fd, struct rec *r);
static void close_others(int a, int b, int c);

int sv_start(struct supervised *s, char **argv)
{
	int ctl[2], st[2] = { -1, -1 }, out[2] = { -1, -1 }, e;
	pid_t parent = getpid();
	struct rec r;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) != 0)
		return -errno;
	if (pipe2(st, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
		e = errno;
		goto fail;
	}
	s->watcher = fork();
	if (s->watcher < 0) {
		e = errno;
		goto fail;
	}
	if (s->watcher == 0) {
		close(ctl[1]);
		close(st[0]);
		close(out[0]);
		watch(argv, parent, ctl[0], st[1], out[1]);
	}
	close(ctl[0]);
	close(st[1]);
	close(out[1]);
	s->ctl = ctl[1];
	s->st = st[0];
	s->out = out[0];
	if (read_rec(s->st, &r) == 1 && r.type == REC_EXEC_FAILED &&
	    r.value > 0) {
		sv_finish(s, false);
		return r.value;
	}
	/* Running, or a watcher gone without a word: that cannot prove
	 * COMMAND did not start, so it is taken as started (and lost). */
	return 0;
fail:
	close(ctl[0]);
	close(ctl[1]);
	for (int i = 0; i < 2; i++) {
		if (st[i] >= 0)
			close(st[i]);
		if (out[i] >= 0)
			close(out[i]);
	}
	return -e;
}

int sv_ended(struct supervised *s, int *wstatus)
{
	struct rec r;
	int n;

	while ((n = read_rec(s->st, &r)) == 1 && r.type != REC_EXITED)
		;	/* nothing else comes after 'R' */
	if (n == 1)
		*wstatus = r.value;
	return n;
}

void sv_kill(struct supervised *s)
{
	/* A watcher gone already has killed everything itself. */
	(void)send(s->ctl, "K", 1, MSG_NOSIGNAL);
}

void sv_finish(struct supervised *s, bool kill)
{
	(void)send(s->ctl, kill ? "K" : "Q", 1, MSG_NOSIGNAL);
	close(s->ctl);
	close(s->st);
	close(s->out);
	while (waitpid(s->watcher, NULL, 0) < 0 && errno == EINTR)
		;
}

/* ------------------------------------------------------------ watcher */

static void watch(char **argv, pid_t parent, int ctl, int st, int out)
{
	struct sigaction ign = { .sa_handler = SIG_IGN };
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	struct sigaction orig[NJOB];
	bool cmd_reaped = false;
	sigset_t chld, mask;
	pid_t me = getpid(), cmd;
	int ep[2], sfd, e;
	ssize_t n;

	/* Not carmy-run's connection to carmyd above all: held here, it
	 * would keep carmyd from seeing carmy-run die. */
	close_others(ctl, st, out);
	for (size_t i = 0; i < NJOB; i++)
		sigaction(job_signals[i], &ign, &orig[i]);
	/* Ignored, SIGCHLD would have the kernel reap for us. */
	sigaction(SIGCHLD, &dfl, NULL);
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &mask);
	if (getppid() != parent)
		_exit(0);	/* carmy-run is gone: nothing was started */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0 ||
	    (sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK)) < 0 ||
	    pipe2(ep, O_CLOEXEC) != 0 || (cmd = fork()) < 0) {
		tell(st, REC_EXEC_FAILED, errno);
		_exit(0);
	}
	if (cmd == 0) {
		for (size_t i = 0; i < NJOB; i++)
			sigaction(job_signals[i], &orig[i], NULL);
		sigprocmask(SIG_SETMASK, &mask, NULL);
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
			goto fail;
		if (getppid() != me)
			_exit(127);	/* the watcher died: nobody records */
		/* dup2() clears CLOEXEC on the copy; out >= 3. */
		if (dup2(out, STDOUT_FILENO) < 0)
			goto fail;
		execvp(argv[0], argv);
fail:
		e = errno;
		n = write(ep[1], &e, sizeof(e));
		(void)n;	/* EOF then: taken as started */
		_exit(127);
	}
	close(ep[1]);
	close(out);
	/* The errno of a failed exec, or EOF once exec closed the pipe. */
	do
		n = read(ep[0], &e, sizeof(e));
	while (n < 0 && errno == EINTR);
	close(ep[0]);
	if (n == (ssize_t)sizeof(e) && e > 0) {
		while (waitpid(cmd, NULL, 0) < 0 && errno == EINTR)
			;
		tell(st, REC_EXEC_FAILED, e);
		_exit(0);
	}
	tell(st, REC_RUNNING, 0);

	for (;;) {
		struct pollfd pfd[2] = { { ctl, POLLIN, 0 }, { sfd, POLLIN, 0 } };
		char c;

		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			kill_all(cmd, st, &cmd_reaped);
			_exit(1);
		}
		if (pfd[1].revents != 0) {
			struct signalfd_siginfo si;

			while (read(sfd, &si, sizeof(si)) == sizeof(si))
				;
			reap(cmd, st, &cmd_reaped, false);
		}
		if (pfd[0].revents == 0)
			continue;
		n = read(ctl, &c, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 1 && c == 'Q')
			_exit(0);	/* what is left runs on, under init */
		kill_all(cmd, st, &cmd_reaped);
		if (n != 1)
			_exit(0);	/* carmy-run is gone */
	}
}

static void tell(int st, int type, int value)
{
	struct rec r = { type, value };
	ssize_t n = write(st, &r, sizeof(r));	/* atomic: < PIPE_BUF */

	(void)n;	/* carmy-run gone: nobody to tell */
}

/* Reap what has exited (one, blocking, if block), telling carmy-run when
 * it is COMMAND. */
static void reap(pid_t cmd, int st, bool *cmd_reaped, bool block)
{
	int ws;
	pid_t p;

	while ((p = waitpid(-1, &ws, block ? 0 : WNOHANG)) > 0) {
		if (p == cmd) {
			*cmd_reaped = true;
			tell(st, REC_EXITED, ws);
		}
		if (block)
			return;
	}
}

/*
 * SIGKILL every child, reap one, again, until there is none: the children
 * of each killed process come to us (we are their subreaper) and are
 * killed on the next round. A pid read from our children list cannot be
 * reused before we reap it. Without that list (no CONFIG_PROC_CHILDREN),
 * only COMMAND is killed.
 */
static void kill_all(pid_t cmd, int st, bool *cmd_reaped)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/task/%d/children",
		 (int)getpid());
	for (;;) {
		FILE *f = fopen(path, "r");
		long pid;

		if (f != NULL) {
			while (fscanf(f, "%ld", &pid) == 1)
				kill((pid_t)pid, SIGKILL);
			fclose(f);
		} else if (!*cmd_reaped) {
			kill(cmd, SIGKILL);
		}
		errno = 0;
		reap(cmd, st, cmd_reaped, true);
		if (errno == ECHILD)
			return;
	}
}

/* 1 and a whole record, 0 at end of file, or -errno. */
static int read_rec(int fd, struct rec *r)
{
	size_t got = 0;

	while (got < sizeof(*r)) {
		ssize_t n = read(fd, (char *)r + got, sizeof(*r) - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return got == 0 ? 0 : -EPROTO;
		got += (size_t)n;
	}
	return 1;
}

/* Close every descriptor from 3 up but a, b and c. */
static void close_others(int a, int b, int c)
{
	int keep[3] = { a, b, c };
	unsigned from = 3;

	for (int i = 0; i < 3; i++)	/* sorted */
		for (int j = i + 1; j < 3; j++)
			if (keep[j] < keep[i]) {
				int t = keep[i];

				keep[i] = keep[j];
				keep[j] = t;
			}
	for (int i = 0; i <= 3; i++) {
		unsigned to = i < 3 ? (unsigned)keep[i] : ~0u;

		if (to > from && close_range(from, to - 1, 0) != 0) {
			/* Before Linux 5.9: one by one, as far as the
			 * limit (the rest of the range cannot be open). */
			long max = sysconf(_SC_OPEN_MAX);

			for (long fd = from; fd < (long)to && fd < max; fd++)
				close((int)fd);
		}
		if (i < 3)
			from = (unsigned)keep[i] + 1;
	}
}
