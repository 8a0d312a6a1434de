/*
 * service.h - the two small protocols of a service manager (systemd),
 * spoken without libsystemd: the listening sockets it hands over
 * ($LISTEN_FDS, sd_listen_fds(3)) and the state a service reports
 * ($NOTIFY_SOCKET, sd_notify(3)). Both are stable and documented by
 * systemd; carmyd and carmy-gateway use them when run as units.
 */
#ifndef CARMY_COMMON_SERVICE_H
#define CARMY_COMMON_SERVICE_H

#include <stdbool.h>
#include <stddef.h>

/* The first descriptor a service manager hands over. */
#define SERVICE_FDS_START 3

/*
 * The listening sockets handed to this process: $LISTEN_FDS of them from
 * descriptor 3 on, when $LISTEN_PID is our pid. Each is made close-on-exec,
 * and LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES are removed from the
 * environment (children must not take them for theirs).
 *
 * Returns how many (0: none were handed to us, the variables are unset or
 * name another pid), or -EINVAL when the variables are malformed or name
 * more than max descriptors (why says which, NUL-terminated).
 * Not thread-safe (it changes the environment): call it from main() before
 * any thread starts.
 */
int service_listen_fds(int max, char *why, size_t size);

/*
 * Is fd a listening stream socket of the AF_UNIX family, bound to a path
 * (neither abstract nor unnamed)? On success its path is copied into path
 * (room for size bytes, NUL-terminated). Returns 0, -ENOTSOCK (not a
 * socket, or another family or type), -EINVAL (not listening, or no path)
 * or -ENAMETOOLONG (path does not fit); why says which.
 */
int service_unix_listener(int fd, char *path, size_t size, char *why,
			  size_t wsize);

/*
 * Tell the service manager state, newline-separated VAR=VALUE lines such
 * as "READY=1", "STOPPING=1" or "STATUS=...", in one datagram to
 * $NOTIFY_SOCKET: a path, or an abstract name written with a leading '@'.
 * Never blocks (a manager that does not read loses the message).
 *
 * Returns 1 when sent, 0 when $NOTIFY_SOCKET is unset or empty (not run
 * by a service manager), or -errno: -EINVAL for an address that is
 * neither a path nor '@NAME', or too long, else what socket or sendmsg
 * said. Thread-safe, as long as nobody changes the environment.
 */
int service_notify(const char *state);

/* Does a service manager listen for service_notify()? ($NOTIFY_SOCKET is
 * set and not empty.) For a caller whose message costs work to make. */
bool service_notify_wanted(void);

#endif
