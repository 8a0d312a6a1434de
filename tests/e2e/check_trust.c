/*
 * check_trust.c - a client trusts only the carmyd it should: one run by
 * itself, root or a user it names in $CARMY_TRUSTED_USERS, behind a socket
 * directory nobody else controls, with a segment nobody else can write.
 * Real carmyds, some run as throwaway users (carmy-test-t1 the victim,
 * carmy-test-t2 another local user, carmy-test-tg a group they share),
 * which only root can create: without root those cases skip with a note.
 * The rules one at a time are in tests/libclient/check_trust.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "tests/e2e/e2e.h"

#define EXIT_UNTRUSTED 77	/* carmy-run's and carmyctl's */
#define STRANGER 4243		/* a uid nobody here runs as */
#define WAIT_MS 20000

static char base[64];		/* each test's scratch, removed after */

static uid_t vuid, auid;	/* victim, attacker */
static gid_t vgid, agid;

static void setup(void)
{
	snprintf(base, sizeof(base), "/tmp/carmy-trust.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(base));
	/* Anyone can reach it and leave a file in it (carmy-run's
	 * markers), as in /tmp: sticky, so it passes as an ancestor. */
	ck_assert_int_eq(chmod(base, 01777), 0);
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	if (system(cmd) != 0)
		e2e_note("could not remove %s", base);
}

/* ------------------------------------------------------------ helpers */

/* Can uid run the programs of this tree? Not where the build lies in a
 * directory only root can enter (a checkout in /root). */
static bool can_run_as(uid_t uid, gid_t gid)
{
	char prog[512];
	pid_t pid;
	int st;

	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(harness_become(uid, gid, NULL, 0) == 0 &&
		      access(harness_path("daemon/carmyd", prog, sizeof(prog)),
			     X_OK) == 0 &&
		      access(harness_path("tools/carmy-run", prog,
					  sizeof(prog)), X_OK) == 0 ? 0 : 1);
	st = harness_waitpid(pid, WAIT_MS);
	return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static bool need_users(void)
{
	char prog[512];

	if (harness_user("t1", &vuid, &vgid) != 0 ||
	    harness_user("t2", &auid, &agid) != 0) {
		e2e_note("skipped: needs root, to create the throwaway users "
			 "carmy-test-t1 and carmy-test-t2");
		return false;
	}
	if (!can_run_as(vuid, vgid) || !can_run_as(auid, agid)) {
		e2e_note("skipped: carmy-test-t1 and carmy-test-t2 cannot run "
			 "%s (a directory above it is closed to them)",
			 harness_path("daemon/carmyd", prog, sizeof(prog)));
		return false;
	}
	return true;
}

static bool need_root(const char *what)
{
	if (geteuid() == 0)
		return true;
	e2e_note("skipped: %s needs root", what);
	return false;
}

static void path_in(char *buf, size_t size, const char *dir, const char *rel)
{
	ck_assert_int_lt(snprintf(buf, size, "%s/%s", dir, rel), (int)size);
}

static mode_t mode_of(const char *path)
{
	struct stat st;

	ck_assert_int_eq(lstat(path, &st), 0);
	return st.st_mode & 07777;
}

static void segment_file(const struct carmyd_proc *d, char *buf, size_t size)
{
	ck_assert_int_lt(snprintf(buf, size, "/dev/shm%s", d->segment),
			 (int)size);
}

/* What a client process found. */
struct outcome {
	int rc;			/* carmy_connect()'s */
	int replayed;		/* it then reserved, completed and replayed */
	char detail[400];	/* carmy_trust_detail() */
};

/* A client's work, in connect_as()'s child: connect to sock, and if that
 * works reserve, complete and replay one call. */
struct client_job {
	const char *sock;
	struct outcome out;
};

static void *client_work(void *arg)
{
	struct client_job *job = arg;
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("p", "s", "trust");
	struct outcome *out = &job->out;
	carmy_t *c = NULL;

	out->rc = carmy_connect(&c, job->sock);
	snprintf(out->detail, sizeof(out->detail), "%s",
		 carmy_trust_detail());
	if (out->rc == 0 &&
	    carmy_begin(c, &call, &r) == CARMY_RESERVED &&
	    carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "ok", 2) == 0 &&
	    carmy_begin(c, &call, &r) == CARMY_REPLAY &&
	    strcmp(r.result, "ok") == 0)
		out->replayed = 1;
	carmy_reservation_clear(&r);
	carmy_close(c);
	return NULL;
}

/* Thread stack size for connect_as()'s client: 0 runs it on the child's
 * main thread. */
static size_t client_stack;

/* In a child running as uid/gid with the given groups, with
 * $CARMY_TRUSTED_USERS set to trusted (NULL: unset): connect to sock (NULL:
 * the default, with neither $CARMY_SOCKET nor $XDG_RUNTIME_DIR), and if
 * that works reserve, complete and replay one call (client_work), on a
 * thread with a client_stack-byte stack if that is set. The child dying
 * (a crash) fails the test. */
static void connect_as(uid_t uid, gid_t gid, const gid_t *groups, size_t n,
		       const char *trusted, const char *sock,
		       struct outcome *o)
{
	int p[2], st;
	pid_t pid;

	ck_assert_int_eq(pipe(p), 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct client_job job = { .sock = sock };

		memset(&job.out, 0, sizeof(job.out));
		close(p[0]);
		if (harness_become(uid, gid, groups, n) != 0)
			_exit(3);
		if (trusted != NULL)
			setenv("CARMY_TRUSTED_USERS", trusted, 1);
		else
			unsetenv("CARMY_TRUSTED_USERS");
		unsetenv("CARMY_SOCKET");
		unsetenv("XDG_RUNTIME_DIR");
		if (client_stack == 0) {
			client_work(&job);
		} else {
			pthread_attr_t attr;
			pthread_t t;

			if (pthread_attr_init(&attr) != 0 ||
			    pthread_attr_setstacksize(&attr, client_stack) != 0 ||
			    pthread_create(&t, &attr, client_work, &job) != 0 ||
			    pthread_join(t, NULL) != 0)
				_exit(5);
		}
		if (write(p[1], &job.out, sizeof(job.out)) !=
		    (ssize_t)sizeof(job.out))
			_exit(4);
		_exit(0);
	}
	close(p[1]);
	st = e2e_read_full(p[0], o, sizeof(*o), WAIT_MS);
	close(p[0]);
	if (st != 0) {
		st = harness_waitpid(pid, WAIT_MS);
		ck_abort_msg("the client as uid %u said nothing (%s %d)",
			     (unsigned)uid,
			     st != -1 && WIFSIGNALED(st) ? "killed by signal" :
							   "exit status",
			     st == -1 ? -1 : WIFSIGNALED(st) ? WTERMSIG(st) :
							      WEXITSTATUS(st));
	}
	st = harness_waitpid(pid, WAIT_MS);
	ck_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/*
 * Run argv (a program of this tree, then its arguments) as uid/gid with
 * the given groups and $CARMY_TRUSTED_USERS as in connect_as(), its
 * standard error into err. Returns its exit status.
 */
static int run_as(uid_t uid, gid_t gid, const gid_t *groups, size_t n,
		  const char *trusted, const char *const *argv, char *err,
		  size_t size)
{
	char prog[512];
	size_t have = 0;
	int p[2], st;
	pid_t pid;

	ck_assert_int_eq(pipe(p), 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		close(p[0]);
		/* Its output is not TAP: only its standard error is read. */
		if (null >= 0)
			dup2(null, STDOUT_FILENO);
		dup2(p[1], STDERR_FILENO);
		if (harness_become(uid, gid, groups, n) != 0)
			_exit(3);
		if (trusted != NULL)
			setenv("CARMY_TRUSTED_USERS", trusted, 1);
		else
			unsetenv("CARMY_TRUSTED_USERS");
		unsetenv("CARMY_SOCKET");
		unsetenv("XDG_RUNTIME_DIR");
		execv(harness_path(argv[0], prog, sizeof(prog)),
		      (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	for (uint64_t t0 = harness_now_ns(); have + 1 < size;) {
		struct pollfd pfd = { .fd = p[0], .events = POLLIN };
		ssize_t got;

		ck_assert_msg(e2e_ms_since(t0) < WAIT_MS, "%s hangs", argv[0]);
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		got = read(p[0], err + have, size - 1 - have);
		if (got <= 0)
			break;
		have += (size_t)got;
	}
	err[have] = '\0';
	close(p[0]);
	st = harness_waitpid(pid, WAIT_MS);
	ck_assert_msg(st != -1 && WIFEXITED(st), "%s did not exit", argv[0]);
	return WEXITSTATUS(st);
}

/* carmy-run on sock (NULL: the default) of a command that would write
 * marker: its exit status. */
static int carmy_run_as(uid_t uid, gid_t gid, const gid_t *groups, size_t n,
			const char *trusted, const char *sock,
			const char *marker, char *err, size_t size)
{
	const char *argv[] = { "tools/carmy-run", "--principal", "victim",
			       "--session", "s", "--request-id", marker,
			       "--socket", sock, "--", "/bin/sh", "-c",
			       "echo amount=100 > \"$0\"; echo amount=100",
			       marker, NULL };

	if (sock == NULL) {	/* drop --socket */
		memmove(&argv[7], &argv[9], 6 * sizeof(*argv));
	}
	return run_as(uid, gid, groups, n, trusted, argv, err, size);
}

/* Start carmyd as uid/gid with extra options, asserting it came up. */
static void start_as(struct carmyd_proc *d, uid_t uid, gid_t gid,
		     const char *const *extra)
{
	fflush(NULL);
	ck_assert_msg(harness_start_as(d, uid, gid, extra) == 0,
		      "carmyd as uid %u did not start", (unsigned)uid);
}

/* Start carmyd (as we are) with extra options; 0 if it came up. Its
 * temporary directory is removed when it did not. */
static int try_start(struct carmyd_proc *d, const char *const *extra)
{
	fflush(NULL);
	if (harness_start(d, extra) == 0)
		return 0;
	rmdir(d->dir);
	return -1;
}

/* --group with our own primary group, which carmyd (as us) can use. */
static const char *const *group_opts(void)
{
	static char name[64];
	static const char *const opts[] = { "--group", name, NULL };
	struct group *gr = getgrgid(getegid());

	ck_assert_ptr_nonnull(gr);
	snprintf(name, sizeof(name), "%s", gr->gr_name);
	return opts;
}

static void read_log(const char *path, char *text, size_t size);

static bool has(const char *text, const char *part)
{
	return strstr(text, part) != NULL;
}

/* ------------------------------------------------------------ planted */

/*
 * The attack: with $XDG_RUNTIME_DIR unset, the victim's socket is
 * /tmp/carmy-$UID/carmyd.sock, and another user made that directory first
 * and runs a carmyd of their own in it, socket and segment open to all.
 * The victim's connect and carmy-run refuse it, and the command never
 * runs (it would have written its marker).
 */
START_TEST(test_carmyd_of_another_user_in_a_planted_directory_is_untrusted)
{
	static char sock[128];
	static const char *const opts[] = { "--socket", sock, NULL };
	char dir[64], want[64], seg[128], marker[128], err[1024], cmd[96];
	struct carmyd_proc d;
	struct outcome o;

	if (!need_users())
		return;
	snprintf(dir, sizeof(dir), "/tmp/carmy-%u", (unsigned)vuid);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
	path_in(sock, sizeof(sock), dir, "carmyd.sock");
	start_as(&d, auid, agid, opts);
	/* What the attacker would do next, as the owner of all three. */
	ck_assert_int_eq(chmod(dir, 0755), 0);
	ck_assert_int_eq(chmod(sock, 0666), 0);
	segment_file(&d, seg, sizeof(seg));
	ck_assert_int_eq(chmod(seg, 0666), 0);

	connect_as(vuid, vgid, NULL, 0, NULL, NULL, &o);
	ck_assert_msg(o.rc == CARMY_EUNTRUSTED, "connect: %s",
		      carmy_errname(o.rc));
	snprintf(want, sizeof(want), "belongs to uid %u", (unsigned)auid);
	ck_assert_msg(has(o.detail, dir) && has(o.detail, want), "%s",
		      o.detail);

	path_in(marker, sizeof(marker), base, "ran");
	ck_assert_int_eq(carmy_run_as(vuid, vgid, NULL, 0, NULL, NULL, marker,
				      err, sizeof(err)), EXIT_UNTRUSTED);
	ck_assert_msg(access(marker, F_OK) != 0, "the command ran");
	ck_assert_msg(has(err, "DAEMON_UNTRUSTED") && has(err, dir) &&
		      has(err, want), "%s", err);

	harness_stop(&d);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/*
 * The peer check alone: the socket's directory is the victim's own (0700),
 * so every directory check passes, but the carmyd listening in it runs as
 * another user. The kernel's credentials of the peer say so.
 */
START_TEST(test_carmyd_of_another_user_in_our_own_directory_is_untrusted)
{
	char want[64], seg[128], marker[128], err[1024];
	struct carmyd_proc d;
	struct outcome o;

	if (!need_users())
		return;
	start_as(&d, auid, agid, NULL);
	ck_assert_int_eq(chown(d.dir, vuid, vgid), 0);
	ck_assert_int_eq(chmod(d.dir, 0700), 0);
	ck_assert_int_eq(chmod(d.socket, 0666), 0);
	segment_file(&d, seg, sizeof(seg));
	ck_assert_int_eq(chmod(seg, 0666), 0);

	connect_as(vuid, vgid, NULL, 0, NULL, d.socket, &o);
	ck_assert_msg(o.rc == CARMY_EUNTRUSTED, "connect: %s",
		      carmy_errname(o.rc));
	snprintf(want, sizeof(want), "runs as uid %u", (unsigned)auid);
	ck_assert_msg(has(o.detail, want), "%s", o.detail);

	path_in(marker, sizeof(marker), base, "ran");
	ck_assert_int_eq(carmy_run_as(vuid, vgid, NULL, 0, NULL, d.socket,
				      marker, err, sizeof(err)),
			 EXIT_UNTRUSTED);
	ck_assert_msg(access(marker, F_OK) != 0, "the command ran");
	ck_assert_msg(has(err, want), "%s", err);
	{
		const char *argv[] = { "tools/carmyctl", "--socket", d.socket,
				       "status", NULL };

		ck_assert_int_eq(run_as(vuid, vgid, NULL, 0, NULL, argv, err,
					sizeof(err)), EXIT_UNTRUSTED);
		ck_assert_msg(has(err, want), "%s", err);
	}
	harness_stop(&d);
}
END_TEST

/*
 * The --group set-up: carmyd runs as user A with --group G, and user B, in
 * G, trusts A by name or uid in $CARMY_TRUSTED_USERS: B connects and works,
 * and carmy-run runs B's command. Without the variable, B refuses A's.
 */
START_TEST(test_carmyd_of_a_trusted_user_serves_its_group)
{
	static char sock[128];
	static const char *const opts[] = { "--socket", sock, "--group",
					    "carmy-test-tg", NULL };
	char top[128], uid[16], marker[128], err[1024];
	struct carmyd_proc d;
	struct outcome o;
	gid_t g;

	if (!need_users())
		return;
	ck_assert_int_eq(harness_group("tg", &g), 0);
	/* A's directory, in which carmyd makes the socket's own. */
	path_in(top, sizeof(top), base, "a");
	ck_assert_int_eq(mkdir(top, 0755), 0);
	ck_assert_int_eq(chown(top, auid, g), 0);
	path_in(sock, sizeof(sock), top, "run/carmyd.sock");
	start_as(&d, auid, g, opts);
	snprintf(uid, sizeof(uid), "%u", (unsigned)auid);

	connect_as(vuid, vgid, &g, 1, "carmy-test-t2", sock, &o);
	ck_assert_msg(o.rc == 0, "connect: %s: %s", carmy_errname(o.rc),
		      o.detail);
	ck_assert(o.replayed);
	connect_as(vuid, vgid, &g, 1, uid, sock, &o);
	ck_assert_msg(o.rc == 0, "connect: %s: %s", carmy_errname(o.rc),
		      o.detail);
	connect_as(vuid, vgid, &g, 1, NULL, sock, &o);
	ck_assert_msg(o.rc == CARMY_EUNTRUSTED, "connect: %s",
		      carmy_errname(o.rc));
	/* Root, an operator (carmyctl), trusting A: served though not in
	 * the group. */
	connect_as(0, 0, NULL, 0, "carmy-test-t2", sock, &o);
	ck_assert_msg(o.rc == 0, "connect as root: %s: %s",
		      carmy_errname(o.rc), o.detail);

	path_in(marker, sizeof(marker), base, "ran");
	ck_assert_int_eq(carmy_run_as(vuid, vgid, &g, 1, "carmy-test-t2", sock,
				      marker, err, sizeof(err)), 0);
	ck_assert_msg(access(marker, F_OK) == 0, "the command did not run: %s",
		      err);
	unlink(marker);
	ck_assert_int_eq(carmy_run_as(vuid, vgid, &g, 1, NULL, sock, marker,
				      err, sizeof(err)), EXIT_UNTRUSTED);
	ck_assert_msg(access(marker, F_OK) != 0, "the command ran");
	harness_stop(&d);
}
END_TEST

/* ------------------------------------------------------------ links */

/* A symbolic link in place of the socket's directory, to a carmyd's own
 * directory or to a shared sticky one: refused by clients and by carmyd,
 * which leaves the shared one as it was. */
START_TEST(test_symlinked_socket_directory_is_refused)
{
	static char sock[160];
	static const char *const opts[] = { "--socket", sock, NULL };
	char link[128], sticky[128], marker[128], err[1024];
	struct carmyd_proc d, other;
	carmy_t *c = NULL;

	e2e_start(&d, NULL);
	/* To a directory we trust: the link is the reason. */
	path_in(link, sizeof(link), base, "link");
	ck_assert_int_eq(symlink(d.dir, link), 0);
	path_in(sock, sizeof(sock), link, "carmyd.sock");
	ck_assert_int_eq(carmy_connect(&c, sock), CARMY_EUNTRUSTED);
	ck_assert_msg(has(carmy_trust_detail(), "symbolic link"), "%s",
		      carmy_trust_detail());
	path_in(marker, sizeof(marker), base, "ran");
	ck_assert_int_eq(carmy_run_as(geteuid(), getegid(), NULL, 0, NULL,
				      sock, marker, err, sizeof(err)),
			 EXIT_UNTRUSTED);
	ck_assert_msg(access(marker, F_OK) != 0, "the command ran");
	ck_assert_msg(has(err, "symbolic link"), "%s", err);
	e2e_stop(&d);
	/* carmyd will not listen through it either. */
	ck_assert_int_eq(mkdir(d.dir, 0700), 0);
	path_in(sock, sizeof(sock), link, "mine.sock");
	ck_assert_int_ne(try_start(&other, opts), 0);

	/* To a shared sticky directory (root's, 1777, as /tmp is). */
	path_in(sticky, sizeof(sticky), base, "sticky");
	ck_assert_int_eq(mkdir(sticky, 0700), 0);
	ck_assert_int_eq(chmod(sticky, 01777), 0);
	ck_assert_int_eq(unlink(link), 0);
	ck_assert_int_eq(symlink(sticky, link), 0);
	path_in(sock, sizeof(sock), link, "carmyd.sock");
	ck_assert_int_eq(carmy_connect(&c, sock), CARMY_EUNTRUSTED);
	ck_assert_int_ne(try_start(&other, opts), 0);
	/* And the sticky directory itself, as the socket's: refused by
	 * both, and never "repaired" into ours. */
	path_in(sock, sizeof(sock), sticky, "carmyd.sock");
	ck_assert_int_eq(carmy_connect(&c, sock), CARMY_EUNTRUSTED);
	ck_assert_int_ne(try_start(&other, opts), 0);
	ck_assert_uint_eq(mode_of(sticky), 01777);
	rmdir(d.dir);
}
END_TEST

/* Another user's directory behind the link: the victim refuses it, and so
 * does a carmyd of the victim's asked to listen there. */
START_TEST(test_symlink_to_another_users_directory_is_refused)
{
	static char sock[160];
	static const char *const opts[] = { "--socket", sock, NULL };
	char link[128], marker[128], err[1024];
	struct carmyd_proc d, mine;
	struct outcome o;

	if (!need_users())
		return;
	start_as(&d, auid, agid, NULL);
	ck_assert_int_eq(chmod(d.dir, 0755), 0);
	ck_assert_int_eq(chmod(d.socket, 0666), 0);
	path_in(link, sizeof(link), base, "link");
	ck_assert_int_eq(symlink(d.dir, link), 0);
	path_in(sock, sizeof(sock), link, "carmyd.sock");
	connect_as(vuid, vgid, NULL, 0, NULL, sock, &o);
	ck_assert_msg(o.rc == CARMY_EUNTRUSTED, "connect: %s",
		      carmy_errname(o.rc));
	ck_assert_msg(has(o.detail, "symbolic link"), "%s", o.detail);
	path_in(marker, sizeof(marker), base, "ran");
	ck_assert_int_eq(carmy_run_as(vuid, vgid, NULL, 0, NULL, sock, marker,
				      err, sizeof(err)), EXIT_UNTRUSTED);
	ck_assert_msg(access(marker, F_OK) != 0, "the command ran");
	harness_stop(&d);
	/* The victim's carmyd, told to listen through the link. */
	ck_assert_int_eq(mkdir(d.dir, 0755), 0);
	ck_assert_int_eq(chown(d.dir, auid, agid), 0);
	path_in(sock, sizeof(sock), link, "victim.sock");
	fflush(NULL);
	ck_assert_int_ne(harness_start_as(&mine, vuid, vgid, opts), 0);
	rmdir(mine.dir);
	rmdir(d.dir);
}
END_TEST

/* ------------------------------------------------------------ modes */

/*
 * Our own socket directory, open to all: carmyd makes it owner-only again
 * and logs it; a client that finds it open (opened after carmyd started)
 * refuses it, and so does a handle connecting again to a restarted carmyd.
 */
START_TEST(test_own_open_socket_directory_is_repaired_by_carmyd_and_refused_by_clients)
{
	static char sock[160], log[160];
	static const char *const opts[] = { "--socket", sock, "--log-file",
					    log, NULL };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("p", "s", "reconnect");
	char dir[128], text[4096], marker[128], err[1024];
	struct carmyd_proc d;
	carmy_t *c = NULL, *x = NULL;
	ssize_t n;
	int fd;

	path_in(dir, sizeof(dir), base, "own");
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	ck_assert_int_eq(chmod(dir, 0777), 0);
	path_in(sock, sizeof(sock), dir, "carmyd.sock");
	path_in(log, sizeof(log), base, "carmyd.log");
	e2e_start(&d, opts);
	ck_assert_uint_eq(mode_of(dir), 0700);
	fd = open(log, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	ck_assert_int_gt(n, 0);
	text[n] = '\0';
	ck_assert_msg(has(text, "had mode 0777") && has(text, "made it 0700"),
		      "%s", text);
	ck_assert_int_eq(carmy_connect(&c, sock), 0);

	ck_assert_int_eq(chmod(dir, 0777), 0);
	ck_assert_int_eq(carmy_connect(&x, sock), CARMY_EUNTRUSTED);
	ck_assert_msg(has(carmy_trust_detail(), dir) &&
		      has(carmy_trust_detail(), "mode 0777"), "%s",
		      carmy_trust_detail());
	path_in(marker, sizeof(marker), base, "ran");
	ck_assert_int_eq(carmy_run_as(geteuid(), getegid(), NULL, 0, NULL,
				      sock, marker, err, sizeof(err)),
			 EXIT_UNTRUSTED);
	ck_assert_msg(access(marker, F_OK) != 0, "the command ran");
	ck_assert_msg(has(err, "mode 0777"), "%s", err);

	/* A restart repairs it again; opened once more, the handle that
	 * was connected finds it so when it connects again. */
	e2e_kill9(&d);
	e2e_restart(&d, opts);
	ck_assert_uint_eq(mode_of(dir), 0700);
	ck_assert_int_eq(chmod(dir, 0777), 0);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_EUNTRUSTED);
	ck_assert_msg(has(carmy_trust_detail(), "mode 0777"), "%s",
		      carmy_trust_detail());
	ck_assert_int_eq(chmod(dir, 0700), 0);
	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	/* Only the last failure is kept: this connection passed. */
	ck_assert_str_eq(carmy_trust_detail(), "");
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "x", 1),
			 0);
	carmy_reservation_clear(&r);
	carmy_close(c);
	e2e_stop(&d);
}
END_TEST

/*
 * A segment that is not the carmyd's: writable by anyone, or another
 * user's. Clients refuse it (fstat on the descriptor they would map), so
 * does carmyctl, with carmyd up or with --segment alone, and so does a
 * carmyd restarted on it.
 */
START_TEST(test_segment_not_the_daemons_is_refused)
{
	char seg[128], err[1024], want[64];
	const char *ctl[] = { "tools/carmyctl", "--socket", NULL, "status",
			      NULL };
	const char *ctl_seg[] = { "tools/carmyctl", "--segment", NULL,
				  "status", NULL };
	struct carmyd_proc d;
	carmy_t *c = NULL;

	if (!need_root("a segment of another uid"))
		return;
	e2e_start(&d, NULL);
	ctl[2] = d.socket;
	ctl_seg[2] = d.segment;
	segment_file(&d, seg, sizeof(seg));

	ck_assert_int_eq(chmod(seg, 0606), 0);
	ck_assert_int_eq(carmy_connect(&c, d.socket), CARMY_EUNTRUSTED);
	ck_assert_msg(has(carmy_trust_detail(), "anyone can write"), "%s",
		      carmy_trust_detail());
	ck_assert_int_eq(run_as(0, 0, NULL, 0, NULL, ctl, err, sizeof(err)),
			 EXIT_UNTRUSTED);
	ck_assert_int_eq(chmod(seg, 0600), 0);

	ck_assert_int_eq(chown(seg, STRANGER, STRANGER), 0);
	ck_assert_int_eq(carmy_connect(&c, d.socket), CARMY_EUNTRUSTED);
	snprintf(want, sizeof(want), "belongs to uid %d", STRANGER);
	ck_assert_msg(has(carmy_trust_detail(), want), "%s",
		      carmy_trust_detail());
	ck_assert_int_eq(run_as(0, 0, NULL, 0, NULL, ctl, err, sizeof(err)),
			 EXIT_UNTRUSTED);
	ck_assert_msg(has(err, want), "%s", err);
	ck_assert_int_eq(run_as(0, 0, NULL, 0, NULL, ctl_seg, err,
				sizeof(err)), EXIT_UNTRUSTED);
	ck_assert_msg(has(err, want), "%s", err);
	ck_assert_int_eq(chown(seg, 0, 0), 0);
	ck_assert_int_eq(carmy_connect(&c, d.socket), 0);
	carmy_close(c);
	ck_assert_int_eq(run_as(0, 0, NULL, 0, NULL, ctl_seg, err,
				sizeof(err)), 0);

	/* carmyd's restart path: the segment stays, and is refused. */
	e2e_kill9(&d);
	ck_assert_int_eq(chmod(seg, 0606), 0);
	fflush(NULL);
	ck_assert_int_ne(harness_restart(&d, NULL), 0);
	ck_assert_int_eq(chmod(seg, 0600), 0);
	ck_assert_int_eq(chown(seg, STRANGER, STRANGER), 0);
	ck_assert_int_ne(harness_restart(&d, NULL), 0);
	ck_assert_int_eq(chown(seg, 0, 0), 0);
	ck_assert_int_eq(mode_of(seg), 0600);
	e2e_restart(&d, NULL);
	c = e2e_connect(&d);
	carmy_close(c);

	/* Narrower than asked (a first run without --group): widened to
	 * 0660; then wider than a carmyd without --group allows: refused. */
	e2e_kill9(&d);
	e2e_restart(&d, group_opts());
	ck_assert_uint_eq(mode_of(seg), 0660);
	e2e_kill9(&d);
	fflush(NULL);
	ck_assert_int_ne(harness_restart(&d, NULL), 0);
	ck_assert_uint_eq(mode_of(seg), 0660);
	ck_assert_int_eq(chmod(seg, 0600), 0);
	e2e_restart(&d, NULL);
	e2e_stop(&d);
}
END_TEST

/* With --group, the directory carmyd repairs is made 0750. */
START_TEST(test_own_open_socket_directory_is_made_0750_with_group)
{
	static char sock[160];
	const char *const *group = group_opts();
	const char *opts[] = { "--socket", sock, group[0], group[1], NULL };
	char dir[128];
	struct carmyd_proc d;
	carmy_t *c = NULL;

	path_in(dir, sizeof(dir), base, "shared");
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	ck_assert_int_eq(chmod(dir, 0777), 0);
	path_in(sock, sizeof(sock), dir, "carmyd.sock");
	e2e_start(&d, opts);
	ck_assert_uint_eq(mode_of(dir), 0750);
	ck_assert_int_eq(carmy_connect(&c, sock), 0);
	carmy_close(c);
	e2e_stop(&d);
}
END_TEST

/*
 * A handle connected through a relative path connects again, after the
 * application changed directory and carmyd restarted, to the carmyd it
 * first found: the path was made absolute at connect.
 */
START_TEST(test_relative_socket_path_survives_a_chdir)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("p", "s", "relative");
	char parent[128], here[512], *name;
	struct carmyd_proc d;
	carmy_t *c = NULL;

	/* Where the harness finds carmyd (it may be "."). */
	ck_assert_ptr_nonnull(getcwd(here, sizeof(here)));
	e2e_start(&d, NULL);
	snprintf(parent, sizeof(parent), "%s", d.dir);
	name = strrchr(parent, '/');
	ck_assert_ptr_nonnull(name);
	*name++ = '\0';
	ck_assert_int_eq(chdir(parent), 0);
	{
		char rel[160];

		path_in(rel, sizeof(rel), name, "carmyd.sock");
		ck_assert_int_eq(carmy_connect(&c, rel), 0);
	}
	ck_assert_int_eq(chdir(here), 0);
	e2e_kill9(&d);
	e2e_restart(&d, NULL);
	ck_assert_int_eq(chdir(base), 0);
	ck_assert_msg(carmy_begin(c, &call, &r) == CARMY_RESERVED, "%s",
		      carmy_trust_detail());
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "x", 1),
			 0);
	carmy_reservation_clear(&r);
	carmy_close(c);
	ck_assert_int_eq(chdir(here), 0);
	e2e_stop(&d);
}
END_TEST

/* ------------------------------------------------------------ segments */

/* Stop d cleanly (SIGTERM), keeping its directory for a restart. */
static void stop_cleanly(struct carmyd_proc *d)
{
	int st;

	ck_assert_int_eq(kill(d->pid, SIGTERM), 0);
	st = harness_waitpid(d->pid, WAIT_MS);
	ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "carmyd did not stop cleanly");
	d->pid = 0;
}

/*
 * Handles connected to a carmyd whose segment is then replaced by a new
 * one under the same name: how depends on how (stop cleanly with
 * --transient, which removes it; or kill -9 and rm /dev/shm/NAME, as
 * carmyd's advice for a segment it refuses says). The old handles are
 * done: none reserves an identity (the new carmyd would never know), their
 * running reservation is uncertain, a wait ends at once; a new handle
 * reserves the identity once.
 */
/* carmyctl --socket sock wait ID, in the background, its standard error
 * into the file err. Its pid. */
static pid_t ctl_wait(const char *sock, const char *id, const char *err)
{
	char prog[512];
	pid_t pid;

	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int null = open("/dev/null", O_WRONLY);

		if (fd < 0 || null < 0)
			_exit(126);
		dup2(null, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		execl(harness_path("tools/carmyctl", prog, sizeof(prog)),
		      "carmyctl", "--socket", sock, "wait", id, "--timeout",
		      "60", (char *)NULL);
		_exit(127);
	}
	return pid;
}

static void check_replaced_segment(bool kill9)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT,
				 held = CARMY_RESERVATION_INIT;
	struct carmy_call x = E2E_CALL("p", "s", "after"),
			  h = E2E_CALL("p", "s", "held");
	static char log[160];
	static const char *const opts[] = { "--log-level", "debug",
					    "--log-file", log, NULL };
	char seg[128], err[160], text[8192];
	struct carmyd_proc d;
	carmy_t *old, *waiter, *fresh;
	pid_t ctl;
	int st;

	path_in(log, sizeof(log), base, "carmyd.log");
	path_in(err, sizeof(err), base, "wait.err");
	e2e_start(&d, opts);
	old = e2e_connect(&d);
	waiter = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(old, &h, &held), CARMY_RESERVED);
	/* carmyctl waits for it, until carmyd goes away. */
	ctl = ctl_wait(d.socket, held.execution_id, err);
	for (uint64_t t0 = harness_now_ns();;) {
		read_log(log, text, sizeof(text));
		if (has(text, "a wait of up to 60000 ms begins"))
			break;
		ck_assert_msg(e2e_ms_since(t0) < WAIT_MS, "the wait never "
			      "began: %s", text);
		poll(NULL, 0, 20);
	}
	if (kill9) {
		e2e_kill9(&d);
		segment_file(&d, seg, sizeof(seg));
		ck_assert_int_eq(unlink(seg), 0);
	} else {
		stop_cleanly(&d);
	}
	e2e_restart(&d, opts);
	fresh = e2e_connect(&d);
	/* The new segment does not know the execution: uncertain, never
	 * "released". */
	st = harness_waitpid(ctl, WAIT_MS);
	ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 1,
		      "carmyctl wait: status %d", st);
	read_log(err, text, sizeof(text));
	ck_assert_msg(has(text, "EXECUTION_UNCERTAIN") &&
		      has(text, "new segment"), "%s", text);

	for (int i = 0; i < 2; i++) {
		int rc = carmy_begin(old, &x, &r);

		ck_assert_msg(rc == CARMY_EDISCONNECTED, "old handle: %s",
			      carmy_errname(rc));
	}
	ck_assert_int_eq(carmy_begin(fresh, &x, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(fresh, &r, CARMY_STATUS_COMPLETED,
					"y", 1), 0);
	ck_assert_int_eq(carmy_begin(fresh, &x, &r), CARMY_REPLAY);
	ck_assert_int_ne(carmy_begin(old, &x, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(old, &held, CARMY_STATUS_COMPLETED,
					"z", 1), CARMY_EDISCONNECTED);
	{
		uint64_t t0 = harness_now_ns();
		int rc = carmy_wait(waiter, &h, &r, WAIT_MS);

		ck_assert_msg(rc == CARMY_EDISCONNECTED, "wait: %s",
			      carmy_errname(rc));
		ck_assert_msg(e2e_ms_since(t0) < WAIT_MS / 2,
			      "the wait went on for a segment nobody serves");
	}
	/* The identity held in the old segment is free in the new one. */
	ck_assert_int_eq(carmy_begin(fresh, &h, &r), CARMY_RESERVED);
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&held);
	carmy_close(old);
	carmy_close(waiter);
	carmy_close(fresh);
	e2e_stop(&d);
}

START_TEST(test_handle_on_a_removed_transient_segment_never_reserves)
{
	check_replaced_segment(false);
}
END_TEST

START_TEST(test_handle_on_a_segment_removed_by_hand_never_reserves)
{
	check_replaced_segment(true);
}
END_TEST

/*
 * carmyd stops and another user's carmyd, one this process trusts too,
 * starts at the same path (its directory handed over): a handle of the
 * first one's does not take it for the one whose segment it has mapped,
 * whether it connects again or carmy_wait dials.
 */
START_TEST(test_carmyd_restarted_as_another_user_is_untrusted)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT,
				 held = CARMY_RESERVATION_INIT;
	struct carmy_call h = E2E_CALL("p", "s", "held"),
			  x = E2E_CALL("p", "s", "other");
	char lock[200], want[64];
	struct carmyd_proc d;
	carmy_t *c, *w;
	int rc;

	if (!need_users())
		return;
	ck_assert_int_eq(setenv("CARMY_TRUSTED_USERS",
				"carmy-test-t1,carmy-test-t2", 1), 0);
	start_as(&d, vuid, vgid, NULL);
	c = e2e_connect(&d);
	w = e2e_connect(&d);
	ck_assert_int_eq(carmy_begin(c, &h, &held), CARMY_RESERVED);
	stop_cleanly(&d);
	/* The path is the other user's now. */
	snprintf(lock, sizeof(lock), "%s.lock", d.socket);
	unlink(lock);
	ck_assert_int_eq(chown(d.dir, auid, agid), 0);
	d.uid = auid;
	d.gid = agid;
	fflush(NULL);
	ck_assert_int_eq(harness_restart(&d, NULL), 0);
	snprintf(want, sizeof(want), "uid %u", (unsigned)auid);

	/* The wait dials the new carmyd. */
	rc = carmy_wait(w, &h, &r, WAIT_MS);
	ck_assert_msg(rc == CARMY_EUNTRUSTED, "wait: %s", carmy_errname(rc));
	ck_assert_msg(has(carmy_trust_detail(), want), "%s",
		      carmy_trust_detail());
	/* Completing finds the connection gone, and connects again. */
	rc = carmy_complete(c, &held, CARMY_STATUS_COMPLETED, "z", 1);
	ck_assert_int_ne(rc, 0);
	rc = carmy_begin(c, &x, &r);
	ck_assert_msg(rc == CARMY_EUNTRUSTED, "begin: %s", carmy_errname(rc));
	ck_assert_msg(has(carmy_trust_detail(), want), "%s",
		      carmy_trust_detail());
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&held);
	carmy_close(c);
	carmy_close(w);
	harness_stop(&d);
}
END_TEST

/* ------------------------------------------------------------ groups */

/* Root's carmyd with --group carmy-test-fg, and carmy-test-f1, a member:
 * 0 with their ids, or -1 (skipped, with a note). */
static int need_member(uid_t *uid, gid_t *gid, gid_t *g)
{
	if (!need_root("a member of --group's group") ||
	    harness_user("f1", uid, gid) != 0 || harness_group("fg", g) != 0) {
		e2e_note("skipped: could not create carmy-test-f1 and "
			 "carmy-test-fg");
		return -1;
	}
	return 0;
}

/* The text of the log file at path. */
static void read_log(const char *path, char *text, size_t size)
{
	ssize_t n;
	int fd = open(path, O_RDONLY);

	ck_assert_int_ge(fd, 0);
	n = read(fd, text, size - 1);
	close(fd);
	ck_assert_int_ge(n, 0);
	text[n] = '\0';
}

/*
 * A member of the group connects from a thread with a 128 KiB stack (musl's
 * default): the segment is root's, so the client looks up its own groups,
 * which must not take more stack than such a thread has.
 */
START_TEST(test_group_member_connects_from_a_thread_with_a_small_stack)
{
	static const char *const opts[] = { "--group", "carmy-test-fg", NULL };
	struct carmyd_proc d;
	struct outcome o;
	uid_t uid;
	gid_t gid, g;

	if (need_member(&uid, &gid, &g) != 0)
		return;
	e2e_start(&d, opts);
	client_stack = 128 * 1024;
	connect_as(uid, gid, &g, 1, NULL, d.socket, &o);
	client_stack = 0;
	ck_assert_msg(o.rc == 0, "connect: %s: %s", carmy_errname(o.rc),
		      o.detail);
	ck_assert(o.replayed);
	e2e_stop(&d);
}
END_TEST

/*
 * carmyd --group on a socket directory that exists already, owner-only
 * (a run without --group made it; the harness makes its own 0700), or
 * open to all and root's group: carmyd gives it to the group, 0750, says
 * so, and a member connects.
 */
START_TEST(test_existing_socket_directory_is_opened_to_the_group)
{
	static char log[160];
	static const char *const opts[] = { "--group", "carmy-test-fg",
					    "--log-file", log, NULL };
	char text[4096], want[64];
	struct carmyd_proc d;
	struct outcome o;
	struct stat st;
	uid_t uid;
	gid_t gid, g;

	if (need_member(&uid, &gid, &g) != 0)
		return;
	path_in(log, sizeof(log), base, "carmyd.log");
	e2e_start(&d, opts);
	ck_assert_int_eq(stat(d.dir, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0750);
	ck_assert_uint_eq(st.st_gid, g);
	read_log(log, text, sizeof(text));
	ck_assert_msg(has(text, "had mode 0700") &&
		      has(text, "kept the group's members out"), "%s", text);
	connect_as(uid, gid, &g, 1, NULL, d.socket, &o);
	ck_assert_msg(o.rc == 0, "connect: %s: %s", carmy_errname(o.rc),
		      o.detail);
	ck_assert(o.replayed);

	/* Open to all, root's group: made 0750 and the group's. */
	e2e_kill9(&d);
	ck_assert_int_eq(chown(d.dir, 0, 0), 0);
	ck_assert_int_eq(chmod(d.dir, 0777), 0);
	e2e_restart(&d, opts);
	ck_assert_int_eq(stat(d.dir, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0750);
	ck_assert_uint_eq(st.st_gid, g);
	read_log(log, text, sizeof(text));
	snprintf(want, sizeof(want), "had mode 0777");
	ck_assert_msg(has(text, want), "%s", text);
	connect_as(uid, gid, &g, 1, NULL, d.socket, &o);
	ck_assert_msg(o.rc == 0, "connect: %s: %s", carmy_errname(o.rc),
		      o.detail);
	e2e_stop(&d);
}
END_TEST

/*
 * A directory that holds more than carmyd's socket (a working directory,
 * a home, a team's 2775 directory) is not carmyd's to repair: open to the
 * group, or closed to --group's group, carmyd refuses it, says what to do,
 * and leaves it exactly as it was. Not open, it is used as it is.
 */
/* --log-file: never through a symbolic link (another user's file behind
 * it gets nothing), never a file of another user's; carmyd's own is
 * appended to. */
START_TEST(test_a_log_file_not_carmyds_own_is_refused)
{
	static char log[160];
	static const char *const opts[] = { "--log-file", log, "--log-level",
					    "info", NULL };
	char theirs[128];
	struct carmyd_proc d;
	struct stat st;

	path_in(theirs, sizeof(theirs), base, "theirs.log");
	ck_assert_int_eq(close(open(theirs, O_WRONLY | O_CREAT, 0666)), 0);
	path_in(log, sizeof(log), base, "carmyd.log");
	ck_assert_int_eq(symlink(theirs, log), 0);
	ck_assert_int_ne(try_start(&d, opts), 0);
	ck_assert_int_eq(stat(theirs, &st), 0);
	ck_assert_int_eq(st.st_size, 0);
	ck_assert_int_eq(unlink(log), 0);
	if (need_root("a log file of another uid")) {
		ck_assert_int_eq(close(open(log, O_WRONLY | O_CREAT, 0666)),
				 0);
		ck_assert_int_eq(chown(log, STRANGER, (gid_t)-1), 0);
		ck_assert_int_ne(try_start(&d, opts), 0);
		ck_assert_int_eq(stat(log, &st), 0);
		ck_assert_int_eq(st.st_size, 0);
		ck_assert_int_eq(unlink(log), 0);
	}
	e2e_start(&d, opts);
	e2e_stop(&d);
	ck_assert_int_eq(stat(log, &st), 0);
	ck_assert_int_gt(st.st_size, 0);
}
END_TEST

START_TEST(test_shared_directory_is_refused_and_left_as_it_was)
{
	static char sock[160], log[160];
	static const char *const opts[] = { "--socket", sock, "--log-file",
					    log, NULL };
	const char *const *group = group_opts();
	const char *gopts[] = { "--socket", sock, "--log-file", log,
				group[0], group[1], NULL };
	char dir[128], other[160], text[4096];
	struct carmyd_proc d;
	struct stat st;
	carmy_t *c = NULL;

	path_in(dir, sizeof(dir), base, "work");
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	ck_assert_int_eq(chmod(dir, 02775), 0);
	path_in(other, sizeof(other), dir, "notes.txt");
	ck_assert_int_eq(close(open(other, O_WRONLY | O_CREAT, 0644)), 0);
	path_in(sock, sizeof(sock), dir, "carmyd.sock");
	path_in(log, sizeof(log), base, "carmyd.log");

	ck_assert_int_ne(try_start(&d, opts), 0);
	ck_assert_uint_eq(mode_of(dir), 02775);
	ck_assert_int_eq(access(other, F_OK), 0);
	read_log(log, text, sizeof(text));
	ck_assert_msg(has(text, "refusing") && has(text, dir) &&
		      has(text, "chmod go-w") &&
		      has(text, "a directory of its own"), "%s", text);
	ck_assert_int_ne(try_start(&d, gopts), 0);
	ck_assert_uint_eq(mode_of(dir), 02775);

	/* Closed to --group's group: refused too, and left 0700. */
	ck_assert_int_eq(chmod(dir, 0700), 0);
	ck_assert_int_eq(chown(dir, (uid_t)-1, STRANGER), 0);
	ck_assert_int_ne(try_start(&d, gopts), 0);
	ck_assert_int_eq(stat(dir, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0700);
	ck_assert_uint_eq(st.st_gid, STRANGER);
	read_log(log, text, sizeof(text));
	ck_assert_msg(has(text, "keep the members") &&
		      has(text, "chmod 0750"), "%s", text);

	/* Closed to others, without --group: carmyd's to use as it is. */
	ck_assert_int_eq(chown(dir, (uid_t)-1, getegid()), 0);
	ck_assert_int_eq(chmod(dir, 0755), 0);
	e2e_start(&d, opts);
	ck_assert_uint_eq(mode_of(dir), 0755);
	ck_assert_int_eq(carmy_connect(&c, sock), 0);
	carmy_close(c);
	e2e_stop(&d);
	ck_assert_int_eq(access(other, F_OK), 0);
}
END_TEST

static Suite *trust_suite(void)
{
	Suite *s = suite_create("trust");
	TCase *tc = tcase_create("trust");

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_carmyd_of_another_user_in_a_planted_directory_is_untrusted);
	tcase_add_test(tc, test_carmyd_of_another_user_in_our_own_directory_is_untrusted);
	tcase_add_test(tc, test_carmyd_of_a_trusted_user_serves_its_group);
	tcase_add_test(tc, test_symlinked_socket_directory_is_refused);
	tcase_add_test(tc, test_symlink_to_another_users_directory_is_refused);
	tcase_add_test(tc, test_own_open_socket_directory_is_repaired_by_carmyd_and_refused_by_clients);
	tcase_add_test(tc, test_own_open_socket_directory_is_made_0750_with_group);
	tcase_add_test(tc, test_segment_not_the_daemons_is_refused);
	tcase_add_test(tc, test_relative_socket_path_survives_a_chdir);
	tcase_add_test(tc, test_handle_on_a_removed_transient_segment_never_reserves);
	tcase_add_test(tc, test_handle_on_a_segment_removed_by_hand_never_reserves);
	tcase_add_test(tc, test_carmyd_restarted_as_another_user_is_untrusted);
	tcase_add_test(tc, test_group_member_connects_from_a_thread_with_a_small_stack);
	tcase_add_test(tc, test_existing_socket_directory_is_opened_to_the_group);
	tcase_add_test(tc, test_shared_directory_is_refused_and_left_as_it_was);
	tcase_add_test(tc, test_a_log_file_not_carmyds_own_is_refused);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(trust_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
