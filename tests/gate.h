/*
 * gate.h - the meeting point of the tests' preloaded gates
 * (tests/tools/exec_gate.c, tests/bench/populate_gate.c).
 *
 * A gate is a directory holding two FIFOs, "at" and "go". The held code
 * opens "at" for writing, which returns once the test opens it to read
 * (the held code is there), then "go" for reading, which returns once the
 * test opens it to write (go on).
 */
#ifndef CARMY_TESTS_GATE_H
#define CARMY_TESTS_GATE_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

/* Block on FIFO dir/name, opened with flags, until the other end opens. */
static inline void gate_meet(const char *dir, const char *name, int flags)
{
	char path[4096];
	int fd;

	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >=
	    (int)sizeof(path))
		return;
	do
		fd = open(path, flags | O_CLOEXEC);
	while (fd < 0 && errno == EINTR);
	if (fd >= 0)
		close(fd);
}

/* Hold here until the test lets go. */
static inline void gate_hold(const char *dir)
{
	gate_meet(dir, "at", O_WRONLY);
	gate_meet(dir, "go", O_RDONLY);
}

#endif
