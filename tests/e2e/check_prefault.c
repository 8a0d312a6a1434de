/*
 * check_prefault.c - carmy_connect() maps the segment's index (its ticket
 * and bucket arrays) into the process at once, so that reserves, which
 * touch it at random, take no page fault on it. Told from the process's
 * own page table (/proc/self/pagemap: bit 63, the page is present), which
 * the kernel fills when a page is mapped in and which no timing affects.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "tests/e2e/e2e.h"

#define CAPACITY "100000"	/* about 2.8 MiB of index: 700 pages */

static struct carmyd_proc d;

static void setup(void)
{
	static const char *const opts[] = { "--capacity", CAPACITY, NULL };

	e2e_start(&d, opts);
}

static void teardown(void)
{
	e2e_stop(&d);
}

/* Where this process maps carmyd's segment (d.segment, as shm_open()
 * names it: /dev/shm below), 0 if it does not. */
static uintptr_t segment_base(void)
{
	char line[512], path[96];
	uintptr_t base = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	ck_assert_ptr_nonnull(f);
	snprintf(path, sizeof(path), "/dev/shm%s", d.segment);
	while (base == 0 && fgets(line, sizeof(line), f) != NULL) {
		char *name = strchr(line, '/');
		uintptr_t lo;

		line[strcspn(line, "\n")] = '\0';
		if (name != NULL && strcmp(name, path) == 0 &&
		    sscanf(line, "%" SCNxPTR "-", &lo) == 1)
			base = lo;
	}
	fclose(f);
	return base;
}

/* How many of the pages of [a, b) this process has mapped in; *pages
 * says how many there are. */
static size_t present_pages(uintptr_t a, uintptr_t b, size_t *pages)
{
	const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	size_t n = 0;
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	*pages = 0;
	for (uintptr_t p = a & ~(page - 1); p < b; p += page) {
		uint64_t e;

		ck_assert_int_eq(pread(fd, &e, sizeof(e),
				       (off_t)(p / page * sizeof(e))),
				 (ssize_t)sizeof(e));
		n += (e >> 63) & 1;
		(*pages)++;
	}
	close(fd);
	return n;
}

/* Right after connect, before any call, every page of the index is in
 * this process's page table. */
START_TEST(test_connect_maps_the_whole_index)
{
	const struct shm_header *h;
	size_t pages, present;
	uintptr_t base;
	carmy_t *c;

	ck_assert_uint_eq(segment_base(), 0);
	c = e2e_connect(&d);
	base = segment_base();
	ck_assert_uint_ne(base, 0);
	h = (const struct shm_header *)base;
	ck_assert_uint_eq(h->sh_capacity, strtoul(CAPACITY, NULL, 10));
	present = present_pages(base + h->sh_tickets_off,
				base + h->sh_buckets_off +
					(uintptr_t)h->sh_nbuckets *
						sizeof(uint64_t),
				&pages);
	ck_assert_uint_gt(pages, 600);
	ck_assert_uint_eq(present, pages);
	carmy_close(c);
}
END_TEST

static Suite *prefault_suite(void)
{
	Suite *s = suite_create("prefault");
	TCase *tc = tcase_create("prefault");

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_connect_maps_the_whole_index);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(prefault_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0;
}
