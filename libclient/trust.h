/*
 * trust.h - whether a client may trust the carmyd it finds: the socket's
 * directory, the peer on the socket, and the segment carmyd names. One
 * implementation for libcarmy and carmyctl (docs/trust.md).
 *
 * Every check returns 0, CARMY_EUNTRUSTED with a sentence in why (which
 * path, which uid or mode), or CARMY_EUNAVAILABLE where the path is not
 * there at all (no carmyd to trust or distrust).
 */
#ifndef CARMY_LIBCLIENT_TRUST_H
#define CARMY_LIBCLIENT_TRUST_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

/* Users named in $CARMY_TRUSTED_USERS, at most. */
#define TRUST_USERS_MAX 16
/* Room for a check's sentence. */
#define TRUST_WHY_MAX 320

/* Who a client trusts to run carmyd: itself (its effective uid), root,
 * and the users named in $CARMY_TRUSTED_USERS. */
struct trust {
	uid_t tr_uids[TRUST_USERS_MAX + 2];
	size_t tr_n;
};

/* The policy of the calling process, from its effective uid and
 * $CARMY_TRUSTED_USERS (names or uids, separated by commas or spaces;
 * ignored in a set-uid program). 0, or CARMY_EUNTRUSTED for a name that is
 * no user or too many of them (why says which). */
int trust_init(struct trust *t, char *why, size_t size);

/* Parse spec, as $CARMY_TRUSTED_USERS, into t, after self and root. */
int trust_parse(struct trust *t, uid_t self, const char *spec, char *why,
		size_t size);

bool trust_uid(const struct trust *t, uid_t uid);

/* The directory holding socket_path, looked at without following a
 * symbolic link at its last component: a real directory, owned by a
 * trusted uid, that neither group nor others can write. Its ancestors
 * (followed) must be owned by trusted uids and, if others can write them,
 * be sticky (/tmp), so that nobody else can rename what is below. */
int trust_socket_dir(const struct trust *t, const char *socket_path,
		     char *why, size_t size);

/* The process at the other end of fd, connected to socket_path: its uid
 * (SO_PEERCRED, fixed by the kernel at carmyd's listen()) must be trusted.
 * On success *peer is that uid. */
int trust_peer(const struct trust *t, int fd, const char *socket_path,
	       uid_t *peer, char *why, size_t size);

/* The segment name's file, st from fstat() on the descriptor that is about
 * to be mapped: a regular file owned by want (the peer's uid), or with
 * want (uid_t)-1 or 0 (root: systemd listened and handed carmyd the
 * socket) by any trusted uid; nobody but its owner and group can
 * write it, and its group only if the caller owns it or belongs to that
 * group (carmyd --group). */
int trust_segment(const struct trust *t, const struct stat *st, uid_t want,
		  const char *name, char *why, size_t size);

#endif
