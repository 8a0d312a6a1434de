/*
 * supervise.h - carmy-run's COMMAND under a watcher process that takes
 * every process COMMAND started with it when carmy-run dies, times out or
 * is cancelled.
 */
#ifndef TOOLS_SUPERVISE_H
#define TOOLS_SUPERVISE_H

#include <signal.h>
#include <stdbool.h>
#include <sys/types.h>

struct supervised {
	pid_t watcher;
	int ctl;	/* to the watcher; closing it (or dying) kills all */
	int st;		/* from the watcher: COMMAND's end (sv_ended) */
	int out;	/* COMMAND's standard output */
};

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
 * caller's libraries left open without close-on-exec.
 */
struct sv_io {
	int in;
	int err;
	char *const *envp;
	bool only_std;
};

/* sv_start(), with io (NULL: as sv_start). */
int sv_start_io(struct supervised *s, char **argv, const sigset_t *mask,
		const struct sv_io *io);

/*
 * After s->st polled readable: COMMAND's wait status into *wstatus, 1. 0 if
 * the watcher is gone without saying (then COMMAND is gone too: it dies
 * with its watcher). -errno on a read error.
 */
int sv_ended(struct supervised *s, int *wstatus);

/* Kill COMMAND and every process it started (and that did not leave its
 * subtree), now; its end still comes through sv_ended(). */
void sv_kill(struct supervised *s);

/* Let the watcher go and reap it. kill: first kill what is left of
 * COMMAND's subtree; else processes COMMAND left running are left alone.
 * Closes every descriptor in s. */
void sv_finish(struct supervised *s, bool kill);

#endif /* TOOLS_SUPERVISE_H */
