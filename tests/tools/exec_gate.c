/*
 * exec_gate.c - holds a command's exec until a test lets it go.
 *
 * Preloaded (LD_PRELOAD) into carmy-run by carmy-run.test, so that the
 * test can take carmyd away at the one moment it needs: after carmy-run
 * reserved the call and before COMMAND starts (or fails to). When
 * CARMY_TEST_EXEC_GATE names a directory holding two FIFOs, "at" and
 * "go", an execvp() or execvpe() of a file inside that directory first
 * opens "at" for writing (returning once the test opens it to read: the
 * exec is reached), then opens "go" for reading (returning once the test
 * opens it to write: go on), and only then does what it would have done.
 * Every other exec is glibc's own, untouched: timeout(1) and env(1), say,
 * which start carmy-run under the same environment.
 *
 * carmy-run's watcher runs the exec in COMMAND's process, which dies with
 * the watcher (PR_SET_PDEATHSIG), so a test that gives up leaves nothing
 * blocked behind it.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gate.h"

typedef int (*execvpe_fn)(const char *, char *const[], char *const[]);
typedef int (*execvp_fn)(const char *, char *const[]);

/* Hold an exec of file, if it lies in the gate's directory. */
static void hold(const char *file)
{
	const char *dir = getenv("CARMY_TEST_EXEC_GATE");
	size_t n;
	int saved = errno;

	if (dir == NULL || file == NULL)
		return;
	n = strlen(dir);
	if (n == 0 || strncmp(file, dir, n) != 0 || file[n] != '/')
		return;
	gate_hold(dir);
	errno = saved;
}

int execvp(const char *file, char *const argv[])
{
	execvp_fn real = (execvp_fn)dlsym(RTLD_NEXT, "execvp");

	if (real == NULL) {
		errno = ENOSYS;
		return -1;
	}
	hold(file);
	return real(file, argv);
}

int execvpe(const char *file, char *const argv[], char *const envp[])
{
	execvpe_fn real = (execvpe_fn)dlsym(RTLD_NEXT, "execvpe");

	if (real == NULL) {
		errno = ENOSYS;
		return -1;
	}
	hold(file);
	return real(file, argv, envp);
}
