/*
 * e2e.c - see e2e.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "libclient/wire.h"
#include "tests/e2e/e2e.h"

#define GUARD_SLOTS 64

/* What the child tells its parent, in this order. */
struct child_report {
	int rc;
	char exec[CARMY_EXECUTION_ID_LEN + 1];
	uint64_t end_ns;
};

/*
 * The carmyds started and not stopped, in a page shared with the Check
 * runner. A failing assertion in a forked test leaves with _exit(), and a
 * timeout with SIGKILL, so no code of the test process runs afterwards; the
 * runner's unchecked teardown (e2e_guard) reads this page and cleans up.
 */
struct guard_slot {
	int used;
	pid_t pid;		/* 0 while carmyd is down */
	struct carmyd_proc proc;
};

static struct guard_slot *guard;

static struct guard_slot *slot_of(const struct carmyd_proc *d);
static bool is_carmyd(pid_t pid);
static void remove_leftovers(const struct carmyd_proc *d);
static void backoff(unsigned *us);

/* ------------------------------------------------------------ guard */

static void guard_setup(void)
{
	if (guard != NULL)
		return;
	guard = mmap(NULL, GUARD_SLOTS * sizeof(*guard),
		     PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(guard, MAP_FAILED);
	memset(guard, 0, GUARD_SLOTS * sizeof(*guard));
}

static void guard_teardown(void)
{
	if (guard == NULL)
		return;
	for (int i = 0; i < GUARD_SLOTS; i++) {
		struct guard_slot *g = &guard[i];

		if (!g->used)
			continue;
		if (g->pid > 0 && is_carmyd(g->pid)) {
			kill(g->pid, SIGKILL);
			waitpid(g->pid, NULL, WNOHANG);	/* ours without fork */
		}
		remove_leftovers(&g->proc);
		g->used = 0;
	}
}

void e2e_guard(TCase *tc)
{
	tcase_add_unchecked_fixture(tc, guard_setup, guard_teardown);
}

/* ------------------------------------------------------------ carmyd */

void e2e_start(struct carmyd_proc *d, const char *const *extra)
{
	struct guard_slot *g = NULL;

	ck_assert_msg(guard != NULL, "call e2e_guard() on the test case");
	for (int i = 0; i < GUARD_SLOTS && g == NULL; i++)
		if (__atomic_exchange_n(&guard[i].used, 1, __ATOMIC_ACQ_REL) == 0)
			g = &guard[i];
	ck_assert_ptr_nonnull(g);
	g->pid = 0;
	fflush(NULL);	/* harness_start forks */
	if (harness_start(d, extra) != 0) {
		g->used = 0;
		ck_abort_msg("carmyd did not start");
	}
	g->proc = *d;
	g->pid = d->pid;
}

void e2e_stop(struct carmyd_proc *d)
{
	struct guard_slot *g = slot_of(d);
	bool was_running = d->pid > 0;
	int st = harness_stop(d);

	remove_leftovers(d);
	if (g != NULL) {
		g->pid = 0;
		g->used = 0;
	}
	if (was_running)
		ck_assert_msg(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
			      "carmyd did not exit cleanly on SIGTERM "
			      "(wait status %#x): it died before", st);
}

void e2e_kill9(struct carmyd_proc *d)
{
	struct guard_slot *g = slot_of(d);

	harness_kill9(d);
	if (g != NULL)
		g->pid = 0;
}

void e2e_restart(struct carmyd_proc *d, const char *const *extra)
{
	struct guard_slot *g = slot_of(d);

	fflush(NULL);
	ck_assert_msg(harness_restart(d, extra) == 0,
		      "carmyd did not start again on its old segment");
	if (g != NULL)
		g->pid = d->pid;
}

bool e2e_alive(const struct carmyd_proc *d)
{
	siginfo_t si;

	if (d->pid <= 0 || kill(d->pid, 0) != 0)
		return false;
	/* A zombie still answers kill(pid, 0): ask waitid without reaping. */
	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, (id_t)d->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0)
		return false;
	return si.si_pid == 0;
}

/* Is every thread of pid stopped (state T in /proc/pid/task/N/stat)? */
static bool all_stopped(pid_t pid)
{
	char path[64];
	DIR *dir;
	struct dirent *de;
	bool stopped = true;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	if (dir == NULL)
		return false;
	while (stopped && (de = readdir(dir)) != NULL) {
		char stat[320], buf[256], *p;
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(stat, sizeof(stat), "/proc/%d/task/%s/stat", (int)pid,
			 de->d_name);
		f = fopen(stat, "r");
		if (f == NULL)
			continue;	/* the thread ended */
		p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
		fclose(f);
		stopped = p != NULL && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
	}
	closedir(dir);
	return stopped;
}

void e2e_sigstop(pid_t pid)
{
	ck_assert_int_eq(kill(pid, SIGSTOP), 0);
	for (uint64_t t0 = harness_now_ns(); !all_stopped(pid); sched_yield())
		ck_assert_msg(e2e_ms_since(t0) < 20000,
			      "pid %d did not stop", (int)pid);
}

carmy_t *e2e_connect(const struct carmyd_proc *d)
{
	carmy_t *c = NULL;
	int rc = carmy_connect(&c, d->socket);

	ck_assert_msg(rc == 0, "carmy_connect: %s", carmy_errname(rc));
	return c;
}

/* ------------------------------------------------------------ checks */

bool e2e_exec_id_valid(const char *id)
{
	if (strlen(id) != CARMY_EXECUTION_ID_LEN || strncmp(id, "exec_", 5))
		return false;
	for (int i = 5; i < CARMY_EXECUTION_ID_LEN; i++)
		if (!((id[i] >= '0' && id[i] <= '9') ||
		      (id[i] >= 'a' && id[i] <= 'f')))
			return false;
	return true;
}

void e2e_exec_bytes(const char *id, uint8_t out[SHM_EXEC_LEN])
{
	for (int i = 0; i < SHM_EXEC_LEN; i++) {
		unsigned v;

		ck_assert(sscanf(id + 5 + 2 * i, "%2x", &v) == 1);
		out[i] = (uint8_t)v;
	}
}

unsigned e2e_exec_state(const struct shm_view *v, const char *exec)
{
	uint8_t want[SHM_EXEC_LEN];

	e2e_exec_bytes(exec, want);
	for (uint32_t e = 0; e < v->geo.capacity; e++) {
		unsigned st = shm_state_as(v, e, want);

		if (st != SHM_FREE)
			return st;
	}
	return SHM_FREE;
}

bool e2e_await_gone(const struct shm_view *v, const char *const *exec,
		    int n, int timeout_ms)
{
	uint64_t deadline = harness_now_ns() + (uint64_t)timeout_ms * 1000000u;

	for (;;) {
		struct timespec ts = { 0, 20 * 1000 * 1000 };
		int left = 0;

		for (int i = 0; i < n; i++)
			left += e2e_exec_state(v, exec[i]) != SHM_FREE;
		if (left == 0)
			return true;
		if (harness_now_ns() > deadline)
			return false;
		nanosleep(&ts, NULL);	/* polling, bounded above */
	}
}

void e2e_within(double ms, double limit_ms, const char *what)
{
	const char *env = getenv("CARMY_TIMING");
	bool strict = env != NULL && strcmp(env, "1") == 0;

	e2e_note("%s: %.1f ms (bound %.0f ms%s)", what, ms, limit_ms,
		 ms < limit_ms ? "" : strict ? ", MISSED" :
		 ", missed: asserted only by make check-timing");
	if (strict)
		ck_assert_msg(ms < limit_ms, "%s: %.1f ms, over %.0f ms", what,
			      ms, limit_ms);
}

void e2e_note(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("# ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

double e2e_ms_since(uint64_t t0_ns)
{
	return (double)(harness_now_ns() - t0_ns) / 1e6;
}

unsigned long long e2e_cpu_ticks(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long long ut = 0, st = 0;
	const char *p;
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* After the command's closing parenthesis: state is field 3, utime
	 * and stime are fields 14 and 15. */
	p = strrchr(buf, ')');
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u "
				"%*u %*u %llu %llu", &ut, &st), 2);
	return ut + st;
}

int e2e_poll_begin(carmy_t *c, const struct carmy_call *call,
		   struct carmy_reservation *r, int want_rc, int want_state,
		   int timeout_ms, uint64_t *seen_ns)
{
	uint64_t deadline = harness_now_ns() + (uint64_t)timeout_ms * 1000000u;
	unsigned us = 10;
	int rc;

	for (;;) {
		uint64_t now;

		rc = carmy_begin(c, call, r);
		now = harness_now_ns();
		if (seen_ns != NULL)
			*seen_ns = now;
		if (rc == CARMY_RESERVED)
			return rc;
		if (rc == want_rc && (want_state < 0 || r->state == want_state))
			return rc;
		if (now > deadline)
			return rc;
		backoff(&us);
	}
}

int e2e_read_full(int fd, void *buf, size_t n, int timeout_ms)
{
	uint64_t deadline = harness_now_ns() + (uint64_t)timeout_ms * 1000000u;
	uint8_t *p = buf;

	while (n > 0) {
		int64_t left = (int64_t)(deadline - harness_now_ns()) / 1000000;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t got;
		int pr;

		if (left < 0)
			return -1;
		pr = poll(&pfd, 1, (int)left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return -1;
		got = read(fd, p, n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return -1;
		p += got;
		n -= (size_t)got;
	}
	return 0;
}

int e2e_carmyctl(const struct carmyd_proc *d, uid_t uid, gid_t gid,
		 const gid_t *groups, size_t n, char *err, size_t errsz,
		 const char *const *args)
{
	char prog[512], trusted[32];
	const char *argv[16];
	int p[2], st, k = 0;
	ssize_t got, have = 0;
	pid_t pid;

	argv[k++] = harness_path("tools/carmyctl", prog, sizeof(prog));
	argv[k++] = "--socket";
	argv[k++] = d->socket;
	for (int i = 0; args[i] != NULL && k < 15; i++)
		argv[k++] = args[i];
	argv[k] = NULL;
	ck_assert_int_eq(pipe(p), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, STDOUT_FILENO);
		dup2(p[1], STDERR_FILENO);
		/* A client of another user's carmyd names the uid it
		 * trusts (carmyd's). */
		snprintf(trusted, sizeof(trusted), "%u",
			 (unsigned)(d->as_user ? d->uid : 0));
		setenv("CARMY_TRUSTED_USERS", trusted, 1);
		if (uid != (uid_t)-1 && harness_become(uid, gid, groups, n) != 0)
			_exit(126);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	while (have < (ssize_t)errsz - 1 &&
	       (got = read(p[0], err + have, errsz - 1 - (size_t)have)) > 0)
		have += got;
	err[have] = '\0';
	close(p[0]);
	st = harness_waitpid(pid, 30000);
	ck_assert_msg(st != -1, "carmyctl did not finish");
	ck_assert(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* ------------------------------------------------------------ clients */

static void child_main(int rd, int wr, const char *socket,
		       const struct carmy_call *call, enum e2e_end end)
{
	struct child_report rep;
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	carmy_t *c = NULL;
	char b;

	memset(&rep, 0, sizeof(rep));
	rep.rc = carmy_connect(&c, socket);
	if (rep.rc == 0)
		rep.rc = carmy_begin(c, call, &r);
	memcpy(rep.exec, r.execution_id, sizeof(rep.exec));
	if (write(wr, &rep, sizeof(rep)) != (ssize_t)sizeof(rep) ||
	    rep.rc != CARMY_RESERVED)
		_exit(1);
	switch (end) {
	case E2E_HOLD:
		break;
	case E2E_CLOSE:
		rep.end_ns = harness_now_ns();
		carmy_close(c);
		if (write(wr, &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
			_exit(1);
		break;
	case E2E_EXIT:
		rep.end_ns = harness_now_ns();
		if (write(wr, &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
			_exit(1);
		exit(0);	/* the normal way out, handle still open */
	}
	/* Wait for the parent: EOF on rd (or SIGKILL). */
	while (read(rd, &b, 1) > 0)
		;
	_exit(0);
}

void e2e_child_reserve(struct e2e_child *ch, const char *socket,
		       const struct carmy_call *call, enum e2e_end end)
{
	struct child_report rep;
	int down[2], up[2];

	memset(ch, 0, sizeof(*ch));
	ck_assert_int_eq(pipe2(down, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(up, O_CLOEXEC), 0);
	fflush(NULL);
	ch->pid = fork();
	ck_assert_int_ge(ch->pid, 0);
	if (ch->pid == 0) {
		close(down[1]);
		close(up[0]);
		child_main(down[0], up[1], socket, call, end);
		_exit(1);
	}
	close(down[0]);
	close(up[1]);
	ch->to_child = down[1];
	ch->from_child = up[0];
	ck_assert_msg(e2e_read_full(ch->from_child, &rep, sizeof(rep), 10000) == 0,
		      "the child did not report its reservation");
	ck_assert_msg(rep.rc == CARMY_RESERVED, "child's begin: %s",
		      carmy_errname(rep.rc));
	ck_assert(e2e_exec_id_valid(rep.exec));
	memcpy(ch->exec, rep.exec, sizeof(ch->exec));
	if (end == E2E_HOLD)
		return;
	ck_assert_msg(e2e_read_full(ch->from_child, &rep, sizeof(rep), 10000) == 0,
		      "the child did not report letting go");
	ch->end_ns = rep.end_ns;
}

void e2e_child_reap(struct e2e_child *ch)
{
	if (ch->pid > 0) {
		kill(ch->pid, SIGKILL);
		waitpid(ch->pid, NULL, 0);
		ch->pid = 0;
	}
	if (ch->to_child > 0)
		close(ch->to_child);
	if (ch->from_child > 0)
		close(ch->from_child);
	ch->to_child = ch->from_child = -1;
}

/* ------------------------------------------------------------ helpers */

/* The guard slot of the carmyd started as d (same socket path). */
static struct guard_slot *slot_of(const struct carmyd_proc *d)
{
	for (int i = 0; guard != NULL && i < GUARD_SLOTS; i++)
		if (guard[i].used && strcmp(guard[i].proc.socket, d->socket) == 0)
			return &guard[i];
	return NULL;
}

/* Is pid still a carmyd? (It may have died and its pid been reused.) */
static bool is_carmyd(pid_t pid)
{
	char path[64], cmd[256];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, cmd, sizeof(cmd) - 1);
	close(fd);
	if (n <= 0)
		return false;
	cmd[n] = '\0';
	return strstr(cmd, "carmyd") != NULL;
}

static void remove_leftovers(const struct carmyd_proc *d)
{
	char path[200];

	snprintf(path, sizeof(path), "%s.lock", d->socket);
	unlink(path);
	unlink(d->socket);
	rmdir(d->dir);
	if (d->segment[0] != '\0')
		shm_unlink(d->segment);
}

static void backoff(unsigned *us)
{
	struct timespec ts = { 0, (long)*us * 1000 };

	nanosleep(&ts, NULL);
	if (*us < 1000)
		*us *= 2;
}

/* ------------------------------------------------------------ speed */

/* Does /proc/<pid>/maps name a sanitiser's runtime? */
static bool maps_sanitiser(pid_t pid)
{
	char path[64], line[512];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return false;
	while (!found && fgets(line, sizeof(line), f) != NULL)
		found = strstr(line, "/libtsan.") != NULL ||
			strstr(line, "/libasan.") != NULL;
	fclose(f);
	return found;
}

bool e2e_sanitised(const struct carmyd_proc *d)
{
	const char *env = getenv("CARMY_SANITISED");

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
	return true;
#endif
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
	return true;
#endif
#endif
	if (env != NULL && *env != '\0' && strcmp(env, "0") != 0)
		return true;
	return d != NULL && d->pid > 0 && maps_sanitiser(d->pid);
}

/* ------------------------------------------------------------ posts */

void e2e_post_awake(const struct shm_view *v, uint32_t slot, uint32_t bell,
		    uint32_t gen, const struct shm_post *p)
{
	uint64_t t0 = harness_now_ns();
	unsigned tries = 0;
	int rc;

	ck_assert_uint_lt(bell, SHM_BELLS);
	for (;;) {
		__atomic_store_n(&v->bells[bell].bl_awake, 1, __ATOMIC_SEQ_CST);
		rc = shm_post(v, slot, bell, gen, p);
		tries++;
		if (rc != SHM_WITHDRAWN)
			break;
		ck_assert_msg(e2e_ms_since(t0) < HARNESS_WAIT_MS, "the loop "
			      "went to sleep under %u posts", tries);
		sched_yield();
	}
	ck_assert_msg(rc == SHM_POSTED, "shm_post: %d", rc);
	if (tries > 1)
		e2e_note("posted after %u tries (the loop went to sleep "
			 "meanwhile)", tries);
}

/* ------------------------------------------------------------ files */

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	if (remove(path) != 0 && errno != ENOENT)
		return -1;
	return 0;
}

void e2e_rm_rf(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ------------------------------------------------------------ logs */

int e2e_logged(const char *path, const char *what)
{
	char line[512];
	int n = 0;
	FILE *f = fopen(path, "r");

	ck_assert_msg(f != NULL, "no log at %s", path);
	while (fgets(line, sizeof(line), f) != NULL)
		n += strstr(line, what) != NULL;
	fclose(f);
	return n;
}

bool e2e_await_logged(const char *path, const char *what, int n, int ms)
{
	uint64_t t0 = harness_now_ns();

	while (e2e_logged(path, what) <= n) {
		if (e2e_ms_since(t0) >= ms)
			return false;
		poll(NULL, 0, 2);	/* between looks at the event */
	}
	return true;
}

/* One whole message from fd into *m. Returns 0 or -1. */
static int raw_read(int fd, uint8_t *buf, size_t cap, struct wire_msg *m)
{
	size_t have = 0;
	long n = 0;

	while (n == 0 && have < cap) {
		if (e2e_read_full(fd, buf + have, 1, HARNESS_WAIT_MS) != 0)
			return -1;
		n = wire_scan(buf, ++have, cap);
		if (n < 0)
			return -1;
	}
	return n > 0 && wire_decode(buf, have, 0, m) == 0 ? 0 : -1;
}

int e2e_raw_release(const char *path, uint32_t entry,
		    const uint8_t exec[SHM_EXEC_LEN])
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	msgpack_sbuffer sb;
	struct wire_msg m;
	uint8_t buf[512];

	ck_assert_int_ge(fd, 0);
	ck_assert_uint_lt(strlen(path), sizeof(sa.sun_path));
	strcpy(sa.sun_path, path);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	msgpack_sbuffer_init(&sb);
	ck_assert_int_eq(wire_put_hello(&sb, shm_layout_signature(), 0, 0), 0);
	ck_assert_int_eq(send(fd, sb.data, sb.size, MSG_NOSIGNAL),
			 (ssize_t)sb.size);
	ck_assert_int_eq(raw_read(fd, buf, sizeof(buf), &m), 0);
	ck_assert_int_eq(m.type, WIRE_HELLO);
	msgpack_sbuffer_clear(&sb);
	ck_assert_int_eq(wire_put_reserve(&sb, WIRE_RELEASE, entry, exec), 0);
	ck_assert_int_eq(send(fd, sb.data, sb.size, MSG_NOSIGNAL),
			 (ssize_t)sb.size);
	msgpack_sbuffer_destroy(&sb);
	ck_assert_int_eq(raw_read(fd, buf, sizeof(buf), &m), 0);
	ck_assert_int_eq(m.type, WIRE_RELEASE);
	close(fd);
	return m.u.reply.code;
}
