/*
 * sockpath.c - the default socket paths (sockpath.h says the order).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sockpath.h"

/* snprintf()'s n into a room of size: the length, or -ENAMETOOLONG. */
static int put(size_t size, int n)
{
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : n;
}

int sockpath_own(char *buf, size_t size)
{
	const char *env = getenv("CARMY_SOCKET");
	const char *xdg = getenv("XDG_RUNTIME_DIR");

	if (env != NULL && env[0] != '\0')
		return put(size, snprintf(buf, size, "%s", env));
	if (xdg != NULL && xdg[0] == '/')
		return put(size, snprintf(buf, size,
					       "%s/carmy/carmyd.sock", xdg));
	return put(size, snprintf(buf, size, "/tmp/carmy-%u/carmyd.sock",
				       (unsigned)getuid()));
}

/* Is there a socket at path? Not followed: the trust checks look at what
 * is really there once the client connects. */
static int is_socket(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* Is the directory holding path the user's own: a real directory of the
 * real uid that nobody else may write in? Another user may make
 * /tmp/carmy-UID first and put a socket in it; such a socket must not hide
 * the system-wide one (the trust checks would refuse it anyway, and the
 * client would never reach the carmyd it could use). */
static int in_own_dir(const char *path)
{
	char dir[4096];
	const char *slash = strrchr(path, '/');
	struct stat st;

	if (slash == NULL || slash == path ||
	    (size_t)(slash - path) >= sizeof(dir))
		return 0;
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	return lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
	       st.st_uid == getuid() && (st.st_mode & 022) == 0;
}

int sockpath_client(char *buf, size_t size, const char *system_path)
{
	const char *env = getenv("CARMY_SOCKET");
	int n;

	n = sockpath_own(buf, size);
	if (n < 0 || (env != NULL && env[0] != '\0') ||
	    (is_socket(buf) && in_own_dir(buf)) ||
	    system_path == NULL || !is_socket(system_path))
		return n;
	return put(size, snprintf(buf, size, "%s", system_path));
}

bool sockpath_noted_segment(int fd, char *name, size_t size)
{
	char buf[256];
	const char *line;
	ssize_t n;
	size_t len;

	n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	line = strchr(buf, '\n');
	if (line == NULL)
		return false;
	line++;
	len = strcspn(line, "\n");
	/* /NAME with no other '/', whole, as carmyd's --segment takes it. */
	if (len < 2 || len >= size || line[len] != '\n' || line[0] != '/' ||
	    memchr(line + 1, '/', len - 1) != NULL)
		return false;
	memcpy(name, line, len);
	name[len] = '\0';
	return true;
}
