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
 * COMMAND was exec'd ('R') or why not ('E' exec's errno, 'F' the watcher's
 * own), then how it ended ('X', wait status).
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
#include <time.h>
#include <unistd.h>

#include "tools/supervise.h"

enum {
	REC_RUNNING = 'R',		/* COMMAND was exec'd */
	REC_EXEC_FAILED = 'E',		/* exec failed: errno */
	REC_SETUP_FAILED = 'F',		/* the watcher could not start it */
	REC_EXITED = 'X',		/* COMMAND's wait status */
};

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
/* How long a kill waits for what it killed to die before leaving the rest
 * to init. */
#define KILL_WAIT_MS 2000

static void watch(char **argv, const sigset_t *mask, const struct sv_io *io,
		  pid_t parent, int ctl, int st, int out)
	__attribute__((noreturn));
static void tell(int st, int type, int value);
static void reap(pid_t cmd, int st, bool *cmd_reaped, bool block);
static void kill_all(pid_t cmd, int st, int sfd, bool *cmd_reaped);
static int read_rec(int fd, struct rec *r);
static void close_others(const int *keep, int n);
static void drain(int sfd);

int sv_start(struct supervised *s, char **argv, const sigset_t *mask)
{
	return sv_start_io(s, argv, mask, NULL);
}

int sv_start_io(struct supervised *s, char **argv, const sigset_t *mask,
		const struct sv_io *io)
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
		watch(argv, mask, io, parent, ctl[0], st[1], out[1]);
	}
	close(ctl[0]);
	close(st[1]);
	close(out[1]);
	s->ctl = ctl[1];
	s->st = st[0];
	s->out = out[0];
	if (read_rec(s->st, &r) == 1 &&
	    (r.type == REC_EXEC_FAILED || r.type == REC_SETUP_FAILED) &&
	    r.value > 0) {
		sv_finish(s, false);
		return r.type == REC_EXEC_FAILED ? r.value : -r.value;
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

static void watch(char **argv, const sigset_t *mask, const struct sv_io *io,
		  pid_t parent, int ctl, int st, int out)
{
	struct sigaction ign = { .sa_handler = SIG_IGN };
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	struct sigaction orig[NJOB];
	bool cmd_reaped = false;
	pid_t me = getpid(), cmd;
	int ep[2], sfd, e;
	sigset_t chld;
	ssize_t n;

	for (size_t i = 0; i < NJOB; i++)
		sigaction(job_signals[i], &ign, &orig[i]);
	/* Ignored, SIGCHLD would have the kernel reap for us. */
	sigaction(SIGCHLD, &dfl, NULL);
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	if (getppid() != parent)
		_exit(0);	/* carmy-run is gone: nothing was started */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0 ||
	    (sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK)) < 0 ||
	    pipe2(ep, O_CLOEXEC) != 0 || (cmd = fork()) < 0) {
		tell(st, REC_SETUP_FAILED, errno);
		_exit(0);
	}
	if (cmd == 0) {
		/* COMMAND gets carmy-run's dispositions, its mask from before
		 * it blocked the cancelling signals, and its descriptors (all
		 * of ours are close-on-exec). */
		for (size_t i = 0; i < NJOB; i++)
			sigaction(job_signals[i], &orig[i], NULL);
		sigprocmask(SIG_SETMASK, mask, NULL);
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
			goto fail;
		if (getppid() != me)
			_exit(127);	/* the watcher died: nobody records */
		/* dup2() clears CLOEXEC on the copy; out >= 3. */
		if (dup2(out, STDOUT_FILENO) < 0)
			goto fail;
		if (io != NULL && io->in >= 0 && dup2(io->in, STDIN_FILENO) < 0)
			goto fail;
		if (io != NULL && io->err >= 0 &&
		    dup2(io->err, STDERR_FILENO) < 0)
			goto fail;
		if (io != NULL && io->only_std)
			close_others((const int[]){ ep[1] }, 1);
		if (io != NULL && io->envp != NULL)
			execvpe(argv[0], argv, io->envp);
		else
			execvp(argv[0], argv);
fail:
		e = errno;
		n = write(ep[1], &e, sizeof(e));
		(void)n;	/* EOF then: taken as started */
		_exit(127);
	}
	close(ep[1]);
	/* What carmy-run held is not ours to hold: its connection to carmyd
	 * above all, which would keep carmyd from seeing carmy-run die. */
	close_others((const int[]){ ctl, st, sfd, ep[0] }, 4);
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
			kill_all(cmd, st, sfd, &cmd_reaped);
			_exit(1);
		}
		if (pfd[1].revents != 0) {
			drain(sfd);
			reap(cmd, st, &cmd_reaped, false);
		}
		if (pfd[0].revents == 0)
			continue;
		n = read(ctl, &c, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 1 && c == 'Q')
			_exit(0);	/* what is left runs on, under init */
		kill_all(cmd, st, sfd, &cmd_reaped);
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

/* Reap every child that has ended (the first blocking, if block), telling
 * carmy-run when it is COMMAND. */
static void reap(pid_t cmd, int st, bool *cmd_reaped, bool block)
{
	int ws;
	pid_t p;

	while ((p = waitpid(-1, &ws, block ? 0 : WNOHANG)) > 0) {
		if (p == cmd) {
			*cmd_reaped = true;
			tell(st, REC_EXITED, ws);
		}
		block = false;
	}
}

/*
 * SIGKILL every child, reap what died, again, until none is left: the
 * children of each killed process come to us (we are their subreaper) and
 * are killed on the next round. A pid read from our children list cannot
 * be reused before we reap it. A round waits for SIGCHLD (on sfd), not
 * for one child, so that thousands go in a few rounds. What cannot be
 * killed (another user's, after a setuid exec) is left to init, and so is
 * whatever is left after KILL_WAIT_MS, so that a process stuck in the
 * kernel cannot hold the timeout or the cancellation up for long: COMMAND's
 * end is still reported whenever it comes. Without the children list (no
 * CONFIG_PROC_CHILDREN, or /proc not mounted) only COMMAND is killed.
 */
static void kill_all(pid_t cmd, int st, int sfd, bool *cmd_reaped)
{
	struct timespec t0, now;
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/task/%d/children",
		 (int)getpid());
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd pfd = { sfd, POLLIN, 0 };
		int alive = 0, killed = 0;
		long pid, ms;
		FILE *f;

		/* First: what died since the last round is not listed, and
		 * its SIGCHLD may have been read already. */
		reap(cmd, st, cmd_reaped, false);
		f = fopen(path, "r");
		if (f != NULL) {
			while (fscanf(f, "%ld", &pid) == 1) {
				alive++;
				killed += kill((pid_t)pid, SIGKILL) == 0;
			}
			fclose(f);
		} else if (!*cmd_reaped) {
			alive = 1;
			killed = kill(cmd, SIGKILL) == 0;
		}
		if (alive == 0 || killed == 0)
			return;
		clock_gettime(CLOCK_MONOTONIC, &now);
		ms = (now.tv_sec - t0.tv_sec) * 1000 +
		     (now.tv_nsec - t0.tv_nsec) / 1000000;
		if (ms >= KILL_WAIT_MS)
			return;
		if (poll(&pfd, 1, (int)(KILL_WAIT_MS - ms)) > 0)
			drain(sfd);
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

/* Close every descriptor from 3 up but the n in keep (at most 8). */
static void close_others(const int *keep, int n)
{
	int k[8];
	unsigned from = 3;

	for (int i = 0; i < n; i++) {	/* sorted */
		int j = i;

		for (; j > 0 && k[j - 1] > keep[i]; j--)
			k[j] = k[j - 1];
		k[j] = keep[i];
	}
	for (int i = 0; i <= n; i++) {
		unsigned to = i < n ? (unsigned)k[i] : ~0u;

		if (to > from && close_range(from, to - 1, 0) != 0) {
			/* Before Linux 5.9: one by one, as far as the
			 * limit (the rest of the range cannot be open). */
			long max = sysconf(_SC_OPEN_MAX);

			for (long fd = from; fd < (long)to && fd < max; fd++)
				close((int)fd);
		}
		if (i < n)
			from = (unsigned)k[i] + 1;
	}
}

/* Empty the signalfd: what it says is in waitpid()'s answer. */
static void drain(int sfd)
{
	struct signalfd_siginfo si;

	while (read(sfd, &si, sizeof(si)) == sizeof(si))
		;
}
