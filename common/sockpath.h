/*
 * sockpath.h - where carmyd listens and clients look for it by default,
 * and what its lock file says.
 */
#ifndef CARMY_COMMON_SOCKPATH_H
#define CARMY_COMMON_SOCKPATH_H

#include <stdbool.h>
#include <stddef.h>

/* The system-wide carmyd's socket: the carmyd.service unit listens here
 * (systemd/carmyd.socket), in a directory systemd makes for it. */
#define SOCKPATH_SYSTEM "/run/carmy/carmyd.sock"

/*
 * A user's own carmyd's socket: $CARMY_SOCKET if set and not empty, else
 * $XDG_RUNTIME_DIR/carmy/carmyd.sock if $XDG_RUNTIME_DIR is an absolute
 * path, else /tmp/carmy-$UID/carmyd.sock (the real uid). carmyd's default.
 * Returns the length written to buf (NUL-terminated), or -ENAMETOOLONG.
 */
int sockpath_own(char *buf, size_t size);

/*
 * Where a client looks by default: $CARMY_SOCKET if set and not empty;
 * else the user's own carmyd's socket (sockpath_own()) if a socket is
 * there, in a directory of the user's that nobody else may write in;
 * else system_path (SOCKPATH_SYSTEM) if a socket is there; else
 * the user's own path again, so that an error names it. A user's own
 * carmyd always wins over the system's, and a carmyd never listens on the
 * system path unless told to. Returns the length written to buf
 * (NUL-terminated), or -ENAMETOOLONG.
 */
int sockpath_client(char *buf, size_t size, const char *system_path);

/*
 * The segment a socket's lock file (PATH.lock, open as fd) names on its
 * second line, where carmyd notes the segment it serves: into name (size
 * bytes) if that line is a whole /NAME with no other '/' that fits.
 * Returns true if so; whether that segment exists is the caller's to see.
 */
bool sockpath_noted_segment(int fd, char *name, size_t size);

#endif
