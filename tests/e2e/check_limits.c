/*
 * check_limits.c - what carmyd does when connections crowd it, and who may
 * change entries that are not theirs.
 *
 * Connections: silent ones (never a HELLO) filling carmyd up to its
 * descriptor limit leave room for a real client, answered within a second;
 * carmyd does not spin when accept() fails for want of a descriptor, logs
 * an episode once, and closes the silent ones after its HELLO timeout;
 * --max-clients refuses one more with TOO_MANY_CLIENTS and serves again once
 * one has gone.
 *
 * Operators: with --group, a member may use carmyd but not resolve or purge
 * (NOT_PERMITTED, logged with its uid); --admin-group lets its members;
 * carmyd's own user and root always may. The cross-user cases need root to
 * create throwaway users, and skip with a TAP note otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "tests/e2e/e2e.h"

#define SILENT_MAX 400
/* carmyd's HELLO timeout (CARMYD_HELLO_TIMEOUT_S), and the slack a busy
 * machine gets on top of it. */
#define HELLO_TIMEOUT_MS 5000
#define SLACK_MS 5000
/* The bound on an answer at the limit (asserted by make check-timing). */
#define ANSWER_MS 1000
/* A small segment: zeroing a large one's pages at start costs CPU. */
#define SMALL "--capacity", "64", "--max-result", "1K"

static struct carmyd_proc d;
static char logpath[128];
static int silent[SILENT_MAX];
static int nsilent;

static void setup(void)
{
	snprintf(logpath, sizeof(logpath), "/tmp/carmy-limits.%d.log",
		 (int)getpid());
	unlink(logpath);
	nsilent = 0;
}

static void teardown(void)
{
	for (int i = 0; i < nsilent; i++)
		close(silent[i]);
	nsilent = 0;
	unsetenv("CARMY_TEST_NOFILE");
	unlink(logpath);
}

/* ------------------------------------------------------------ helpers */

/* Connect and say nothing. */
static int dial_silent(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	strcpy(sa.sun_path, d.socket);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void open_silent(int n)
{
	ck_assert_int_le(nsilent + n, SILENT_MAX);
	for (int i = 0; i < n; i++)
		silent[nsilent++] = dial_silent();
}

/* Lines of the log that contain what. */
static int log_lines(const char *what)
{
	FILE *f = fopen(logpath, "r");
	char line[2048];
	int n = 0;

	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f) != NULL)
		n += strstr(line, what) != NULL;
	fclose(f);
	return n;
}

static bool wait_log(const char *what, int timeout_ms)
{
	uint64_t deadline = harness_now_ns() + (uint64_t)timeout_ms * 1000000u;

	while (log_lines(what) == 0) {
		if (harness_now_ns() > deadline)
			return false;
		usleep(20000);
	}
	return true;
}

/* Wait until every silent connection reads EOF (after whatever carmyd
 * said first). Returns how many did within timeout_ms. */
static int wait_silent_closed(int timeout_ms)
{
	uint64_t deadline = harness_now_ns() + (uint64_t)timeout_ms * 1000000u;
	bool done[SILENT_MAX] = { false };
	int closed = 0;

	while (closed < nsilent && harness_now_ns() < deadline) {
		for (int i = 0; i < nsilent; i++) {
			struct pollfd p = { .fd = silent[i], .events = POLLIN };
			char buf[256];
			ssize_t got;

			if (done[i] || poll(&p, 1, 0) != 1)
				continue;
			got = recv(silent[i], buf, sizeof(buf), MSG_DONTWAIT);
			if (got <= 0 && !(got < 0 && errno == EAGAIN)) {
				done[i] = true;
				closed++;
			}
		}
		usleep(10000);
	}
	return closed;
}

static int count_fds(pid_t pid)
{
	char path[64];
	struct dirent *e;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	ck_assert_ptr_nonnull(dir);
	while ((e = readdir(dir)) != NULL)
		n += e->d_name[0] != '.';
	closedir(dir);
	return n;
}

/* Connect and begin a new call, as an agent would. Returns the first
 * failure or CARMY_RESERVED, with the time it took in *ms; *out is the
 * handle if it connected. */
static int try_client(carmy_t **out, const char *rid, double *ms)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("agent", "s", rid);
	uint64_t t0 = harness_now_ns();
	int rc = carmy_connect(out, d.socket);

	if (rc == 0)
		rc = carmy_begin(*out, &call, &r);
	*ms = e2e_ms_since(t0);
	if (rc == CARMY_RESERVED)
		ck_assert_int_eq(carmy_complete(*out, &r, CARMY_STATUS_COMPLETED,
						"ok", 2), 0);
	carmy_reservation_clear(&r);
	return rc;
}

/* CPU carmyd used over ms of wall time, in percent. */
static double cpu_percent_over(int ms)
{
	long hz = sysconf(_SC_CLK_TCK);
	unsigned long long t0 = e2e_cpu_ticks(d.pid);
	uint64_t w0 = harness_now_ns();

	usleep((useconds_t)ms * 1000);
	return 100.0 * (double)(e2e_cpu_ticks(d.pid) - t0) / (double)hz /
	       ((double)(harness_now_ns() - w0) / 1e9);
}

/* Lines in the log. */
static int log_count(void)
{
	FILE *f = fopen(logpath, "r");
	int n = 0, ch;

	if (f == NULL)
		return 0;
	while ((ch = fgetc(f)) != EOF)
		n += ch == '\n';
	fclose(f);
	return n;
}

/*
 * Make system call nr fail with err in this process and those it starts
 * (carmyd): how a test makes the kernel refuse what it refuses only under
 * pressure (accept() for want of memory, an LSM's veto). A seccomp filter,
 * inherited across fork and exec, so the test's process must be its own:
 * false (and a TAP note) when Check does not fork.
 */
static bool fail_syscall(int nr, int err)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
		BPF_STMT(BPF_RET | BPF_K,
			 SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]),
				   .filter = f };
	const char *fork_mode = getenv("CK_FORK");

	if (fork_mode != NULL && strcmp(fork_mode, "no") == 0) {
		e2e_note("SKIP: a seccomp filter needs CK_FORK=yes");
		return false;
	}
	ck_assert_int_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
	ck_assert_int_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog),
			 0);
	return true;
}

/* ------------------------------------------------------------ connections */

/* Silent connections past the cap shed the oldest silent one: a real
 * client, which says HELLO at once, is served. */
START_TEST(test_silent_connections_at_the_limit_leave_room_for_a_client)
{
	/* Two loops: one sheds what the other serves. */
	const char *const opts[] = { "--threads", "2", "--log-file", logpath,
				     SMALL, NULL };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call again = E2E_CALL("agent", "s", "after");
	carmy_t *c = NULL;
	double ms, cpu;
	int rc, closed;

	/* 128 descriptors leave carmyd room for 128 - 49 connections. */
	setenv("CARMY_TEST_NOFILE", "128", 1);
	e2e_start(&d, opts);
	open_silent(300);
	rc = try_client(&c, "first", &ms);
	e2e_note("answered in %.1f ms: %s", ms, carmy_errname(rc));
	ck_assert_msg(rc == CARMY_RESERVED, "at the limit: %s",
		      carmy_errname(rc));
	e2e_within(ms, ANSWER_MS, "answer at the limit");
	cpu = cpu_percent_over(2000);
	e2e_note("carmyd used %.1f%% of a CPU with 300 silent connections",
		 cpu);
	ck_assert_msg(cpu < 30.0, "carmyd spins: %.1f%% CPU", cpu);
	/* The silent ones are closed after the HELLO timeout, all of them;
	 * the client that said HELLO is not. */
	closed = wait_silent_closed(HELLO_TIMEOUT_MS + SLACK_MS);
	ck_assert_int_eq(closed, nsilent);
	ck_assert_int_eq(carmy_begin(c, &again, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "x", 1),
			 0);
	carmy_reservation_clear(&r);
	/* One line for the episode as it began, one as it ended, with the
	 * counts; nothing for each connection. */
	ck_assert_msg(wait_log("back to normal", 2 * HELLO_TIMEOUT_MS + SLACK_MS),
		      "the episode's end was not logged");
	ck_assert_int_eq(log_lines("connections:"), 2);
	ck_assert_int_eq(log_lines("shed before their HELLO"), 1);
	carmy_close(c);
	e2e_stop(&d);
}
END_TEST

/* Out of descriptors below the cap (the limit lowered under carmyd): it
 * answers a client within a second, without spinning on accept(). */
START_TEST(test_running_out_of_descriptors_answers_without_spinning)
{
	const char *const opts[] = { "--threads", "1", "--log-file", logpath,
				     SMALL, NULL };
	struct rlimit rl;
	carmy_t *c = NULL;
	double ms, cpu;
	int rc, fds;

	setenv("CARMY_TEST_NOFILE", "512", 1);
	e2e_start(&d, opts);
	open_silent(20);
	/* Every descriptor it may have is taken, but for its spare: once
	 * carmyd has accepted the 20 (as many descriptors, and its own). */
	for (uint64_t t0 = harness_now_ns();; usleep(10000)) {
		fds = count_fds(d.pid);
		if (fds >= 20 + 10)
			break;
		ck_assert_msg(e2e_ms_since(t0) < HARNESS_WAIT_MS, "carmyd holds "
			      "%d descriptors, not 20 connections", fds);
	}
	rl.rlim_cur = rl.rlim_max = (rlim_t)fds;
	ck_assert_int_eq(prlimit(d.pid, RLIMIT_NOFILE, &rl, NULL), 0);
	open_silent(150);
	usleep(200000);
	cpu = cpu_percent_over(2000);
	e2e_note("carmyd used %.1f%% of a CPU out of descriptors", cpu);
	ck_assert_msg(cpu < 30.0, "carmyd spins: %.1f%% CPU", cpu);
	rc = try_client(&c, "first", &ms);
	e2e_note("answered in %.1f ms: %s", ms, carmy_errname(rc));
	ck_assert_msg(rc == CARMY_RESERVED || rc == CARMY_ETOO_MANY_CLIENTS,
		      "out of descriptors: %s", carmy_errname(rc));
	e2e_within(ms, ANSWER_MS, "answer at the limit");
	carmy_close(c);
	ck_assert_int_eq(log_lines("connections:"), 1);
	ck_assert_int_eq(log_lines("Too many open files"), 1);
	ck_assert_int_eq(wait_silent_closed(HELLO_TIMEOUT_MS + SLACK_MS),
			 nsilent);
	e2e_stop(&d);
}
END_TEST

/* A flood of connections that each send a bad first byte and close: the
 * log says so once for the episode, not once a connection, and a real
 * client is served meanwhile. */
START_TEST(test_a_flood_of_bad_first_messages_is_logged_once)
{
	const char *const opts[] = { "--threads", "2", "--log-file", logpath,
				     SMALL, NULL };
	const uint8_t bad = 0xc1;	/* never used in msgpack */
	carmy_t *c = NULL;
	int before, rc;
	double ms;

	e2e_start(&d, opts);
	before = log_count();
	for (int i = 0; i < 2000; i++) {
		int fd = dial_silent();

		ck_assert_int_eq(send(fd, &bad, 1, MSG_NOSIGNAL), 1);
		close(fd);
	}
	rc = try_client(&c, "after", &ms);
	ck_assert_msg(rc == CARMY_RESERVED, "after the flood: %s",
		      carmy_errname(rc));
	/* carmyd has read the flood by now (its listen backlog is FIFO);
	 * its first line may wait for the tick. */
	ck_assert_msg(wait_log("malformed", HARNESS_WAIT_MS),
		      "the flood was not logged");
	e2e_note("%d log lines for 2000 bad connections", log_count() - before);
	ck_assert_int_le(log_count() - before, 2);
	ck_assert_int_eq(log_lines("malformed"), 1);
	carmy_close(c);
	/* The episode's end counts them all. */
	ck_assert_msg(wait_log("back to normal", 2 * HELLO_TIMEOUT_MS + SLACK_MS),
		      "the episode's end was not logged");
	ck_assert_int_eq(log_lines("2000 closed after an error"), 1);
	ck_assert_int_le(log_count() - before, 3);
	e2e_stop(&d);
}
END_TEST

/* accept() failing for good with connections waiting: for a reason a
 * spare descriptor cannot help (no memory, an LSM's veto), or for want of
 * a descriptor even once the spare is given up (another thread took it):
 * carmyd neither spins nor logs each attempt. */
static const int accept_errors[] = { ENOMEM, EACCES, EMFILE };

START_TEST(test_accept_failing_for_good_neither_spins_nor_floods_the_log)
{
	const char *const opts[] = { "--threads", "1", "--log-file", logpath,
				     SMALL, NULL };
	int err = accept_errors[_i];
	double cpu;

	if (!fail_syscall(SYS_accept4, err) || !fail_syscall(SYS_accept, err))
		return;
	e2e_start(&d, opts);
	open_silent(3);
	ck_assert_msg(wait_log("accept:", HARNESS_WAIT_MS),
		      "the failure was not logged");
	cpu = cpu_percent_over(3000);
	e2e_note("carmyd used %.1f%% of a CPU with accept() failing (%s)",
		 cpu, strerror(err));
	ck_assert_msg(cpu < 30.0, "carmyd spins: %.1f%% CPU", cpu);
	ck_assert_int_eq(log_lines("accept:"), 1);
	ck_assert_int_eq(log_lines(strerror(err)), 1);
	e2e_stop(&d);
}
END_TEST

/* Shed connections that their loop cannot close yet (shutdown() fails
 * here; a loop busy elsewhere is the same) hold descriptors: carmyd stops
 * accepting until they are closed, without spinning meanwhile. */
START_TEST(test_shed_connections_not_yet_closed_pause_accepting_without_spinning)
{
	const char *const opts[] = { "--threads", "2", "--max-clients", "20",
				     "--log-file", logpath, SMALL, NULL };
	carmy_t *c = NULL;
	double cpu, ms;
	int rc;

	if (!fail_syscall(SYS_shutdown, EPERM))
		return;
	e2e_start(&d, opts);
	/* 20 served, 16 shed for the next 16 (told TOO_MANY_CLIENTS, not
	 * closed), and 8 more waiting to be accepted. */
	open_silent(20 + 16 + 8);
	ck_assert_msg(wait_log("connections:", HARNESS_WAIT_MS),
		      "nothing was shed");
	cpu = cpu_percent_over(2000);
	e2e_note("carmyd used %.1f%% of a CPU with 16 shed connections open",
		 cpu);
	ck_assert_msg(cpu < 30.0, "carmyd spins: %.1f%% CPU", cpu);
	/* Once their clients close them, carmyd takes those waiting (each
	 * shedding one more) and then a real client. */
	for (int i = 0; i < 16; i++)
		close(silent[i]);
	memmove(silent, silent + 16, (size_t)(nsilent - 16) * sizeof(silent[0]));
	nsilent -= 16;
	rc = try_client(&c, "after", &ms);
	e2e_note("answered in %.1f ms: %s", ms, carmy_errname(rc));
	ck_assert_msg(rc == CARMY_RESERVED, "after the shed ones closed: %s",
		      carmy_errname(rc));
	carmy_close(c);
	e2e_stop(&d);
}
END_TEST

/* carmyctl with args against d, as uid/gid/groups when uid is not -1
 * (e2e_carmyctl()). */
static int carmyctl(uid_t uid, gid_t gid, const gid_t *groups, size_t n,
		    char *err, size_t errsz, const char *const *args)
{
	return e2e_carmyctl(&d, uid, gid, groups, n, err, errsz, args);
}

/* --max-clients 4: a fifth is refused at once, with a reason carmyctl
 * shows; once one leaves, the next is served. */
START_TEST(test_max_clients_refuses_one_more_until_one_leaves)
{
	const char *const opts[] = { "--max-clients", "4", SMALL, NULL };
	const char *const purge[] = { "purge", "--older-than", "1d", NULL };
	carmy_t *c[4], *fifth = NULL;
	uint64_t deadline;
	char err[1024];
	double ms;
	int rc;

	e2e_start(&d, opts);
	for (int i = 0; i < 4; i++)
		c[i] = e2e_connect(&d);
	rc = try_client(&fifth, "fifth", &ms);
	ck_assert_msg(rc == CARMY_ETOO_MANY_CLIENTS, "a fifth: %s",
		      carmy_errname(rc));
	e2e_within(ms, ANSWER_MS, "refusal over the limit");
	ck_assert_ptr_null(fifth);
	ck_assert_int_eq(carmyctl((uid_t)-1, 0, NULL, 0, err, sizeof(err),
				  purge), 69);
	ck_assert_msg(strstr(err, "TOO_MANY_CLIENTS") != NULL &&
		      strstr(err, "--max-clients") != NULL, "carmyctl: %s",
		      err);
	/* Those connected are served all along. */
	{
		struct carmy_reservation r = CARMY_RESERVATION_INIT;
		struct carmy_call call = E2E_CALL("agent", "s", "in");

		ck_assert_int_eq(carmy_begin(c[0], &call, &r), CARMY_RESERVED);
		ck_assert_int_eq(carmy_complete(c[0], &r, CARMY_STATUS_COMPLETED,
						"x", 1), 0);
		carmy_reservation_clear(&r);
	}
	carmy_close(c[3]);
	/* carmyd sees the close when its loop gets to it. */
	deadline = harness_now_ns() + 5000000000ull;
	do {
		rc = try_client(&fifth, "fifth", &ms);
		if (rc != CARMY_ETOO_MANY_CLIENTS)
			break;
		usleep(20000);
	} while (harness_now_ns() < deadline);
	ck_assert_msg(rc == CARMY_RESERVED, "after one left: %s",
		      carmy_errname(rc));
	carmy_close(fifth);
	for (int i = 0; i < 3; i++)
		carmy_close(c[i]);
	e2e_stop(&d);
}
END_TEST

/* More than the descriptor limit allows is a usage error that says so. */
START_TEST(test_max_clients_beyond_the_descriptor_limit_is_a_usage_error)
{
	char prog[512], out[1024];
	int p[2], st;
	ssize_t n, have = 0;
	pid_t pid;

	ck_assert_int_eq(pipe(p), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct rlimit rl = { 128, 128 };

		dup2(p[1], STDERR_FILENO);
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			_exit(125);
		execl(harness_path("daemon/carmyd", prog, sizeof(prog)),
		      "carmyd", "--foreground", "--socket",
		      "/tmp/carmy-limits-never.sock", "--max-clients", "1000",
		      (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	st = harness_waitpid(pid, HARNESS_WAIT_MS);
	if (st == -1) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		ck_abort_msg("carmyd started with --max-clients beyond its limit");
	}
	while ((n = read(p[0], out + have, sizeof(out) - 1 - (size_t)have)) > 0)
		have += n;
	out[have] = '\0';
	close(p[0]);
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 64);
	ck_assert_msg(strstr(out, "--max-clients 1000") != NULL &&
		      strstr(out, "RLIMIT_NOFILE 128") != NULL, "said: %s", out);
}
END_TEST

/* ------------------------------------------------------------ operators */

struct people {
	gid_t share, admins;
	uid_t member;
	gid_t member_gid;
};

static bool people(struct people *p)
{
	if (harness_group("lshare", &p->share) != 0 ||
	    harness_group("ladmins", &p->admins) != 0 ||
	    harness_user("l1", &p->member, &p->member_gid) != 0) {
		e2e_note("SKIP: cross-user cases need root to create users");
		return false;
	}
	return true;
}

/* Start carmyd (as root) with --group carmy-test-lshare and extra; the
 * directory the harness made for it, 0700, is carmyd's to open to the
 * group. */
static void start_shared(const char *admin_group)
{
	const char *const opts[] = { "--group", "carmy-test-lshare",
				     "--log-file", logpath, SMALL,
				     admin_group ? "--admin-group" : NULL,
				     admin_group, NULL };

	e2e_start(&d, opts);
}

/* The owner (root here) completes a call: its retry replays, unless an
 * operator purged it. */
static void complete_call(carmy_t *c, const char *rid)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("owner", "s", rid);

	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "r", 1),
			 0);
	carmy_reservation_clear(&r);
}

static int retry_call(carmy_t *c, const char *rid)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("owner", "s", rid);
	int rc = carmy_begin(c, &call, &r);

	if (rc == CARMY_RESERVED)
		ck_assert_int_eq(carmy_release(c, &r), 0);
	carmy_reservation_clear(&r);
	return rc;
}

START_TEST(test_group_member_may_not_purge_or_resolve)
{
	const char *const purge[] = { "purge", "--older-than", "0s", NULL };
	struct carmy_call lost = E2E_CALL("owner", "s", "lost");
	struct e2e_child ch;
	struct people p;
	char err[1024], uid_text[64];
	carmy_t *c;

	if (!people(&p))
		return;
	start_shared(NULL);
	c = e2e_connect(&d);
	complete_call(c, "done");
	e2e_child_reserve(&ch, d.socket, &lost, E2E_EXIT);
	e2e_child_reap(&ch);
	ck_assert_int_eq(e2e_poll_begin(c, &lost, &(struct carmy_reservation)
					CARMY_RESERVATION_INIT,
					CARMY_EUNCERTAIN,
					CARMY_STATE_INTERRUPTED, 10000, NULL),
			 CARMY_EUNCERTAIN);

	/* A member of the group: refused, nothing changes. */
	ck_assert_int_eq(carmyctl(p.member, p.member_gid, &p.share, 1, err,
				  sizeof(err), purge), 1);
	ck_assert_msg(strstr(err, "NOT_PERMITTED") != NULL &&
		      strstr(err, "--admin-group") != NULL, "carmyctl: %s", err);
	ck_assert_int_eq(retry_call(c, "done"), CARMY_REPLAY);
	{
		const char *const resolve[] = { "resolve", ch.exec,
						"--not-committed", NULL };

		ck_assert_int_eq(carmyctl(p.member, p.member_gid, &p.share, 1,
					  err, sizeof(err), resolve), 1);
		ck_assert_msg(strstr(err, "NOT_PERMITTED") != NULL,
			      "carmyctl: %s", err);
	}
	ck_assert_int_eq(retry_call(c, "lost"), CARMY_EUNCERTAIN);
	{
		struct carmy_reservation r = CARMY_RESERVATION_INIT;
		struct carmy_call done = E2E_CALL("owner", "s", "done");
		const char *forget[] = { "forget", NULL, NULL };

		ck_assert_int_eq(carmy_begin(c, &done, &r), CARMY_REPLAY);
		forget[1] = r.execution_id;
		ck_assert_int_eq(carmyctl(p.member, p.member_gid, &p.share, 1,
					  err, sizeof(err), forget), 1);
		ck_assert_msg(strstr(err, "NOT_PERMITTED") != NULL,
			      "carmyctl: %s", err);
		carmy_reservation_clear(&r);
	}
	ck_assert_int_eq(retry_call(c, "done"), CARMY_REPLAY);
	snprintf(uid_text, sizeof(uid_text), "uid %u: purge refused",
		 (unsigned)p.member);
	ck_assert_msg(wait_log(uid_text, HARNESS_WAIT_MS),
		      "no log line with the uid");

	/* Root may. */
	ck_assert_int_eq(carmyctl((uid_t)-1, 0, NULL, 0, err, sizeof(err),
				  purge), 0);
	ck_assert_int_eq(retry_call(c, "done"), CARMY_RESERVED);
	carmy_close(c);
	e2e_stop(&d);
}
END_TEST

/* Refusals are logged at most once a second a user, not for all users:
 * a second user refused right after the first is named too. */
START_TEST(test_refusals_of_two_users_at_once_name_both)
{
	const char *const purge[] = { "purge", "--older-than", "0s", NULL };
	struct people p;
	uid_t other;
	gid_t other_gid;
	char err[1024], uid_text[64];

	if (!people(&p))
		return;
	if (harness_user("l2", &other, &other_gid) != 0) {
		e2e_note("SKIP: cross-user cases need root to create users");
		return;
	}
	start_shared(NULL);
	ck_assert_int_eq(carmyctl(p.member, p.member_gid, &p.share, 1, err,
				  sizeof(err), purge), 1);
	ck_assert_int_eq(carmyctl(other, other_gid, &p.share, 1, err,
				  sizeof(err), purge), 1);
	ck_assert_msg(strstr(err, "NOT_PERMITTED") != NULL, "carmyctl: %s", err);
	snprintf(uid_text, sizeof(uid_text), "uid %u: purge refused",
		 (unsigned)p.member);
	ck_assert_msg(wait_log(uid_text, HARNESS_WAIT_MS),
		      "the first user is not named");
	snprintf(uid_text, sizeof(uid_text), "uid %u: purge refused",
		 (unsigned)other);
	ck_assert_msg(wait_log(uid_text, HARNESS_WAIT_MS),
		      "the second user is not named");
	e2e_stop(&d);
}
END_TEST

START_TEST(test_admin_group_member_may_purge_and_resolve)
{
	const char *const purge[] = { "purge", "--older-than", "0s", NULL };
	struct carmy_call lost = E2E_CALL("owner", "s", "lost");
	struct e2e_child ch;
	struct people p;
	gid_t both[2];
	char err[1024];
	carmy_t *c;

	if (!people(&p))
		return;
	both[0] = p.share;
	both[1] = p.admins;
	start_shared("carmy-test-ladmins");
	c = e2e_connect(&d);
	complete_call(c, "done");
	e2e_child_reserve(&ch, d.socket, &lost, E2E_EXIT);
	e2e_child_reap(&ch);
	ck_assert_int_eq(e2e_poll_begin(c, &lost, &(struct carmy_reservation)
					CARMY_RESERVATION_INIT,
					CARMY_EUNCERTAIN,
					CARMY_STATE_INTERRUPTED, 10000, NULL),
			 CARMY_EUNCERTAIN);
	/* In the share group alone: still refused. */
	ck_assert_int_eq(carmyctl(p.member, p.member_gid, &p.share, 1, err,
				  sizeof(err), purge), 1);
	ck_assert_int_eq(retry_call(c, "done"), CARMY_REPLAY);
	/* In the admin group too: accepted. */
	ck_assert_int_eq(carmyctl(p.member, p.member_gid, both, 2, err,
				  sizeof(err), purge), 0);
	ck_assert_int_eq(retry_call(c, "done"), CARMY_RESERVED);
	{
		const char *const resolve[] = { "resolve", ch.exec,
						"--not-committed", NULL };

		ck_assert_int_eq(carmyctl(p.member, p.member_gid, both, 2, err,
					  sizeof(err), resolve), 0);
	}
	ck_assert_int_eq(retry_call(c, "lost"), CARMY_RESERVED);
	/* And forget one. */
	complete_call(c, "again");
	{
		struct carmy_reservation r = CARMY_RESERVATION_INIT;
		struct carmy_call again = E2E_CALL("owner", "s", "again");
		const char *forget[] = { "forget", NULL, NULL };

		ck_assert_int_eq(carmy_begin(c, &again, &r), CARMY_REPLAY);
		forget[1] = r.execution_id;
		ck_assert_int_eq(carmyctl(p.member, p.member_gid, both, 2, err,
					  sizeof(err), forget), 0);
		carmy_reservation_clear(&r);
	}
	ck_assert_int_eq(retry_call(c, "again"), CARMY_RESERVED);
	carmy_close(c);
	e2e_stop(&d);
}
END_TEST

/* carmyd's own user, not root, may. */
START_TEST(test_carmyds_own_user_may_purge)
{
	const char *const purge[] = { "purge", "--older-than", "0s", NULL };
	struct people p;
	char err[1024];

	if (!people(&p))
		return;
	ck_assert_int_eq(harness_start_as(&d, p.member, p.member_gid, NULL), 0);
	ck_assert_int_eq(carmyctl(p.member, p.member_gid, NULL, 0, err,
				  sizeof(err), purge), 0);
	e2e_stop(&d);
}
END_TEST

static Suite *limits_suite(void)
{
	Suite *s = suite_create("limits");
	TCase *tc = tcase_create("limits");

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_silent_connections_at_the_limit_leave_room_for_a_client);
	tcase_add_test(tc, test_running_out_of_descriptors_answers_without_spinning);
	tcase_add_test(tc, test_a_flood_of_bad_first_messages_is_logged_once);
	tcase_add_loop_test(tc, test_accept_failing_for_good_neither_spins_nor_floods_the_log,
			    0, (int)(sizeof(accept_errors) / sizeof(accept_errors[0])));
	tcase_add_test(tc, test_shed_connections_not_yet_closed_pause_accepting_without_spinning);
	tcase_add_test(tc, test_max_clients_refuses_one_more_until_one_leaves);
	tcase_add_test(tc, test_max_clients_beyond_the_descriptor_limit_is_a_usage_error);
	tcase_add_test(tc, test_group_member_may_not_purge_or_resolve);
	tcase_add_test(tc, test_refusals_of_two_users_at_once_name_both);
	tcase_add_test(tc, test_admin_group_member_may_purge_and_resolve);
	tcase_add_test(tc, test_carmyds_own_user_may_purge);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(limits_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0;
}
