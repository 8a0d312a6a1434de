/*
 * supervise.h - carmy-run's COMMAND under a watcher process that takes
 * every process COMMAND started with it when carmy-run dies, times out or
 * is cancelled; and, should the watcher itself die, what it leaves is
 * taken by its caller (sv_subreaper(), sv_kill_orphans()).
 */
#ifndef TOOLS_SUPERVISE_H
#define TOOLS_SUPERVISE_H

#include <signal.h>
#include <stdbool.h>
#include <sys/types.h>

/* How long a kill waits for what it killed to die before it gives up on
 * the rest (a process stuck in the kernel, another user's). */
#define SV_KILL_WAIT_MS 2000

struct supervised {
	pid_t watcher;
	int ctl;	/* to the watcher; closing it (or dying) kills all */
	int st;		/* from the watcher: COMMAND's end (sv_ended) */
	int out;	/* COMMAND's standard output */
};

/*
 * Make the caller a child subreaper (PR_SET_CHILD_SUBREAPER), once, before
 * its first sv_start(): should a watcher die (kill -9), COMMAND dies with
 * it, and whatever COMMAND started, in any process group or session,
 * comes to the caller instead of to init, for sv_kill_orphans(). 0 or
 * -errno.
 */
int sv_subreaper(void);

/*
 * Where the caller's command line lies (main's argc and argv, before
 * anything moves a string of it), so that each watcher can write its own
 * name there ("carmy-watcher") once COMMAND is started: a kill by name or
 * by command line meant for the caller then misses the watcher. Without
 * it, watchers rename only their comm (PR_SET_NAME).
 */
void sv_name_watchers(int argc, char **argv);

/*
 * Start argv under a watcher; COMMAND gets signal mask *mask (the caller's
 * own may block what it waits for with a signalfd). 0: COMMAND was exec'd,
 * and s is set up. A positive errno: exec failed, COMMAND provably did not
 * run (s is cleaned up). A negative errno: a system error before COMMAND
 * could start (it did not).
 */
int sv_start(struct supervised *s, char **argv, const sigset_t *mask);

/*
 * What COMMAND gets besides its arguments: in and err become its standard
 * input and error (-1: the caller's own; otherwise descriptors >= 3, best
 * close-on-exec, which the caller closes after the start), and envp its
 * environment (NULL: the caller's). For a caller with threads, which
 * cannot change its own standard streams or environment for one child.
 * only_std: COMMAND gets descriptors 0, 1 and 2 and no other, whatever the
 * caller's libraries left open without close-on-exec. new_session:
 * COMMAND runs in a session of its own (setsid), so that nothing it
 * starts is ever in the caller's session (sv_kill_orphans(true)); it has
 * no controlling terminal then.
 */
struct sv_io {
	int in;
	int err;
	char *const *envp;
	bool only_std;
	bool new_session;
};

/* sv_start(), with io (NULL: as sv_start). */
int sv_start_io(struct supervised *s, char **argv, const sigset_t *mask,
		const struct sv_io *io);

/*
 * After s->st polled readable: COMMAND's wait status into *wstatus, 1. 0 if
 * the watcher is gone without saying (then COMMAND is gone too: it dies
 * with its watcher; what COMMAND started is the caller's to kill,
 * sv_kill_orphans()). -errno on a read error.
 */
int sv_ended(struct supervised *s, int *wstatus);

/* Kill COMMAND and every process it started (and that did not leave its
 * subtree), now; its end still comes through sv_ended(). */
void sv_kill(struct supervised *s);

/* Let the watcher go and reap it. kill: first kill what is left of
 * COMMAND's subtree; else processes COMMAND left running are left alone
 * (they come to the caller, if a subreaper, as the watcher ends). Closes
 * every descriptor in s. Returns the watcher's wait status (how it
 * ended: a signal, if it was killed), or -1. */
int sv_finish(struct supervised *s, bool kill);

/*
 * Let the watcher go, and leave alone what COMMAND left running, without
 * it ever coming to the caller: the watcher stays, as its reaper, until
 * all of it has ended, then exits. For a caller that runs many commands
 * at once and kills whatever comes to it (sv_kill_orphans()). Closes every
 * descriptor in s. Returns 0 once the watcher has ended and was reaped
 * (*wstatus: how it ended, -1 if unknown), or its pid if it stays: the
 * caller reaps it later (waitpid); if it ends other than by exit(0), it
 * was killed, and what it reaped came to the caller.
 */
pid_t sv_let_go(struct supervised *s, int *wstatus);

/*
 * Kill (SIGKILL) and reap the caller's orphans, what came to it from a
 * watcher that died: every child of the caller, or, with keep_session,
 * every one but those in the caller's own session (its own children,
 * when every COMMAND was started with new_session). Again and again, as
 * the children of each killed one come to the caller, until none is left
 * or wait_ms passed (0: kill, reap the dead, do not wait). Returns how
 * many are still alive (another user's, or stuck in the kernel), or
 * -errno if the caller's children cannot be listed.
 *
 * Not from two threads at once; no other thread of the caller may reap
 * what this kills (waitpid(-1)): a pid is killed only while it is the
 * caller's unreaped child, and so cannot have been reused.
 */
int sv_kill_orphans(bool keep_session, int wait_ms);

/*
 * Note the caller's children now, before it starts anything: those are
 * not orphans, and sv_kill_orphans() leaves them be (and unreaped). 0, or
 * -errno if they cannot be listed (then none is spared).
 */
int sv_spare(void);

#endif /* TOOLS_SUPERVISE_H */
