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
 * COMMAND itself gets SIGKILL if the watcher dies (PR_SET_PDEATHSIG), but
 * what COMMAND started does not: those become the children of the nearest
 * subreaper above. So carmy-run is one too (sv_subreaper()): should the
 * watcher be killed, they come to carmy-run, which kills them all
 * (sv_kill_orphans()) before it reports the call uncertain; only the
 * children carmy-run had before it started COMMAND are spared (sv_spare()). The watcher
 * ignores the signals a terminal sends a whole job, so that ^C cannot
 * take it before it has done its work; COMMAND gets back the dispositions
 * carmy-run had.
 *
 * A caller that runs many commands at once (carmy-gateway) cannot tell
 * whose watcher an orphan came from, so it kills every orphan, and no
 * watcher may leave it any but in dying: one let go without a kill
 * (sv_let_go()) stays, the reaper of what COMMAND left running, until
 * all of that has ended. Its COMMANDs run in sessions of their own, so
 * that the caller's own children, in its session, are told apart from
 * the orphans, which can never join it.
 *
 * The watcher names itself "carmy-watcher" (its comm, and its command
 * line where sv_name_watchers() was told where that lies), so that a kill
 * by name meant for its caller (pkill carmy-run, killall carmy-gateway,
 * pkill -f carmy-run) does not take it too: killed together, neither
 * would be left to kill what COMMAND started, which init would inherit.
 *
 * The watcher tells carmy-run, on a pipe, in records of two ints: whether
 * COMMAND was exec'd ('R') or why not ('E' exec's errno, 'F' the watcher's
 * own), then how it ended ('X', wait status); let go, that it stays ('L').
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/supervise.h"

enum {
	REC_RUNNING = 'R',		/* COMMAND was exec'd */
	REC_EXEC_FAILED = 'E',		/* exec failed: errno */
	REC_SETUP_FAILED = 'F',		/* the watcher could not start it */
	REC_EXITED = 'X',		/* COMMAND's wait status */
	REC_LINGERING = 'L',		/* let go, it stays as a reaper */
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
/* The most orphans a round of sv_kill_orphans() waits on at once. */
#define WAIT_FDS 32

/* The caller's command line, for the watcher to overwrite with its name
 * (see sv_name_watchers()): its strings, back to back, title_len bytes. */
static char *title_at;
static size_t title_len;
static const char watcher_name[] = "carmy-watcher";

static void watch(char **argv, const sigset_t *mask, const struct sv_io *io,
		  pid_t parent, int ctl, int st, int out)
	__attribute__((noreturn));
static void tell(int st, int type, int value);
static void reap(pid_t cmd, int st, bool *cmd_reaped, bool block);
static void kill_all(pid_t cmd, int st, int sfd, bool *cmd_reaped);
static void linger(int ctl, int st) __attribute__((noreturn));
static int read_rec(int fd, struct rec *r);
static void close_others(const int *keep, int n);
static void drain(int sfd);
static int reap_watcher(pid_t watcher);
static int list_children(pid_t **pids, size_t *n);
static int proc_stat(pid_t pid, char *state, pid_t *ppid, pid_t *sid);
static long ms_since(const struct timespec *t0);
static void wait_any(const pid_t *pids, int n, int ms);

int sv_subreaper(void)
{
	return prctl(PR_SET_CHILD_SUBREAPER, 1) == 0 ? 0 : -errno;
}

void sv_name_watchers(int argc, char **argv)
{
	char *end;

	if (argc < 1 || argv == NULL || argv[0] == NULL)
		return;
	end = argv[0] + strlen(argv[0]) + 1;
	/* Only strings that lie back to back, as the kernel lays them out,
	 * make one area (a caller that moved one does not have it). */
	for (int i = 1; i < argc; i++) {
		if (argv[i] != end)
			return;
		end += strlen(argv[i]) + 1;
	}
	title_at = argv[0];
	title_len = (size_t)(end - argv[0]);
}

/* In the watcher, once COMMAND has its own copy of the arguments (which
 * may lie in that area: carmy-run's do): its command line, for ps and
 * pkill -f. (Its comm it takes as it starts: COMMAND's exec resets it.) */
static void name_watcher(void)
{
	if (title_len > 0) {
		size_t n = sizeof(watcher_name) - 1;

		if (n > title_len - 1)
			n = title_len - 1;
		memset(title_at, 0, title_len);
		memcpy(title_at, watcher_name, n);
	}
}

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

int sv_finish(struct supervised *s, bool kill)
{
	(void)send(s->ctl, kill ? "K" : "Q", 1, MSG_NOSIGNAL);
	close(s->ctl);
	close(s->st);
	close(s->out);
	return reap_watcher(s->watcher);
}

pid_t sv_let_go(struct supervised *s, int *wstatus)
{
	struct rec r;
	int n;

	(void)send(s->ctl, "L", 1, MSG_NOSIGNAL);
	close(s->ctl);
	close(s->out);
	/* 'L', or end of file: it has ended (or is ending: exit closes the
	 * pipe before its parent can reap it). */
	while ((n = read_rec(s->st, &r)) == 1 && r.type != REC_LINGERING)
		;
	close(s->st);
	if (n == 1)
		return s->watcher;
	*wstatus = reap_watcher(s->watcher);
	return 0;
}

/*
 * The caller's children from before it started anything (sv_spare()): a
 * shell's job it inherited (`x & exec carmy-run ...`), never a lost
 * command's orphan, so never killed. Each stays the caller's unreaped
 * child (sv_kill_orphans() does not reap them either), so its pid cannot
 * be reused by an orphan that comes later.
 */
static pid_t *spared;
static size_t nspared;

int sv_spare(void)
{
	pid_t *pids, me = getpid(), ppid, psid;
	size_t n, kept = 0;
	char state;
	int rc = list_children(&pids, &n);

	if (rc < 0)
		return rc;
	/* Only our children: without CONFIG_PROC_CHILDREN the list holds
	 * every process, whose pids their parents may free for reuse. */
	for (size_t i = 0; i < n; i++)
		if (proc_stat(pids[i], &state, &ppid, &psid) == 0 &&
		    ppid == me)
			pids[kept++] = pids[i];
	free(spared);
	spared = pids;
	nspared = kept;
	return 0;
}

static bool is_spared(pid_t pid)
{
	for (size_t i = 0; i < nspared; i++)
		if (spared[i] == pid)
			return true;
	return false;
}

/*
 * Rounds of: list our children, reap the dead orphans, SIGKILL the live
 * ones, wait for one of them to die. A dying orphan's children come to us
 * before it can be reaped, so a round that finds no orphan, dead or alive,
 * finds the last of them gone. An orphan is told by its parent (us) and
 * session, read from /proc/PID/stat in one read: a pid listed that was
 * reaped meanwhile (one of our own children, by the thread that started
 * it) and reused is then someone else's, and left alone.
 */
int sv_kill_orphans(bool keep_session, int wait_ms)
{
	pid_t me = getpid(), sid = getsid(0);
	struct timespec t0;
	bool again = true;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		pid_t *pids, waits[WAIT_FDS], ppid, psid;
		int alive = 0, killed = 0, reaped = 0, nw = 0, rc;
		size_t n;
		char state;

		rc = list_children(&pids, &n);
		if (rc < 0)
			return rc;
		for (size_t i = 0; i < n; i++) {
			if (is_spared(pids[i]) ||
			    proc_stat(pids[i], &state, &ppid, &psid) != 0 ||
			    ppid != me || (keep_session && psid == sid))
				continue;
			if (state == 'Z' || state == 'X') {
				reaped += waitpid(pids[i], NULL, WNOHANG) > 0;
				continue;
			}
			alive++;
			if (kill(pids[i], SIGKILL) != 0)
				continue;	/* not ours to kill */
			killed++;
			if (nw < WAIT_FDS)
				waits[nw++] = pids[i];
		}
		free(pids);
		/* The children list is read without a lock: a list that
		 * changed while it was read may miss one, so none left is
		 * said by two lists in a row. */
		if (alive == 0 && reaped == 0 && !again)
			return 0;
		again = alive != 0 || reaped != 0;
		if (alive == 0)
			continue;
		if (killed == 0 && reaped == 0)
			return alive;
		if (ms_since(&t0) >= wait_ms)
			return alive;
		wait_any(waits, nw, (int)(wait_ms - ms_since(&t0)));
	}
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

	(void)prctl(PR_SET_NAME, watcher_name);
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
		/* First: whatever it starts is never in the caller's session,
		 * even if we die before it is exec'd. */
		if (io != NULL && io->new_session && setsid() < 0)
			goto fail;
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
	name_watcher();
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
			_exit(0);	/* what is left runs on, above us */
		if (n == 1 && c == 'L')
			linger(ctl, st);
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
 * whatever is left after SV_KILL_WAIT_MS, so that a process stuck in the
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
		if (ms >= SV_KILL_WAIT_MS)
			return;
		if (poll(&pfd, 1, (int)(SV_KILL_WAIT_MS - ms)) > 0)
			drain(sfd);
	}
}

/*
 * Let go ('L'): stay, the reaper of what COMMAND left running, until all
 * of it has ended, so that none of it comes to our caller (what a dying
 * child leaves comes to us, a subreaper, and is reaped here in turn).
 * The caller is told that we stay, or finds us ended. Its going away no
 * longer kills anything: ctl is closed.
 */
static void linger(int ctl, int st)
{
	pid_t p;

	close(ctl);
	while ((p = waitpid(-1, NULL, WNOHANG)) > 0)
		;
	if (p == 0)
		tell(st, REC_LINGERING, 0);
	close(st);
	while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
		;
	_exit(0);
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

/* ------------------------------------------------------------ orphans */

static int reap_watcher(pid_t watcher)
{
	int ws;

	while (waitpid(watcher, &ws, 0) < 0)
		if (errno != EINTR)
			return -1;
	return ws;
}

/*
 * Our children's pids (malloc'd, *n of them), from each thread's
 * /proc/self/task/TID/children: a process is the child of the thread
 * that forked it, and an orphan of any thread. Without those files
 * (no CONFIG_PROC_CHILDREN) every pid in /proc, for the caller to pick
 * ours from by their parent. 0 or -errno.
 */
static int list_children(pid_t **pids, size_t *n)
{
	bool any = false, all = false;
	size_t cap = 64;
	struct dirent *de;
	DIR *d;

	*n = 0;
	*pids = malloc(cap * sizeof(**pids));
	if (*pids == NULL)
		return -ENOMEM;
again:
	d = opendir(all ? "/proc" : "/proc/self/task");
	if (d == NULL) {
		free(*pids);
		return -errno;
	}
	while ((de = readdir(d)) != NULL) {
		char path[64];
		long pid;
		FILE *f = NULL;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		if (all) {
			pid = strtol(de->d_name, NULL, 10);
		} else {
			snprintf(path, sizeof(path),
				 "/proc/self/task/%.20s/children", de->d_name);
			f = fopen(path, "re");
			/* A thread gone, or no such file (a kernel without
			 * CONFIG_PROC_CHILDREN); out of descriptors or memory,
			 * the list would miss that thread's children. */
			if (f == NULL && errno != ENOENT && errno != ESRCH) {
				int e = errno;

				closedir(d);
				free(*pids);
				return -e;
			}
			if (f == NULL)
				continue;
			any = true;
			if (fscanf(f, "%ld", &pid) != 1) {
				fclose(f);
				continue;
			}
		}
		do {
			if (*n == cap) {
				pid_t *p = realloc(*pids,
						   2 * cap * sizeof(*p));

				if (p == NULL) {
					if (f != NULL)
						fclose(f);
					closedir(d);
					free(*pids);
					return -ENOMEM;
				}
				*pids = p;
				cap *= 2;
			}
			(*pids)[(*n)++] = (pid_t)pid;
		} while (f != NULL && fscanf(f, "%ld", &pid) == 1);
		/* A read that failed part way would have missed some. */
		if (f != NULL && ferror(f) && errno != ESRCH) {
			int e = errno;

			fclose(f);
			closedir(d);
			free(*pids);
			return -e;
		}
		if (f != NULL)
			fclose(f);
	}
	closedir(d);
	if (!any && !all) {
		all = true;
		goto again;
	}
	return 0;
}

/* From /proc/PID/stat, read at once: state, parent and session. 0, or
 * -1 if there is no such process. */
static int proc_stat(pid_t pid, char *state, pid_t *ppid, pid_t *sid)
{
	char path[32], buf[1024], *p;
	int fd, pgrp;
	ssize_t len;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len <= 0)
		return -1;
	buf[len] = '\0';
	/* After the last ')': the name in between may hold anything. */
	p = strrchr(buf, ')');
	if (p == NULL || sscanf(p + 1, " %c %d %d %d", state, ppid, &pgrp,
				sid) != 4)
		return -1;
	return 0;
}

static long ms_since(const struct timespec *t0)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - t0->tv_sec) * 1000 +
	       (now.tv_nsec - t0->tv_nsec) / 1000000;
}

/*
 * Up to ms for one of pids (our unreaped children) to end: each one's
 * pidfd turns readable when it does. Without pidfds (before Linux 5.3),
 * a nap of 10 ms.
 */
static void wait_any(const pid_t *pids, int n, int ms)
{
	struct pollfd pfd[WAIT_FDS];
	int k = 0;

#ifdef SYS_pidfd_open
	for (int i = 0; i < n; i++) {
		int fd = (int)syscall(SYS_pidfd_open, pids[i], 0);

		if (fd >= 0)
			pfd[k++] = (struct pollfd){ fd, POLLIN, 0 };
	}
#else
	(void)pids;
	(void)n;
#endif
	if (k > 0) {
		while (poll(pfd, (nfds_t)k, ms) < 0 && errno == EINTR)
			;
		while (k > 0)
			close(pfd[--k].fd);
		return;
	}
	if (ms > 10)
		ms = 10;
	nanosleep(&(struct timespec){ 0, ms * 1000000L }, NULL);
}
