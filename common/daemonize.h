/*
 * daemonize.h - into the background, telling the parent when ready.
 */
#ifndef CARMY_COMMON_DAEMONIZE_H
#define CARMY_COMMON_DAEMONIZE_H

/*
 * Fork. The parent waits until the child writes one byte on *ready_fd
 * (it is ready) and exits 0, or exits 1 if the child closes it first (its
 * error is already on stderr). The child returns 0 in a new session, with
 * standard input and output on /dev/null (standard error stays, for the
 * log). -1 if the fork failed, said on stderr as "prog: ...".
 */
int daemonize(const char *prog, int *ready_fd);

#endif
