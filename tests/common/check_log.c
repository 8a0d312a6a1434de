/*
 * check_log.c - carmyd's log lines (common/log.c): whether stderr is the
 * journal ($JOURNAL_STREAM) and the syslog level prefix that follows,
 * read back from a real pipe standing in for journald's stream.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

#include "common/log.h"

/* "DEV:INO" of fd, as systemd writes $JOURNAL_STREAM. */
static const char *stream_of(int fd)
{
	static char buf[64];
	struct stat st;

	ck_assert_int_eq(fstat(fd, &st), 0);
	snprintf(buf, sizeof(buf), "%llu:%llu",
		 (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
	return buf;
}

START_TEST(test_detection)
{
	static const char *const bad[] = {
		"", "1", "1:", ":1", "x:1", "1:x", "1:2x", "1:2 ", " 1:2",
		"-1:2", "1;2", "99999999999999999999999:1",
	};
	int p[2], q[2];
	char near[64];

	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(pipe(q), 0);
	ck_assert(log_is_journal(stream_of(p[1]), p[1]));
	/* Another stream: a descendant whose stderr was redirected. */
	ck_assert(!log_is_journal(stream_of(q[1]), p[1]));
	ck_assert(!log_is_journal(NULL, p[1]));
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		ck_assert_msg(!log_is_journal(bad[i], p[1]), "'%s' taken",
			      bad[i]);
	/* The same device with the next inode is not the stream. */
	snprintf(near, sizeof(near), "%s1", stream_of(p[1]));
	ck_assert(!log_is_journal(near, p[1]));
	ck_assert(!log_is_journal(stream_of(p[1]), -1));
}
END_TEST

/* One line logged at level with stderr on a pipe, $JOURNAL_STREAM naming
 * that pipe when journal; the line read back into line. */
static void logged(int level, int journal, char *line, size_t size)
{
	int p[2], saved;
	ssize_t n;

	ck_assert_int_eq(pipe(p), 0);
	saved = dup(STDERR_FILENO);
	ck_assert_int_eq(dup2(p[1], STDERR_FILENO), STDERR_FILENO);
	if (journal)
		setenv("JOURNAL_STREAM", stream_of(p[1]), 1);
	else
		unsetenv("JOURNAL_STREAM");
	log_detect_journal();
	log_level = LOG_DEBUG;
	log_msg(level, "hello %d", 42);
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(p[1]);
	n = read(p[0], line, size - 1);
	ck_assert_int_gt(n, 0);
	line[n] = '\0';
	close(p[0]);
}

START_TEST(test_prefixes)
{
	static const struct { int level; const char *prefix, *name; } want[] = {
		{ LOG_ERROR, "<3>", " error: hello 42\n" },
		{ LOG_WARN, "<4>", " warn: hello 42\n" },
		{ LOG_INFO, "<6>", " info: hello 42\n" },
		{ LOG_DEBUG, "<7>", " debug: hello 42\n" },
	};
	char line[1100];

	for (size_t i = 0; i < sizeof(want) / sizeof(*want); i++) {
		logged(want[i].level, 1, line, sizeof(line));
		ck_assert_msg(strncmp(line, want[i].prefix, 3) == 0 &&
			      line[3] >= '0' && line[3] <= '9',
			      "to the journal: '%s'", line);
		ck_assert_ptr_nonnull(strstr(line, want[i].name));
		/* Not the journal: the line as it always was. */
		logged(want[i].level, 0, line, sizeof(line));
		ck_assert_msg(line[0] >= '0' && line[0] <= '9',
			      "to a file: '%s'", line);
		ck_assert_ptr_nonnull(strstr(line, want[i].name));
	}
}
END_TEST

START_TEST(test_stderr_elsewhere)
{
	char line[1100];
	int p[2], saved;
	ssize_t n;

	/* $JOURNAL_STREAM names another stream (inherited, and stderr was
	 * redirected since): no prefix. */
	ck_assert_int_eq(pipe(p), 0);
	saved = dup(STDERR_FILENO);
	setenv("JOURNAL_STREAM", stream_of(saved), 1);
	ck_assert_int_eq(dup2(p[1], STDERR_FILENO), STDERR_FILENO);
	log_detect_journal();
	log_msg(LOG_WARN, "x");
	dup2(saved, STDERR_FILENO);
	close(p[1]);
	n = read(p[0], line, sizeof(line) - 1);
	ck_assert_int_gt(n, 0);
	line[n] = '\0';
	ck_assert_msg(line[0] != '<', "'%s'", line);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tcase_create("log");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_detection);
	tcase_add_test(tc, test_prefixes);
	tcase_add_test(tc, test_stderr_elsewhere);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
