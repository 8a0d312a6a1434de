/*
 * check_fork.c - a handle belongs to the process that connected it.
 *
 * A child of fork() that uses its parent's handle is refused with FORKED
 * by every call and changes nothing: it reserves nothing, completes or
 * releases none of its parent's reservations, and its carmy_close() leaves
 * the parent's handle working. The child connects a handle of its own,
 * which is an owner like any process's: killed with -9, its call is
 * interrupted, not running. And the child's copy of its parent's
 * connection is closed at the fork: a parent killed while its child lives
 * on has its call interrupted all the same.
 *
 * Children report through pipes and leave with _exit(); only the test
 * process asserts (tests/e2e/e2e.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "tests/e2e/e2e.h"

static struct carmyd_proc d;
static carmy_t *c;
/* Processes a test leaves behind if an assertion fails: killed by
 * teardown. */
static pid_t kids[2];

static void setup(void)
{
	static const char *const opts[] = { "--capacity", "64", NULL };

	e2e_start(&d, opts);
	c = e2e_connect(&d);
}

static void teardown(void)
{
	for (size_t i = 0; i < sizeof(kids) / sizeof(kids[0]); i++) {
		if (kids[i] > 0) {
			kill(kids[i], SIGKILL);
			waitpid(kids[i], NULL, 0);	/* ours, or not */
		}
		kids[i] = 0;
	}
	carmy_close(c);
	c = NULL;
	e2e_stop(&d);
}

/* What the child in the first test saw. */
struct misuse {
	int begin, wait, complete, release, resolve, format;
	int connect, own_begin, own_complete;
};

/* A child's body: call, the end of a pipe down from the test (rd) and of
 * one up to it (wr). Never returns. */
typedef void (*child_fn)(const struct carmy_call *call, int rd, int wr);

/* Fork kids[0] to run body; *up and *down get the test's ends. */
static void spawn(child_fn body, const struct carmy_call *call, int *up,
		  int *down)
{
	int u[2], dn[2];

	ck_assert_int_eq(pipe(u), 0);
	ck_assert_int_eq(pipe(dn), 0);
	fflush(NULL);
	kids[0] = fork();
	ck_assert_int_ge(kids[0], 0);
	if (kids[0] == 0) {
		close(u[0]);
		close(dn[1]);
		body(call, dn[0], u[1]);
	}
	close(u[1]);
	close(dn[0]);
	*up = u[0];
	*down = dn[1];
}

/* The parent's live reservation in the first test, of call "held". */
static struct carmy_reservation held_r = CARMY_RESERVATION_INIT;

/* The child of the first test: every call on the parent's handle (held_r
 * the parent's reservation of call), then its close, then a handle of its
 * own; what each answered goes up wr. */
static void misuse_parent_handle(const struct carmy_call *call, int rd,
				 int wr)
{
	struct carmy_call fresh = E2E_CALL("p", "s", "child-fresh");
	struct carmy_call own = E2E_CALL("p", "s", "child-own");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct misuse m;
	carmy_t *mine = NULL;

	close(rd);
	memset(&m, 0, sizeof(m));
	m.begin = carmy_begin(c, &fresh, &r);
	m.wait = carmy_wait(c, &fresh, &r, 100);
	m.complete = carmy_complete(c, &held_r, CARMY_STATUS_COMPLETED,
				    "child", 5);
	m.release = carmy_release(c, &held_r);
	m.resolve = carmy_resolve(c, call, held_r.execution_id, 1,
				  CARMY_STATUS_COMPLETED, "child", 5);
	m.format = carmy_set_result_format(c, CARMY_FORMAT_EXIT_OUTPUT);
	carmy_close(c);
	m.connect = carmy_connect(&mine, d.socket);
	if (m.connect == 0) {
		m.own_begin = carmy_begin(mine, &own, &r);
		if (m.own_begin == CARMY_RESERVED)
			m.own_complete = carmy_complete(mine, &r,
							CARMY_STATUS_COMPLETED,
							"own", 3);
		carmy_close(mine);
	}
	carmy_reservation_clear(&r);
	_exit(write(wr, &m, sizeof(m)) == (ssize_t)sizeof(m) ? 0 : 1);
}

static void expect_code(const char *what, int got, int want)
{
	ck_assert_msg(got == want, "%s: %s, wanted %s", what,
		      carmy_errname(got), carmy_errname(want));
}

/* Wait for pid (a child of ours) to exit; assert it exited 0. */
static void expect_clean_exit(pid_t pid)
{
	int st = 0;

	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "the child ended with status %#x", st);
}

START_TEST(test_a_forked_child_cannot_use_its_parents_handle)
{
	struct carmy_call held = E2E_CALL("p", "s", "held");
	struct carmy_call fresh = E2E_CALL("p", "s", "child-fresh");
	struct carmy_call own = E2E_CALL("p", "s", "child-own");
	struct carmy_call probe = E2E_CALL("p", "s", "probe");
	struct carmy_reservation u = CARMY_RESERVATION_INIT;
	char exec[CARMY_EXECUTION_ID_LEN + 1];
	struct misuse m;
	int up, down;

	/* A reservation of the parent's, live across the fork. */
	expect_code("parent's begin", carmy_begin(c, &held, &held_r),
		    CARMY_RESERVED);
	strcpy(exec, held_r.execution_id);
	spawn(misuse_parent_handle, &held, &up, &down);
	ck_assert_msg(e2e_read_full(up, &m, sizeof(m), HARNESS_WAIT_MS) == 0,
		      "the child did not report");
	close(up);
	close(down);
	expect_clean_exit(kids[0]);
	kids[0] = 0;

	expect_code("child's begin on the parent's handle", m.begin,
		    CARMY_EFORKED);
	expect_code("child's wait", m.wait, CARMY_EFORKED);
	expect_code("child's complete", m.complete, CARMY_EFORKED);
	expect_code("child's release", m.release, CARMY_EFORKED);
	expect_code("child's resolve", m.resolve, CARMY_EFORKED);
	expect_code("child's set_result_format", m.format, CARMY_EFORKED);
	/* A handle of its own works, as in any process. */
	expect_code("child's connect", m.connect, 0);
	expect_code("child's begin on its own handle", m.own_begin,
		    CARMY_RESERVED);
	expect_code("child's complete on its own handle", m.own_complete, 0);

	/* The child reserved nothing through the parent's handle... */
	expect_code("parent's begin of the child's identity",
		    carmy_begin(c, &fresh, &u), CARMY_RESERVED);
	ck_assert_int_eq(carmy_release(c, &u), 0);
	/* ...and through its own, what it completed stands. */
	expect_code("the child's own call", carmy_begin(c, &own, &u),
		    CARMY_REPLAY);
	ck_assert_uint_eq(u.result_len, 3);
	ck_assert_mem_eq(u.result, "own", 3);
	/* The parent's reservation is as it was: running, on a connection
	 * the child's close neither shut down nor took away (a request and
	 * its answer go through on it). */
	expect_code("parent's begin of its held call",
		    carmy_begin(c, &held, &u), CARMY_EUNCERTAIN);
	ck_assert_int_eq(u.state, CARMY_STATE_RUNNING);
	ck_assert_str_eq(u.execution_id, exec);
	expect_code("a begin after the child", carmy_begin(c, &probe, &u),
		    CARMY_RESERVED);
	expect_code("a complete after the child",
		    carmy_complete(c, &u, CARMY_STATUS_COMPLETED, "p", 1), 0);
	/* And the parent completes its own. */
	expect_code("parent's complete",
		    carmy_complete(c, &held_r, CARMY_STATUS_COMPLETED, "parent",
				   6), 0);
	expect_code("the parent's call", carmy_begin(c, &held, &u),
		    CARMY_REPLAY);
	ck_assert_str_eq(u.execution_id, exec);
	ck_assert_uint_eq(u.result_len, 6);
	ck_assert_mem_eq(u.result, "parent", 6);
	carmy_reservation_clear(&held_r);
	carmy_reservation_clear(&u);
}
END_TEST

/* What a reserving child reports: its begin on the parent's handle, its
 * own handle's, the execution that reserved, and a pid (its own, or its
 * child's: see reserve_fork_and_hold()). */
struct held_report {
	int forked, own;
	pid_t pid;
	char exec[CARMY_EXECUTION_ID_LEN + 1];
};

/* Try call on the parent's handle, then reserve it on a handle of this
 * process's own, left open. */
static void reserve_own(const struct carmy_call *call,
			struct held_report *rep)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	carmy_t *mine = NULL;

	memset(rep, 0, sizeof(*rep));
	rep->pid = getpid();
	rep->forked = carmy_begin(c, call, &r);
	rep->own = carmy_connect(&mine, d.socket);
	if (rep->own == 0)
		rep->own = carmy_begin(mine, call, &r);
	memcpy(rep->exec, r.execution_id, sizeof(rep->exec));
}

/* Live until rd reaches its end (the test closes it) or a SIGKILL. */
static void hold(int rd) __attribute__((noreturn));
static void hold(int rd)
{
	char b;

	while (read(rd, &b, 1) > 0)
		;
	_exit(0);
}

/* Reserve call, report it on wr and hold it. */
static void reserve_and_hold(const struct carmy_call *call, int rd, int wr)
{
	struct held_report rep;

	reserve_own(call, &rep);
	if (write(wr, &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
		_exit(1);
	hold(rd);
}

/* Read a held_report from fd and assert the child reserved. */
static void expect_reserved(int fd, struct held_report *rep)
{
	ck_assert_msg(e2e_read_full(fd, rep, sizeof(*rep), HARNESS_WAIT_MS) == 0,
		      "the child did not report");
	expect_code("child's begin on the parent's handle", rep->forked,
		    CARMY_EFORKED);
	expect_code("child's begin on its own handle", rep->own,
		    CARMY_RESERVED);
	ck_assert(e2e_exec_id_valid(rep->exec));
}

/* The identity is interrupted by exec: waited for, never slept for. */
static void expect_interrupted(const struct carmy_call *call,
			       const char *exec)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	int rc;

	rc = e2e_poll_begin(c, call, &r, CARMY_EUNCERTAIN,
			    CARMY_STATE_INTERRUPTED, HARNESS_WAIT_MS, NULL);
	ck_assert_msg(rc == CARMY_EUNCERTAIN &&
			      r.state == CARMY_STATE_INTERRUPTED,
		      "after %d ms: %s, %s", HARNESS_WAIT_MS,
		      carmy_errname(rc), carmy_state_name(r.state));
	ck_assert_str_eq(r.execution_id, exec);
	carmy_reservation_clear(&r);
}

START_TEST(test_a_killed_child_with_its_own_handle_is_interrupted)
{
	struct carmy_call call = E2E_CALL("p", "s", "child-killed");
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct held_report rep;
	int up, down;

	spawn(reserve_and_hold, &call, &up, &down);
	expect_reserved(up, &rep);
	/* Running while the child lives. */
	expect_code("parent's begin", carmy_begin(c, &call, &r),
		    CARMY_EUNCERTAIN);
	ck_assert_int_eq(r.state, CARMY_STATE_RUNNING);
	ck_assert_str_eq(r.execution_id, rep.exec);

	ck_assert_int_eq(kill(kids[0], SIGKILL), 0);
	ck_assert_int_eq(waitpid(kids[0], NULL, 0), kids[0]);
	kids[0] = 0;
	expect_interrupted(&call, rep.exec);
	close(up);
	close(down);
	carmy_reservation_clear(&r);
}
END_TEST

/* Reserve call, then fork a child that lives on, doing nothing, with
 * copies of all this process has; report both, and hold the call. */
static void reserve_fork_and_hold(const struct carmy_call *call, int rd,
				  int wr)
{
	struct held_report rep;

	reserve_own(call, &rep);
	rep.pid = fork();
	if (rep.pid == 0) {
		close(wr);
		hold(rd);
	}
	if (rep.pid < 0 || write(wr, &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
		_exit(1);
	hold(rd);
}

START_TEST(test_a_killed_parent_is_interrupted_while_its_child_lives)
{
	struct carmy_call call = E2E_CALL("p", "s", "parent-killed");
	struct held_report rep;
	int up, down;

	spawn(reserve_fork_and_hold, &call, &up, &down);
	expect_reserved(up, &rep);
	kids[1] = rep.pid;	/* the grandchild: not ours to wait for */

	ck_assert_int_eq(kill(kids[0], SIGKILL), 0);
	ck_assert_int_eq(waitpid(kids[0], NULL, 0), kids[0]);
	kids[0] = 0;
	expect_interrupted(&call, rep.exec);
	/* Seen while the grandchild, with its copies, still lived. */
	ck_assert_msg(kill(kids[1], 0) == 0, "the grandchild is gone: %s",
		      strerror(errno));
	close(down);		/* and now it goes */
	close(up);
	kill(kids[1], SIGKILL);
	kids[1] = 0;
}
END_TEST

static Suite *fork_suite(void)
{
	Suite *s = suite_create("fork");
	TCase *tc = tcase_create("fork");

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_a_forked_child_cannot_use_its_parents_handle);
	tcase_add_test(tc, test_a_killed_child_with_its_own_handle_is_interrupted);
	tcase_add_test(tc, test_a_killed_parent_is_interrupted_while_its_child_lives);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(fork_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0;
}
