/*
 * check_huge.c - carmyd's segment in huge pages where the kernel gives
 * them, and its log saying so truly.
 *
 * When carmyd has mapped and read its segment it logs one line, "segment:
 * N MiB zeroed and read" (a new segment) or "mapped and read" (one that
 * survived a restart), which ends with how much of the segment carmyd
 * maps with huge pages, or with where to read why it has none. That is
 * checked here against the kernel's own account, the ShmemPmdMapped of
 * the segment's mapping in /proc/<carmyd>/smaps: on /dev/shm as this
 * machine has it, and, as root, in a mount namespace of the test's own
 * with a fresh tmpfs on /dev/shm mounted huge=within_size (the pages are
 * huge as allocated), huge=advise and huge=never (carmyd collapses them,
 * MADV_COLLAPSE, where the kernel lets it). Every mapping of the segment,
 * carmyd's and libcarmy's, starts on a 2 MiB boundary, so that huge pages
 * are the clients' too: the test's own mapping of the segment is told
 * from its smaps the same way, and a recorded call replays through them,
 * before and after a restart on the surviving segment.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <check.h>

#include "common/hugepage.h"
#include "tests/e2e/e2e.h"

static struct carmyd_proc d;
static carmy_t *c;
/* carmyd's log, at info level: the segment line is info. */
static char logdir[64], logpath[96];

/* 2,000 entries of the default --max-result (16 KiB): a segment of some
 * 34 MiB (sixteen whole 2 MiB pages and a part), over the 8 MiB from
 * which carmyd says why it has no huge pages. */
static const char *const opts[] = { "--capacity", "2000", "--log-level",
				    "info", "--log-file", logpath, NULL };

/* What carmyd logs when it has none, after the size and the time. */
#define SMALL_PAGES ", in 4 KiB pages (carmyd(8), HUGE PAGES)"

/*
 * The logs live in one directory made once for the run, in Check's runner
 * (an unchecked fixture), which removes it and all in it at the end: a
 * test that fails leaves by _exit(), past its own teardown. Each test's
 * log is named by the test's process, so no test reads another's.
 */
static void logdir_make(void)
{
	strcpy(logdir, "/tmp/carmy-huge.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(logdir));
}

static void logdir_remove(void)
{
	DIR *dir = opendir(logdir);
	struct dirent *de;

	if (dir == NULL)
		return;
	while ((de = readdir(dir)) != NULL)
		if (de->d_name[0] != '.')
			unlinkat(dirfd(dir), de->d_name, 0);
	closedir(dir);
	rmdir(logdir);
}

static void setup(void)
{
	memset(&d, 0, sizeof(d));
	snprintf(logpath, sizeof(logpath), "%s/carmyd.%d.log", logdir,
		 (int)getpid());
}

/* The tests start carmyd themselves, not setup(): a test that makes a
 * mount namespace must be in it before carmyd, its child, starts. */
static void teardown(void)
{
	carmy_close(c);
	c = NULL;
	if (d.socket[0] != '\0')
		e2e_stop(&d);
}

/* ------------------------------------------------------------ smaps */

/*
 * The ShmemPmdMapped of process pid's mapping of carmyd's segment (pid 0:
 * this process), in bytes: how much of it the kernel maps there with huge
 * pages. -1 if it maps none; *base gets where it starts, and *n how many
 * mappings of the segment there are (their figures added up).
 */
static int64_t segment_pmd(pid_t pid, uintptr_t *base, int *n)
{
	char path[64], seg[96], line[512];
	int64_t bytes = -1;
	bool in = false;
	FILE *f;

	if (pid == 0)
		snprintf(path, sizeof(path), "/proc/self/smaps");
	else
		snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	snprintf(seg, sizeof(seg), "/dev/shm%s", d.segment);
	f = fopen(path, "r");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	*base = 0;
	*n = 0;
	/* An entry is a header (lo-hi perms offset dev inode [path]) and
	 * then "Field: value" lines, which never start with a range. */
	while (fgets(line, sizeof(line), f) != NULL) {
		uintptr_t lo, hi;
		unsigned long long kb;

		line[strcspn(line, "\n")] = '\0';
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2) {
			const char *name = strchr(line, '/');

			in = name != NULL && strcmp(name, seg) == 0;
			if (in && (*n)++ == 0) {
				*base = lo;
				bytes = 0;
			}
		} else if (in &&
			   sscanf(line, "ShmemPmdMapped: %llu kB", &kb) == 1) {
			bytes += (int64_t)(kb << 10);
		}
	}
	fclose(f);
	return bytes;
}

/* Every mapping of the segment starts on a 2 MiB boundary (shm_mmap()),
 * whatever the mount: what lets a huge page be mapped whole. */
#define HUGE_ALIGN ((uintptr_t)2 << 20)

/* carmyd's figure, which its log line must tell. */
static int64_t carmyd_pmd(void)
{
	uintptr_t base;
	int n;
	int64_t pmd = segment_pmd(d.pid, &base, &n);

	ck_assert_msg(pmd >= 0, "carmyd (pid %d) does not map /dev/shm%s",
		      (int)d.pid, d.segment);
	ck_assert_int_eq(n, 1);
	ck_assert_msg(base % HUGE_ALIGN == 0, "carmyd maps the segment at "
		      "%#" PRIxPTR ", not on a 2 MiB boundary", base);
	return pmd;
}

/* This process's figure, through libcarmy's mapping (one, c's), read both
 * here and by common/hugepage.c, which carmyd's log line uses. */
static int64_t own_pmd(void)
{
	uintptr_t base;
	int n;
	int64_t pmd = segment_pmd(0, &base, &n);

	ck_assert_msg(pmd >= 0, "this process does not map /dev/shm%s",
		      d.segment);
	ck_assert_int_eq(n, 1);
	ck_assert_msg(base % HUGE_ALIGN == 0, "libcarmy maps the segment at "
		      "%#" PRIxPTR ", not on a 2 MiB boundary", base);
	ck_assert_int_eq(hugepage_mapped((const void *)base), pmd);
	return pmd;
}

/* ------------------------------------------------------------ the log */

struct seg_line {
	unsigned long mib;	/* the segment's size */
	char tail[160];		/* what follows "and read in S s" */
};

/*
 * Wait for the nth line (from 1) of carmyd's log saying that it has the
 * segment's pages verb ("zeroed": a new segment, "mapped": one it
 * attached to) and read, and parse it.
 */
static void await_segment_line(const char *verb, int nth, struct seg_line *l)
{
	char what[48], line[512];
	const char *p = NULL;
	int seen = 0, off = -1;
	FILE *f;

	snprintf(what, sizeof(what), " MiB %s and read in ", verb);
	ck_assert_msg(e2e_await_logged(logpath, what, nth - 1, HARNESS_WAIT_MS),
		      "carmyd did not log '%s' (%d times) within %d s", what,
		      nth, HARNESS_WAIT_MS / 1000);
	f = fopen(logpath, "r");
	ck_assert_ptr_nonnull(f);
	while (seen < nth && fgets(line, sizeof(line), f) != NULL)
		seen += strstr(line, what) != NULL;
	fclose(f);
	ck_assert_int_eq(seen, nth);
	line[strcspn(line, "\n")] = '\0';
	p = strstr(line, "segment: ");
	ck_assert_msg(p != NULL, "not the segment's line: %s", line);
	ck_assert_msg(sscanf(p, "segment: %lu MiB %*s and read in %*f s%n",
			     &l->mib, &off) == 1 && off > 0,
		      "cannot read: %s", line);
	ck_assert_uint_lt(strlen(p + off), sizeof(l->tail));
	strcpy(l->tail, p + off);
	e2e_note("%s", p);
}

/* The line ends as it must for pmd bytes of carmyd's mapping in huge
 * pages: "N MiB of it in huge pages", or, with none, where to read why
 * (carmyd says so of segments of 8 MiB and more: all of this file's). */
static void expect_clause(const struct seg_line *l, int64_t pmd)
{
	char want[96];

	ck_assert_uint_ge(l->mib, 8);
	if (pmd > 0)
		snprintf(want, sizeof(want), ", %" PRId64 " MiB of it in huge "
			 "pages", pmd >> 20);
	else
		snprintf(want, sizeof(want), "%s", SMALL_PAGES);
	ck_assert_str_eq(l->tail, want);
}

/* ------------------------------------------------------------ /dev/shm */

/*
 * How often the kernel has wanted a huge page for a file or a collapse and
 * found no 2 MiB piece of free memory (/proc/vmstat). carmyd takes huge
 * pages as a best effort and runs on 4 KiB ones where there are none, so a
 * test that finds this count moved cannot tell carmyd's part, and skips.
 */
static unsigned long long thp_fallbacks(void)
{
	static const char *const names[] = { "thp_file_fallback",
		"thp_file_fallback_charge", "thp_collapse_alloc_failed" };
	unsigned long long sum = 0, v;
	char name[64];
	FILE *f = fopen("/proc/vmstat", "r");

	if (f == NULL)
		return 0;
	while (fscanf(f, "%63s %llu", name, &v) == 2)
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (strcmp(name, names[i]) == 0)
				sum += v;
	fclose(f);
	return sum;
}

/* Is the running kernel at least major.minor? */
static bool kernel_at_least(int major, int minor)
{
	struct utsname u;
	int ma = 0, mi = 0;

	if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &ma, &mi) != 2)
		return false;
	return ma > major || (ma == major && mi >= minor);
}

/* Does shmem_enabled (the kernel's word over every tmpfs) select mode,
 * "[force]" or "[deny]"? Then a mount's huge= says nothing. */
static bool shmem_selects(const char *mode)
{
	char buf[256] = "";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled",
			"r");

	if (f == NULL)
		return false;	/* no THP: huge= is refused, or never */
	if (fgets(buf, sizeof(buf), f) == NULL)
		buf[0] = '\0';
	fclose(f);
	return strstr(buf, mode) != NULL;
}

/*
 * Put this process in a mount namespace of its own and mount a fresh tmpfs
 * on /dev/shm there with huge=huge: carmyd, started after as its child, and
 * libcarmy in this process see that one, and nothing else on the machine
 * does. Check runs each test in a process of its own (CK_FORK), which
 * takes the namespace with it when it ends. False, with a note, where that
 * cannot be done.
 */
static bool private_shm(const char *huge)
{
	const char *fork_env = getenv("CK_FORK");
	char data[64], line[512], last[512] = "";
	FILE *f;

	if (geteuid() != 0) {
		e2e_note("skipped: a tmpfs of our own on /dev/shm "
			 "(huge=%s) needs root", huge);
		return false;
	}
	if (fork_env != NULL && strcmp(fork_env, "no") == 0) {
		e2e_note("skipped: with CK_FORK=no the mount namespace would "
			 "outlive the test (huge=%s)", huge);
		return false;
	}
	if (shmem_selects("[force]") || shmem_selects("[deny]")) {
		e2e_note("skipped: shmem_enabled forces or denies huge pages "
			 "on every tmpfs, whatever huge=%s says", huge);
		return false;
	}
	if (unshare(CLONE_NEWNS) != 0) {
		e2e_note("skipped: unshare(CLONE_NEWNS): %s", strerror(errno));
		return false;
	}
	/* Private before anything is mounted: a shared / (systemd's) would
	 * carry the mount below out to the machine's /dev/shm. */
	ck_assert_msg(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0,
		      "mount --make-rprivate /: %s", strerror(errno));
	snprintf(data, sizeof(data), "mode=1777,huge=%s", huge);
	if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
		  data) != 0) {
		ck_assert_msg(errno == EINVAL, "mount -t tmpfs -o %s: %s", data,
			      strerror(errno));
		e2e_note("skipped: the kernel refuses a tmpfs with huge=%s "
			 "(no transparent huge pages)", huge);
		return false;
	}
	/* The one on top, the last in the list, is ours, as named. */
	f = fopen("/proc/self/mounts", "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, "tmpfs /dev/shm ", 15) == 0)
			strcpy(last, line);
	fclose(f);
	snprintf(data, sizeof(data), "huge=%s", huge);
	/* The kernel shows no huge= for never, its default. */
	ck_assert_msg(strcmp(huge, "never") == 0 ? strstr(last, "huge=") == NULL
						 : strstr(last, data) != NULL,
		      "/dev/shm is not our tmpfs: %s", last);
	return true;
}

/* ------------------------------------------------------------ calls */

/* Reserve and complete call, then reserve it again: a replay of it, under
 * the execution id it was reserved with (returned in exec). */
static void record(carmy_t *h, const struct carmy_call *call,
		   char exec[CARMY_EXECUTION_ID_LEN + 1])
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;

	ck_assert_int_eq(carmy_begin(h, call, &r), CARMY_RESERVED);
	ck_assert(e2e_exec_id_valid(r.execution_id));
	strcpy(exec, r.execution_id);
	ck_assert_int_eq(carmy_complete(h, &r, CARMY_STATUS_COMPLETED, "huge",
					4), 0);
	carmy_reservation_clear(&r);
}

static void expect_replay(carmy_t *h, const struct carmy_call *call,
			  const char *exec)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	int rc = carmy_begin(h, call, &r);

	ck_assert_msg(rc == CARMY_REPLAY, "%s", carmy_errname(rc));
	ck_assert_str_eq(r.execution_id, exec);
	ck_assert_int_eq(r.status, CARMY_STATUS_COMPLETED);
	ck_assert_uint_eq(r.result_len, 4);
	ck_assert_mem_eq(r.result, "huge", 4);
	carmy_reservation_clear(&r);
}

/*
 * carmyd on a /dev/shm that gives huge pages: its log tells of some, as
 * many as its smaps, and a call recorded through them replays, through
 * this process's mapping of the segment, which holds huge pages too.
 * Returns the call's execution id in exec; false, with a note, if the
 * kernel ran short of 2 MiB pieces meanwhile (thp_fallbacks()).
 */
static bool expect_huge_and_replay(const struct carmy_call *call,
				   char exec[CARMY_EXECUTION_ID_LEN + 1])
{
	const unsigned long long fallbacks = thp_fallbacks();
	struct seg_line l;
	int64_t pmd;

	e2e_start(&d, opts);
	await_segment_line("zeroed", 1, &l);
	if (thp_fallbacks() != fallbacks) {
		e2e_note("skipped: the kernel found no free 2 MiB pieces for "
			 "some huge pages (/proc/vmstat), so carmyd's are "
			 "partly 4 KiB: %s", l.tail);
		return false;
	}
	pmd = carmyd_pmd();
	ck_assert_msg(pmd > 0, "carmyd has no huge pages on a tmpfs that "
		      "gives them");
	expect_clause(&l, pmd);
	c = e2e_connect(&d);
	record(c, call, exec);
	expect_replay(c, call, exec);
	pmd = own_pmd();
	e2e_note("this process maps %" PRId64 " MiB of the segment with huge "
		 "pages", pmd >> 20);
	ck_assert_int_gt(pmd, 0);
	return true;
}

/* ------------------------------------------------------------ tests */

/* On /dev/shm as the machine has it, whichever way: the log's word agrees
 * with the kernel's. */
START_TEST(test_log_tells_the_machines_pages)
{
	struct seg_line l;
	int64_t pmd;

	e2e_start(&d, opts);
	await_segment_line("zeroed", 1, &l);
	pmd = carmyd_pmd();
	e2e_note("carmyd maps %" PRId64 " MiB of the segment with huge pages",
		 pmd >> 20);
	expect_clause(&l, pmd);
}
END_TEST

/* huge=within_size: the pages within the file's size (which carmyd sets
 * before posix_fallocate()) are huge as they are allocated. A restart on
 * the surviving segment maps them huge again and replays what was
 * recorded. */
START_TEST(test_within_size_gives_huge_pages_across_a_restart)
{
	struct carmy_call call = E2E_CALL("p", "s", "huge-within");
	char exec[CARMY_EXECUTION_ID_LEN + 1];
	struct seg_line l;
	int64_t pmd;

	if (!private_shm("within_size") || !expect_huge_and_replay(&call, exec))
		return;
	carmy_close(c);
	c = NULL;

	e2e_kill9(&d);
	e2e_restart(&d, opts);
	await_segment_line("mapped", 1, &l);
	/* Attached, not made anew. */
	ck_assert_int_eq(e2e_logged(logpath, " MiB zeroed and read in "), 1);
	pmd = carmyd_pmd();
	ck_assert_int_gt(pmd, 0);
	expect_clause(&l, pmd);
	c = e2e_connect(&d);
	expect_replay(c, &call, exec);
}
END_TEST

/* huge=advise: posix_fallocate() allocates 4 KiB pages (no mapping's
 * advice reaches it), and carmyd's MADV_COLLAPSE makes them huge. */
START_TEST(test_advise_collapses_to_huge_pages)
{
	struct carmy_call call = E2E_CALL("p", "s", "huge-advise");
	char exec[CARMY_EXECUTION_ID_LEN + 1];

	if (!private_shm("advise"))
		return;
	(void)expect_huge_and_replay(&call, exec);
}
END_TEST

/* huge=never, as most systems mount /dev/shm: the pages are 4 KiB as
 * they are allocated, and carmyd's MADV_COLLAPSE makes them huge whatever
 * the mount says on Linux 6.18 (the mapping being on a 2 MiB boundary),
 * which is asked of it there unless the kernel ran short of 2 MiB pieces;
 * a kernel before may refuse. Either way the log tells the kernel's
 * account, and a call recorded through the segment replays. */
START_TEST(test_never_still_tells_the_kernels_pages)
{
	struct carmy_call call = E2E_CALL("p", "s", "huge-never");
	const unsigned long long fallbacks = thp_fallbacks();
	char exec[CARMY_EXECUTION_ID_LEN + 1];
	struct seg_line l;
	int64_t pmd;

	if (!private_shm("never"))
		return;
	e2e_start(&d, opts);
	await_segment_line("zeroed", 1, &l);
	pmd = carmyd_pmd();
	if (kernel_at_least(6, 18) && thp_fallbacks() == fallbacks)
		ck_assert_msg(pmd > 0, "Linux 6.18 or later, huge=never: "
			      "carmyd's collapse gave no huge pages");
	e2e_note("huge=never: carmyd maps %" PRId64 " MiB of the segment with "
		 "huge pages", pmd >> 20);
	expect_clause(&l, pmd);
	c = e2e_connect(&d);
	record(c, &call, exec);
	expect_replay(c, &call, exec);
	(void)own_pmd();
}
END_TEST

static Suite *huge_suite(void)
{
	Suite *s = suite_create("huge");
	TCase *tc = tcase_create("huge");

	e2e_guard(tc);
	tcase_add_unchecked_fixture(tc, logdir_make, logdir_remove);
	tcase_add_checked_fixture(tc, setup, teardown);
	/* A test waits up to HARNESS_WAIT_MS for each of carmyd's starts
	 * and each log line (three in the longest): the deadline that
	 * fails a test is theirs, not Check's. */
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_log_tells_the_machines_pages);
	tcase_add_test(tc, test_within_size_gives_huge_pages_across_a_restart);
	tcase_add_test(tc, test_advise_collapses_to_huge_pages);
	tcase_add_test(tc, test_never_still_tells_the_kernels_pages);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(huge_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0;
}
