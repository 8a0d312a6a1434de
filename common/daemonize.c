/*
 * daemonize.c - into the background, telling the parent when ready.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/daemonize.h"

int daemonize(const char *prog, int *ready_fd)
{
	int p[2], devnull;
	pid_t pid;
	char c;

	if (pipe2(p, O_CLOEXEC) != 0) {
		fprintf(stderr, "%s: pipe: %s\n", prog, strerror(errno));
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "%s: fork: %s\n", prog, strerror(errno));
		return -1;
	}
	if (pid > 0) {
		ssize_t n;

		close(p[1]);
		do
			n = read(p[0], &c, 1);
		while (n < 0 && errno == EINTR);
		_exit(n == 1 ? 0 : 1);
	}
	close(p[0]);
	setsid();
	devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull >= 0) {
		dup2(devnull, STDIN_FILENO);
		dup2(devnull, STDOUT_FILENO);
		close(devnull);
	}
	*ready_fd = p[1];
	return 0;
}
