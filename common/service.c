/*
 * service.c - $LISTEN_FDS and $NOTIFY_SOCKET, as systemd defines them
 * (sd_listen_fds(3), sd_notify(3)), without libsystemd.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/service.h"

static int say(char *why, size_t size, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int say(char *why, size_t size, int rc, const char *fmt, ...)
{
	va_list ap;

	if (why != NULL && size > 0) {
		va_start(ap, fmt);
		vsnprintf(why, size, fmt, ap);
		va_end(ap);
	}
	return rc;
}

/* A decimal number with nothing around it, 1..LONG_MAX; 0 if not one. */
static long positive(const char *s)
{
	char *end;
	long v;

	if (s == NULL || s[0] < '0' || s[0] > '9')
		return 0;
	errno = 0;
	v = strtol(s, &end, 10);
	return errno != 0 || *end != '\0' || v < 1 ? 0 : v;
}

int service_listen_fds(int max, char *why, size_t size)
{
	const char *pid_s = getenv("LISTEN_PID");
	const char *fds_s = getenv("LISTEN_FDS");
	long pid = positive(pid_s), n = positive(fds_s);
	int rc;

	if (why != NULL && size > 0)
		why[0] = '\0';
	if (pid_s == NULL || fds_s == NULL)
		rc = 0;
	else if (pid == 0)
		rc = say(why, size, -EINVAL, "LISTEN_PID=%.32s: expected a "
			 "process id", pid_s);
	else if (pid != (long)getpid())
		rc = 0;		/* meant for another process */
	else if (n == 0 || n > max)
		rc = say(why, size, -EINVAL, "LISTEN_FDS=%.32s: expected 1 "
			 "to %d socket%s", fds_s, max, max == 1 ? "" : "s");
	else
		rc = (int)n;
	for (int i = 0; i < rc; i++) {
		int fd = SERVICE_FDS_START + i;

		if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
			rc = say(why, size, -EINVAL, "LISTEN_FDS=%ld: "
				 "descriptor %d is not open", n, fd);
			break;
		}
	}
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	return rc;
}

int service_unix_listener(int fd, char *path, size_t size, char *why,
			  size_t wsize)
{
	struct sockaddr_un sa;
	socklen_t sl = sizeof(sa), il;
	int domain = 0, type = 0, acc = 0;
	size_t len;

	il = sizeof(int);
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &il) != 0)
		return say(why, wsize, errno == ENOTSOCK ? -ENOTSOCK : -errno,
			   "descriptor %d is not a socket: %s", fd,
			   strerror(errno));
	il = sizeof(int);
	if (domain != AF_UNIX ||
	    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &il) != 0 ||
	    type != SOCK_STREAM)
		return say(why, wsize, -ENOTSOCK, "descriptor %d is not a Unix "
			   "stream socket (family %d, type %d)", fd, domain,
			   type);
	il = sizeof(int);
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &il) != 0 ||
	    acc == 0)
		return say(why, wsize, -EINVAL, "descriptor %d is a Unix stream "
			   "socket that is not listening", fd);
	memset(&sa, 0, sizeof(sa));
	if (getsockname(fd, (struct sockaddr *)&sa, &sl) != 0 ||
	    sl <= offsetof(struct sockaddr_un, sun_path) ||
	    sa.sun_path[0] == '\0')
		return say(why, wsize, -EINVAL, "descriptor %d listens on no "
			   "path (an abstract or unnamed socket)", fd);
	len = strnlen(sa.sun_path, sl - offsetof(struct sockaddr_un,
						 sun_path));
	if (len >= size)
		return say(why, wsize, -ENAMETOOLONG, "descriptor %d: its path "
			   "is too long", fd);
	memcpy(path, sa.sun_path, len);
	path[len] = '\0';
	return 0;
}

int service_notify(const char *state)
{
	const char *addr = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct iovec iov = { .iov_base = (void *)state,
			     .iov_len = strlen(state) };
	struct msghdr mh = { .msg_name = &sa, .msg_iov = &iov,
			     .msg_iovlen = 1 };
	size_t len;
	ssize_t n;
	int fd, err;

	if (addr == NULL || addr[0] == '\0')
		return 0;
	len = strlen(addr);
	if ((addr[0] != '/' && addr[0] != '@') || len < 2 ||
	    len >= sizeof(sa.sun_path))
		return -EINVAL;
	memcpy(sa.sun_path, addr, len);
	if (addr[0] == '@') {
		sa.sun_path[0] = '\0';	/* abstract: no NUL at the end */
		mh.msg_namelen = (socklen_t)(offsetof(struct sockaddr_un,
						      sun_path) + len);
	} else {
		mh.msg_namelen = (socklen_t)(offsetof(struct sockaddr_un,
						      sun_path) + len + 1);
	}
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	n = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	err = errno;
	close(fd);
	if (n < 0)
		return -err;
	return n == (ssize_t)iov.iov_len ? 1 : -EMSGSIZE;
}

bool service_notify_wanted(void)
{
	const char *addr = getenv("NOTIFY_SOCKET");

	return addr != NULL && addr[0] != '\0';
}
