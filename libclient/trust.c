/*
 * trust.c - whether a client may trust the carmyd it finds.
 *
 * A socket path can be planted (a directory in /tmp made first by another
 * user, a symbolic link) and raced; the kernel's credentials of the peer
 * cannot. So the peer's uid is what decides, and the segment carmyd names
 * must be that uid's; the directory checks come first to refuse an
 * obviously hostile set-up with a clear sentence before anything is sent.
 * The rules are OpenSSH's and tmux's for their agent and socket
 * directories; docs/trust.md says what each one defends against.
 */
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "carmy.h"
#include "libclient/trust.h"

#define TRUSTED_USERS_ENV "CARMY_TRUSTED_USERS"

static int untrusted(char *why, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int lookup_user(const char *name, uid_t *uid);
static bool in_group(gid_t gid);
static int dir_of(const char *socket_path, char *dir, size_t size);

/* ------------------------------------------------------------ policy */

int trust_init(struct trust *t, char *why, size_t size)
{
	/* secure_getenv: a set-uid program trusts nobody it is told to. */
	return trust_parse(t, geteuid(), secure_getenv(TRUSTED_USERS_ENV),
			   why, size);
}

int trust_parse(struct trust *t, uid_t self, const char *spec, char *why,
		size_t size)
{
	const char *p = spec;

	t->tr_n = 0;
	t->tr_uids[t->tr_n++] = self;
	t->tr_uids[t->tr_n++] = 0;
	if (why != NULL && size > 0)
		why[0] = '\0';
	while (p != NULL && *p != '\0') {
		char name[LOGIN_NAME_MAX + 1];
		size_t len = strcspn(p, ", \t");
		uid_t uid = 0;	/* lookup_user() sets it on success */

		if (len == 0) {
			p++;
			continue;
		}
		if (len >= sizeof(name))
			return untrusted(why, size, "$%s: '%.*s...' is too long "
					 "for a user name", TRUSTED_USERS_ENV,
					 32, p);
		memcpy(name, p, len);
		name[len] = '\0';
		p += len;
		if (lookup_user(name, &uid) != 0)
			return untrusted(why, size, "$%s: '%s' is neither a "
					 "user name nor a uid",
					 TRUSTED_USERS_ENV, name);
		if (trust_uid(t, uid))
			continue;
		if (t->tr_n == sizeof(t->tr_uids) / sizeof(t->tr_uids[0]))
			return untrusted(why, size, "$%s: more than %d users",
					 TRUSTED_USERS_ENV, TRUST_USERS_MAX);
		t->tr_uids[t->tr_n++] = uid;
	}
	return 0;
}

bool trust_uid(const struct trust *t, uid_t uid)
{
	for (size_t i = 0; i < t->tr_n; i++)
		if (t->tr_uids[i] == uid)
			return true;
	return false;
}

/* ------------------------------------------------------------ checks */

int trust_socket_dir(const struct trust *t, const char *socket_path,
		     char *why, size_t size)
{
	char dir[PATH_MAX];
	struct stat st;
	size_t len;

	if (dir_of(socket_path, dir, sizeof(dir)) != 0)
		return -ENAMETOOLONG;
	/* The directory itself: lstat, so a symbolic link planted in its
	 * place is seen as one, never followed. */
	if (lstat(dir, &st) != 0)
		return CARMY_EUNAVAILABLE;	/* as connect() would find */
	if (S_ISLNK(st.st_mode))
		return untrusted(why, size, "the socket's directory %s is a "
				 "symbolic link", dir);
	if (!S_ISDIR(st.st_mode))
		return untrusted(why, size, "the socket's directory %s is not "
				 "a directory", dir);
	if (!trust_uid(t, st.st_uid))
		return untrusted(why, size, "the socket's directory %s belongs "
				 "to uid %u, not to us (uid %u), root or a user "
				 "in $%s", dir, (unsigned)st.st_uid,
				 (unsigned)t->tr_uids[0], TRUSTED_USERS_ENV);
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
		return untrusted(why, size, "the socket's directory %s has mode "
				 "%04o: %s can write in it and replace the "
				 "socket", dir, (unsigned)(st.st_mode & 07777),
				 st.st_mode & S_IWOTH ? "anyone" : "its group");
	/* Its ancestors, followed (/var/run is a link to /run): whoever owns
	 * one, or can write one that is not sticky, can swap what is below.
	 * A sticky one (/tmp) lets others add names, not rename ours. */
	for (len = strlen(dir); len > 1;) {
		while (len > 1 && dir[len - 1] != '/')
			len--;
		if (len > 1)
			len--;		/* "/a/b" -> "/a"; "/a" -> "/" */
		dir[len] = '\0';
		if (stat(dir, &st) != 0)
			return CARMY_EUNAVAILABLE;
		if (!trust_uid(t, st.st_uid))
			return untrusted(why, size, "%s, above the socket's "
					 "directory, belongs to uid %u, not to "
					 "us (uid %u), root or a user in $%s",
					 dir, (unsigned)st.st_uid,
					 (unsigned)t->tr_uids[0],
					 TRUSTED_USERS_ENV);
		if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 &&
		    (st.st_mode & S_ISVTX) == 0)
			return untrusted(why, size, "%s, above the socket's "
					 "directory, has mode %04o: others can "
					 "rename what is in it", dir,
					 (unsigned)(st.st_mode & 07777));
	}
	return 0;
}

int trust_peer(const struct trust *t, int fd, const char *socket_path,
	       uid_t *peer, char *why, size_t size)
{
	struct ucred uc;
	socklen_t len = sizeof(uc);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) != 0 ||
	    len != sizeof(uc))
		return untrusted(why, size, "cannot learn who listens on %s: "
				 "%s", socket_path, strerror(errno));
	if (!trust_uid(t, uc.uid))
		return untrusted(why, size, "the carmyd on %s runs as uid %u "
				 "(pid %d), not as us (uid %u), root or a user "
				 "in $%s", socket_path, (unsigned)uc.uid,
				 (int)uc.pid, (unsigned)t->tr_uids[0],
				 TRUSTED_USERS_ENV);
	*peer = uc.uid;
	return 0;
}

int trust_segment(const struct trust *t, const struct stat *st, uid_t want,
		  const char *name, char *why, size_t size)
{
	const unsigned mode = st->st_mode & 07777;

	if (!S_ISREG(st->st_mode))
		return untrusted(why, size, "segment %s is not a regular file",
				 name);
	/* A socket root listened on is one a service manager (systemd) made
	 * and handed to carmyd, which runs as a user of its own: what root
	 * vouches for is the socket, and the segment may be any trusted
	 * uid's. */
	if (want == 0)
		want = (uid_t)-1;
	if (want != (uid_t)-1 && st->st_uid != want)
		return untrusted(why, size, "segment %s belongs to uid %u, not "
				 "to the carmyd that named it (uid %u)", name,
				 (unsigned)st->st_uid, (unsigned)want);
	if (want == (uid_t)-1 && !trust_uid(t, st->st_uid))
		return untrusted(why, size, "segment %s belongs to uid %u, not "
				 "to us (uid %u), root or a user in $%s", name,
				 (unsigned)st->st_uid, (unsigned)t->tr_uids[0],
				 TRUSTED_USERS_ENV);
	if ((mode & S_IWOTH) != 0)
		return untrusted(why, size, "segment %s has mode %04o: anyone "
				 "can write in it", name, mode);
	/* carmyd --group shares it with a group, all of whose members are
	 * its clients and can write it: one we chose to be in. Root need
	 * not be in it: it may write the segment anyway, and reads the
	 * group's table as the operator it is (carmyctl), whoever else can
	 * write it. */
	if ((mode & S_IWGRP) != 0 && st->st_uid != t->tr_uids[0] &&
	    t->tr_uids[0] != 0 && !in_group(st->st_gid))
		return untrusted(why, size, "segment %s has mode %04o and "
				 "group %u, which we are not in: others can "
				 "write in it", name, mode,
				 (unsigned)st->st_gid);
	return 0;
}

/* ------------------------------------------------------------ helpers */

static int untrusted(char *why, size_t size, const char *fmt, ...)
{
	va_list ap;

	if (why != NULL && size > 0) {
		va_start(ap, fmt);
		vsnprintf(why, size, fmt, ap);
		va_end(ap);
	}
	return CARMY_EUNTRUSTED;
}

/* A decimal uid, or a user's name. 0 or -1. */
static int lookup_user(const char *name, uid_t *uid)
{
	struct passwd pw, *res = NULL;
	char *buf, *end;
	unsigned long v;
	int rc;

	if (name[0] >= '0' && name[0] <= '9') {
		errno = 0;
		v = strtoul(name, &end, 10);
		if (errno != 0 || *end != '\0' || v >= (uid_t)-1)
			return -1;
		*uid = (uid_t)v;
		return 0;
	}
	buf = malloc(16384);
	if (buf == NULL)
		return -1;
	rc = getpwnam_r(name, &pw, buf, 16384, &res);
	if (rc == 0 && res != NULL)
		*uid = pw.pw_uid;
	free(buf);
	return rc == 0 && res != NULL ? 0 : -1;
}

/* Is gid our effective group or one of our supplementary groups? The list
 * is as long as the process's own (getgroups(0)), on the heap beyond a few:
 * NGROUPS_MAX of them (65536) would not fit a small thread's stack. A list
 * that cannot be read counts as "not in it", which refuses. */
static bool in_group(gid_t gid)
{
	gid_t few[32], *groups = few;
	bool found = false;
	int n, max;

	if (getegid() == gid)
		return true;
	for (;;) {
		max = getgroups(0, NULL);
		if (max <= 0)
			return false;
		if ((size_t)max > sizeof(few) / sizeof(few[0])) {
			groups = malloc((size_t)max * sizeof(*groups));
			if (groups == NULL)
				return false;
		}
		n = getgroups(max, groups);
		if (n >= 0 || errno != EINVAL)
			break;
		/* The list grew between the two calls: again. */
		if (groups != few)
			free(groups);
		groups = few;
	}
	for (int i = 0; i < n; i++)
		if (groups[i] == gid)
			found = true;
	if (groups != few)
		free(groups);
	return found;
}

/* The absolute path of socket_path's directory: "." and relative paths
 * are taken from the working directory. 0 or -1. */
static int dir_of(const char *socket_path, char *dir, size_t size)
{
	const char *slash = strrchr(socket_path, '/');
	size_t at = 0, len;

	if (socket_path[0] != '/') {
		if (getcwd(dir, size) == NULL)
			return -1;
		at = strlen(dir);
		if (slash != NULL && at + 1 < size && at > 1)
			dir[at++] = '/';
		else if (slash != NULL && at == 1)
			at = 1;		/* the working directory is "/" */
	}
	if (slash == NULL) {
		dir[at] = '\0';
		return 0;
	}
	len = (size_t)(slash - socket_path);
	if (socket_path[0] == '/' && len == 0)
		len = 1;		/* "/carmyd.sock": the root */
	if (at + len >= size)
		return -1;
	memcpy(dir + at, socket_path, len);
	dir[at + len] = '\0';
	/* "a//b/": trailing slashes name the same directory. */
	while (strlen(dir) > 1 && dir[strlen(dir) - 1] == '/')
		dir[strlen(dir) - 1] = '\0';
	return 0;
}
