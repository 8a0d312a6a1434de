/*
 * check_service.c - the service manager's protocols (common/service.c:
 * $LISTEN_FDS, $NOTIFY_SOCKET) and the default socket paths
 * (common/sockpath.c), against real sockets. Check forks each test, so
 * the environment and descriptors one sets up stay its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "common/service.h"
#include "common/sockpath.h"

static char tmp[64];

static void make_tmp(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/check_service.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
}

/* A socket of type bound to path (abstract when path starts with '@'),
 * listening when listens. */
static int bound(int type, const char *path, int listens)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len = offsetof(struct sockaddr_un, sun_path) + strlen(path);
	int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	memcpy(sa.sun_path, path, strlen(path));
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	else
		len++;
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, len), 0);
	if (listens)
		ck_assert_int_eq(listen(fd, 4), 0);
	return fd;
}

static void hand_over(int fd, const char *pid, const char *n)
{
	if (fd >= 0 && fd != SERVICE_FDS_START) {
		ck_assert_int_eq(dup2(fd, SERVICE_FDS_START), SERVICE_FDS_START);
		close(fd);
	}
	setenv("LISTEN_PID", pid, 1);
	setenv("LISTEN_FDS", n, 1);
	setenv("LISTEN_FDNAMES", "carmyd", 1);
}

static const char *our_pid(void)
{
	static char pid[32];

	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	return pid;
}

static void env_gone(void)
{
	ck_assert_ptr_null(getenv("LISTEN_PID"));
	ck_assert_ptr_null(getenv("LISTEN_FDS"));
	ck_assert_ptr_null(getenv("LISTEN_FDNAMES"));
}

START_TEST(test_listen_fds_none)
{
	char why[128];

	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	ck_assert_int_eq(service_listen_fds(1, why, sizeof(why)), 0);
	/* Another process's: not ours, and not passed on either. */
	hand_over(-1, "1", "1");
	ck_assert_int_eq(service_listen_fds(1, why, sizeof(why)), 0);
	env_gone();
}
END_TEST

/*
 * Descriptor 3 may be Check's own (its messages from a forked test), so
 * what puts a socket there runs in a child of its own, which reports the
 * line of its first failed check as its exit status.
 */
#define CHILD_CHECK(cond) \
	do { \
		if (!(cond)) { \
			fprintf(stderr, "failed: %s\n", #cond); \
			_exit(__LINE__ & 0xff ? __LINE__ & 0xff : 1); \
		} \
	} while (0)

static void in_child(void (*fn)(void))
{
	int status;
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		fn();
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "the child's check failed (status %d; see stderr)",
		      status);
}

static char child_path[108];

static void listen_fds_ours(void)
{
	char why[128];

	hand_over(bound(SOCK_STREAM, child_path, 1), our_pid(), "1");
	CHILD_CHECK(fcntl(SERVICE_FDS_START, F_SETFD, 0) == 0);
	CHILD_CHECK(service_listen_fds(1, why, sizeof(why)) == 1);
	CHILD_CHECK(fcntl(SERVICE_FDS_START, F_GETFD) == FD_CLOEXEC);
	CHILD_CHECK(getenv("LISTEN_PID") == NULL);
	CHILD_CHECK(getenv("LISTEN_FDS") == NULL);
	CHILD_CHECK(getenv("LISTEN_FDNAMES") == NULL);
}

START_TEST(test_listen_fds_ours)
{
	make_tmp();
	snprintf(child_path, sizeof(child_path), "%s/s", tmp);
	in_child(listen_fds_ours);
	unlink(child_path);
	rmdir(tmp);
}
END_TEST

static void listen_fds_malformed(void)
{
	static const char *const bad_n[] = { "", "0", "-1", "1x", " 1", "2",
					     "99999999999999999999" };
	static const char *const bad_pid[] = { "", "x", "-5", "0", "12 " };
	char why[128];
	int fd = open("/dev/null", O_RDONLY);

	if (fd != SERVICE_FDS_START) {
		dup2(fd, SERVICE_FDS_START);
		close(fd);
	}
	for (size_t i = 0; i < sizeof(bad_n) / sizeof(*bad_n); i++) {
		hand_over(-1, our_pid(), bad_n[i]);
		CHILD_CHECK(service_listen_fds(1, why, sizeof(why)) == -EINVAL);
		CHILD_CHECK(strstr(why, "LISTEN_FDS") != NULL);
		CHILD_CHECK(getenv("LISTEN_FDS") == NULL);
	}
	for (size_t i = 0; i < sizeof(bad_pid) / sizeof(*bad_pid); i++) {
		hand_over(-1, bad_pid[i], "1");
		CHILD_CHECK(service_listen_fds(1, why, sizeof(why)) == -EINVAL);
		CHILD_CHECK(strstr(why, "LISTEN_PID") != NULL);
	}
	/* Said to be there, and not open. */
	close(SERVICE_FDS_START);
	hand_over(-1, our_pid(), "1");
	CHILD_CHECK(service_listen_fds(1, why, sizeof(why)) == -EINVAL);
	CHILD_CHECK(strstr(why, "not open") != NULL);
}

START_TEST(test_listen_fds_malformed)
{
	in_child(listen_fds_malformed);
}
END_TEST

START_TEST(test_unix_listener)
{
	char why[128], path[108], got[108], small[4];
	struct sockaddr_in in = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd, p[2];

	make_tmp();
	snprintf(path, sizeof(path), "%s/listening", tmp);
	fd = bound(SOCK_STREAM, path, 1);
	ck_assert_int_eq(service_unix_listener(fd, got, sizeof(got), why,
					       sizeof(why)), 0);
	ck_assert_str_eq(got, path);
	ck_assert_int_eq(service_unix_listener(fd, small, sizeof(small), why,
					       sizeof(why)), -ENAMETOOLONG);
	close(fd);
	unlink(path);

	snprintf(path, sizeof(path), "%s/bound", tmp);
	fd = bound(SOCK_STREAM, path, 0);
	ck_assert_int_eq(service_unix_listener(fd, got, sizeof(got), why,
					       sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "not listening"));
	close(fd);
	unlink(path);

	snprintf(path, sizeof(path), "%s/dgram", tmp);
	fd = bound(SOCK_DGRAM, path, 0);
	ck_assert_int_eq(service_unix_listener(fd, got, sizeof(got), why,
					       sizeof(why)), -ENOTSOCK);
	close(fd);
	unlink(path);

	snprintf(path, sizeof(path), "@check_service.%d", (int)getpid());
	fd = bound(SOCK_STREAM, path, 1);
	ck_assert_int_eq(service_unix_listener(fd, got, sizeof(got), why,
					       sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "no path"));
	close(fd);

	fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&in, sizeof(in)), 0);
	ck_assert_int_eq(listen(fd, 1), 0);
	ck_assert_int_eq(service_unix_listener(fd, got, sizeof(got), why,
					       sizeof(why)), -ENOTSOCK);
	close(fd);

	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(service_unix_listener(p[0], got, sizeof(got), why,
					       sizeof(why)), -ENOTSOCK);
	ck_assert_ptr_nonnull(strstr(why, "not a socket"));
	rmdir(tmp);
}
END_TEST

/* What the manager's socket fd received: one datagram, NUL-terminated. */
static void received(int fd, const char *want)
{
	char buf[256];
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);

	ck_assert_int_gt(n, 0);
	buf[n] = '\0';
	ck_assert_str_eq(buf, want);
}

START_TEST(test_notify)
{
	char path[108], longer[sizeof(path) + 1];
	int fd;

	unsetenv("NOTIFY_SOCKET");
	ck_assert_int_eq(service_notify("READY=1"), 0);
	ck_assert(!service_notify_wanted());
	setenv("NOTIFY_SOCKET", "", 1);
	ck_assert_int_eq(service_notify("READY=1"), 0);
	ck_assert(!service_notify_wanted());

	make_tmp();
	snprintf(path, sizeof(path), "%s/notify", tmp);
	fd = bound(SOCK_DGRAM, path, 0);
	setenv("NOTIFY_SOCKET", path, 1);
	ck_assert(service_notify_wanted());
	ck_assert_int_eq(service_notify("READY=1\nSTATUS=fine"), 1);
	received(fd, "READY=1\nSTATUS=fine");
	close(fd);
	/* Nobody reads there any more. */
	ck_assert_int_lt(service_notify("STOPPING=1"), 0);
	unlink(path);
	rmdir(tmp);

	snprintf(path, sizeof(path), "@check_service.notify.%d",
		 (int)getpid());
	fd = bound(SOCK_DGRAM, path, 0);
	setenv("NOTIFY_SOCKET", path, 1);
	ck_assert_int_eq(service_notify("STOPPING=1"), 1);
	received(fd, "STOPPING=1");
	close(fd);

	setenv("NOTIFY_SOCKET", "relative/path", 1);
	ck_assert_int_eq(service_notify("READY=1"), -EINVAL);
	setenv("NOTIFY_SOCKET", "@", 1);
	ck_assert_int_eq(service_notify("READY=1"), -EINVAL);
	/* 108 bytes and a NUL do not fit sun_path. */
	memset(longer, 'a', sizeof(longer) - 1);
	longer[0] = '/';
	longer[sizeof(longer) - 1] = '\0';
	setenv("NOTIFY_SOCKET", longer, 1);
	ck_assert_int_eq(service_notify("READY=1"), -EINVAL);
}
END_TEST

START_TEST(test_sockpath_order)
{
	char buf[108], own[108], sys[108], want[108];
	int fd_sys, fd_own;

	make_tmp();
	snprintf(own, sizeof(own), "%s/carmy", tmp);
	ck_assert_int_eq(mkdir(own, 0700), 0);
	snprintf(own, sizeof(own), "%s/carmy/carmyd.sock", tmp);
	snprintf(sys, sizeof(sys), "%s/system.sock", tmp);
	unsetenv("CARMY_SOCKET");
	setenv("XDG_RUNTIME_DIR", tmp, 1);

	/* Nothing is there: the user's own path. */
	ck_assert_int_eq(sockpath_client(buf, sizeof(buf), sys),
			 (int)strlen(own));
	ck_assert_str_eq(buf, own);
	ck_assert_int_eq(sockpath_own(buf, sizeof(buf)), (int)strlen(own));
	ck_assert_str_eq(buf, own);
	/* The system's carmyd is there, the user's is not. */
	fd_sys = bound(SOCK_STREAM, sys, 1);
	sockpath_client(buf, sizeof(buf), sys);
	ck_assert_str_eq(buf, sys);
	/* carmyd itself never defaults to the system's. */
	sockpath_own(buf, sizeof(buf));
	ck_assert_str_eq(buf, own);
	/* The user's own carmyd wins. */
	fd_own = bound(SOCK_STREAM, own, 1);
	sockpath_client(buf, sizeof(buf), sys);
	ck_assert_str_eq(buf, own);
	/* Not from a directory others may write in: anyone could have put
	 * that socket there, and it must not hide the system's. */
	snprintf(want, sizeof(want), "%s/carmy", tmp);
	ck_assert_int_eq(chmod(want, 0733), 0);
	sockpath_client(buf, sizeof(buf), sys);
	ck_assert_str_eq(buf, sys);
	ck_assert_int_eq(chmod(want, 0700), 0);
	sockpath_client(buf, sizeof(buf), sys);
	ck_assert_str_eq(buf, own);
	/* $CARMY_SOCKET wins over both. */
	setenv("CARMY_SOCKET", "/somewhere/else.sock", 1);
	sockpath_client(buf, sizeof(buf), sys);
	ck_assert_str_eq(buf, "/somewhere/else.sock");
	unsetenv("CARMY_SOCKET");
	/* A file that is not a socket is not a carmyd. */
	close(fd_own);
	unlink(own);
	close(open(own, O_CREAT | O_WRONLY, 0600));
	sockpath_client(buf, sizeof(buf), sys);
	ck_assert_str_eq(buf, sys);
	unlink(own);
	/* Without $XDG_RUNTIME_DIR: /tmp/carmy-$UID. */
	unsetenv("XDG_RUNTIME_DIR");
	snprintf(want, sizeof(want), "/tmp/carmy-%u/carmyd.sock",
		 (unsigned)getuid());
	sockpath_own(buf, sizeof(buf));
	ck_assert_str_eq(buf, want);
	/* Too long for the room. */
	ck_assert_int_eq(sockpath_own(buf, 8), -ENAMETOOLONG);
	close(fd_sys);
	unlink(sys);
	snprintf(own, sizeof(own), "%s/carmy", tmp);
	rmdir(own);
	rmdir(tmp);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("service");
	TCase *tc = tcase_create("service");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_listen_fds_none);
	tcase_add_test(tc, test_listen_fds_ours);
	tcase_add_test(tc, test_listen_fds_malformed);
	tcase_add_test(tc, test_unix_listener);
	tcase_add_test(tc, test_notify);
	tcase_add_test(tc, test_sockpath_order);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
