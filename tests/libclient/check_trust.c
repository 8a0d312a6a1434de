/*
 * check_trust.c - the checks a client makes of the carmyd it finds
 * (libclient/trust.c), one rule at a time, on real directories, links and
 * sockets. The end-to-end cases, with real carmyds run as other users, are
 * in tests/e2e/check_trust.c.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>

#include "carmy.h"
#include "libclient/trust.h"

#define STRANGER 4243		/* a uid nobody here runs as */
#define STRANGERS 4244		/* a gid nobody here is in */

static char base[64];
static char why[TRUST_WHY_MAX];

static void setup(void)
{
	snprintf(base, sizeof(base), "/tmp/carmy-trust.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(base));
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	ck_assert_int_eq(system(cmd), 0);
}

/* base/rel made with mode (exactly, whatever the umask). */
static void make_dir(const char *rel, mode_t mode)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", base, rel);
	ck_assert_int_eq(mkdir(p, 0700), 0);
	ck_assert_int_eq(chmod(p, mode), 0);
}

/* trust_socket_dir() for base/rel/carmyd.sock under our own policy. */
static int check_dir(const char *rel)
{
	struct trust t;
	char p[PATH_MAX];

	ck_assert_int_eq(trust_parse(&t, geteuid(), NULL, why, sizeof(why)), 0);
	snprintf(p, sizeof(p), "%s/%s/carmyd.sock", base, rel);
	why[0] = '\0';
	return trust_socket_dir(&t, p, why, sizeof(why));
}

static bool is_root(const char *what)
{
	if (geteuid() == 0)
		return true;
	fflush(stdout);
	printf("# skipped: %s needs root, to chown to another uid\n", what);
	fflush(stdout);
	return false;
}

/* ------------------------------------------------------------ policy */

START_TEST(test_policy_is_self_root_and_the_listed_users)
{
	struct trust t;

	ck_assert_int_eq(trust_parse(&t, 4242, "1001, root,,65534 1001",
				     why, sizeof(why)), 0);
	ck_assert(trust_uid(&t, 4242));
	ck_assert(trust_uid(&t, 0));
	ck_assert(trust_uid(&t, 1001));
	ck_assert(trust_uid(&t, 65534));
	ck_assert(!trust_uid(&t, 1002));
	ck_assert(!trust_uid(&t, STRANGER));
	ck_assert_uint_eq(t.tr_n, 4);
	ck_assert_int_eq(trust_parse(&t, 4242, NULL, why, sizeof(why)), 0);
	ck_assert_uint_eq(t.tr_n, 2);
}
END_TEST

START_TEST(test_policy_with_an_unknown_user_is_untrusted)
{
	struct trust t;

	ck_assert_int_eq(trust_parse(&t, 4242, "root,no-such-carmy-user", why,
				     sizeof(why)), CARMY_EUNTRUSTED);
	ck_assert_msg(strstr(why, "'no-such-carmy-user'") != NULL, "%s", why);
	ck_assert_int_eq(trust_parse(&t, 4242, "12x", why, sizeof(why)),
			 CARMY_EUNTRUSTED);
}
END_TEST

START_TEST(test_policy_of_more_than_the_maximum_users_is_untrusted)
{
	char spec[256] = "";
	struct trust t;

	for (int i = 0; i <= TRUST_USERS_MAX; i++)
		snprintf(spec + strlen(spec), sizeof(spec) - strlen(spec),
			 "%d,", 5000 + i);
	ck_assert_int_eq(trust_parse(&t, 4242, spec, why, sizeof(why)),
			 CARMY_EUNTRUSTED);
}
END_TEST

/* ------------------------------------------------------------ directory */

START_TEST(test_own_owner_only_directory_is_trusted)
{
	make_dir("ok", 0700);
	ck_assert_int_eq(check_dir("ok"), 0);
	make_dir("readable", 0755);
	ck_assert_int_eq(check_dir("readable"), 0);
}
END_TEST

START_TEST(test_directory_others_or_group_can_write_is_untrusted)
{
	make_dir("all", 0777);
	ck_assert_int_eq(check_dir("all"), CARMY_EUNTRUSTED);
	ck_assert_msg(strstr(why, "mode 0777") != NULL, "%s", why);
	make_dir("sticky", 01777);
	ck_assert_int_eq(check_dir("sticky"), CARMY_EUNTRUSTED);
	make_dir("group", 0770);
	ck_assert_int_eq(check_dir("group"), CARMY_EUNTRUSTED);
	ck_assert_msg(strstr(why, "its group") != NULL, "%s", why);
}
END_TEST

START_TEST(test_symlinked_directory_is_untrusted)
{
	char link[PATH_MAX], target[PATH_MAX];

	make_dir("real", 0700);
	snprintf(target, sizeof(target), "%s/real", base);
	snprintf(link, sizeof(link), "%s/link", base);
	ck_assert_int_eq(symlink(target, link), 0);
	ck_assert_int_eq(check_dir("link"), CARMY_EUNTRUSTED);
	ck_assert_msg(strstr(why, "symbolic link") != NULL, "%s", why);
	/* To a root-owned sticky 1777 directory, as /tmp is. */
	snprintf(link, sizeof(link), "%s/tmp", base);
	ck_assert_int_eq(symlink("/tmp", link), 0);
	ck_assert_int_eq(check_dir("tmp"), CARMY_EUNTRUSTED);
	ck_assert_msg(strstr(why, "symbolic link") != NULL, "%s", why);
}
END_TEST

START_TEST(test_tmp_itself_is_untrusted_as_the_sockets_directory)
{
	struct trust t;

	ck_assert_int_eq(trust_parse(&t, geteuid(), NULL, why, sizeof(why)), 0);
	ck_assert_int_eq(trust_socket_dir(&t, "/tmp/carmyd.sock", why,
					  sizeof(why)), CARMY_EUNTRUSTED);
	ck_assert_msg(strstr(why, "/tmp") != NULL, "%s", why);
}
END_TEST

START_TEST(test_missing_directory_is_unavailable)
{
	ck_assert_int_eq(check_dir("none"), CARMY_EUNAVAILABLE);
	make_dir("file-parent", 0700);
	ck_assert_int_eq(check_dir("file-parent/none/deeper"),
			 CARMY_EUNAVAILABLE);
}
END_TEST

START_TEST(test_directory_that_is_a_file_is_untrusted)
{
	char p[PATH_MAX];
	FILE *f;

	snprintf(p, sizeof(p), "%s/file", base);
	f = fopen(p, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	ck_assert_int_eq(check_dir("file"), CARMY_EUNTRUSTED);
	ck_assert_msg(strstr(why, "not a directory") != NULL, "%s", why);
}
END_TEST

START_TEST(test_relative_path_is_checked_in_the_working_directory)
{
	char p[PATH_MAX];
	struct trust t;

	ck_assert_int_eq(trust_parse(&t, geteuid(), NULL, why, sizeof(why)), 0);
	make_dir("ok", 0700);
	make_dir("all", 0777);
	snprintf(p, sizeof(p), "%s/ok", base);
	ck_assert_int_eq(chdir(p), 0);
	ck_assert_int_eq(trust_socket_dir(&t, "carmyd.sock", why, sizeof(why)),
			 0);
	ck_assert_int_eq(trust_socket_dir(&t, "../all/carmyd.sock", why,
					  sizeof(why)), CARMY_EUNTRUSTED);
	snprintf(p, sizeof(p), "%s/all", base);
	ck_assert_int_eq(chdir(p), 0);
	ck_assert_int_eq(trust_socket_dir(&t, "carmyd.sock", why, sizeof(why)),
			 CARMY_EUNTRUSTED);
	ck_assert_int_eq(chdir("/"), 0);
}
END_TEST

START_TEST(test_writable_ancestor_is_untrusted_unless_sticky)
{
	char p[PATH_MAX];

	make_dir("open", 0777);
	make_dir("open/sub", 0700);
	ck_assert_int_eq(check_dir("open/sub"), CARMY_EUNTRUSTED);
	ck_assert_msg(strstr(why, "above the socket's directory") != NULL,
		      "%s", why);
	snprintf(p, sizeof(p), "%s/open", base);
	ck_assert_int_eq(chmod(p, 01777), 0);
	ck_assert_int_eq(check_dir("open/sub"), 0);
}
END_TEST

START_TEST(test_directory_of_another_user_is_trusted_only_when_listed)
{
	char p[PATH_MAX], spec[16];
	struct trust t;

	if (!is_root("a directory of another user"))
		return;
	make_dir("theirs", 0700);
	snprintf(p, sizeof(p), "%s/theirs", base);
	ck_assert_int_eq(chown(p, STRANGER, STRANGERS), 0);
	ck_assert_int_eq(check_dir("theirs"), CARMY_EUNTRUSTED);
	ck_assert_msg(strstr(why, "uid 4243") != NULL, "%s", why);
	snprintf(spec, sizeof(spec), "%d", STRANGER);
	ck_assert_int_eq(trust_parse(&t, geteuid(), spec, why, sizeof(why)), 0);
	strcat(p, "/carmyd.sock");
	ck_assert_int_eq(trust_socket_dir(&t, p, why, sizeof(why)), 0);
	/* And an ancestor of theirs. */
	make_dir("theirs/mine", 0700);
	ck_assert_int_eq(check_dir("theirs/mine"), CARMY_EUNTRUSTED);
	ck_assert_msg(strstr(why, "above the socket's directory") != NULL,
		      "%s", why);
}
END_TEST

/* ------------------------------------------------------------ peer */

START_TEST(test_peer_is_trusted_only_as_a_trusted_uid)
{
	struct trust t;
	uid_t peer = 12345;
	int sv[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ck_assert_int_eq(trust_parse(&t, geteuid(), NULL, why, sizeof(why)), 0);
	ck_assert_int_eq(trust_peer(&t, sv[0], "here", &peer, why,
				    sizeof(why)), 0);
	ck_assert_uint_eq(peer, geteuid());
	/* A policy that trusts neither us nor root. */
	t.tr_uids[0] = STRANGER;
	t.tr_n = 1;
	ck_assert_int_eq(trust_peer(&t, sv[0], "here", &peer, why,
				    sizeof(why)), CARMY_EUNTRUSTED);
	ck_assert_msg(strstr(why, "the carmyd on here runs as uid") != NULL,
		      "%s", why);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* ------------------------------------------------------------ segment */

static struct stat seg(mode_t type_mode, uid_t uid, gid_t gid)
{
	struct stat st;

	memset(&st, 0, sizeof(st));
	st.st_mode = type_mode;
	st.st_uid = uid;
	st.st_gid = gid;
	return st;
}

START_TEST(test_segment_must_be_the_peers_and_not_writable_by_others)
{
	struct trust t;
	struct stat st;

	ck_assert_int_eq(trust_parse(&t, 4242, "1001", why, sizeof(why)), 0);
	st = seg(S_IFREG | 0600, 1001, 1001);
	ck_assert_int_eq(trust_segment(&t, &st, 1001, "/s", why, sizeof(why)),
			 0);
	ck_assert_int_eq(trust_segment(&t, &st, (uid_t)-1, "/s", why,
				       sizeof(why)), 0);
	/* Another trusted uid's (our own) is not the peer's. */
	ck_assert_int_eq(trust_segment(&t, &st, 4242, "/s", why, sizeof(why)),
			 CARMY_EUNTRUSTED);
	ck_assert_msg(strstr(why, "belongs to uid 1001") != NULL, "%s", why);
	/* Root listened (systemd handed carmyd the socket): any trusted
	 * uid's, and only a trusted uid's. */
	ck_assert_int_eq(trust_segment(&t, &st, 0, "/s", why, sizeof(why)),
			 0);
	st = seg(S_IFREG | 0600, STRANGER, 1001);
	ck_assert_int_eq(trust_segment(&t, &st, (uid_t)-1, "/s", why,
				       sizeof(why)), CARMY_EUNTRUSTED);
	ck_assert_int_eq(trust_segment(&t, &st, 0, "/s", why, sizeof(why)),
			 CARMY_EUNTRUSTED);
	ck_assert_msg(strstr(why, "not to us") != NULL, "%s", why);
	st = seg(S_IFREG | 0602, 1001, 1001);
	ck_assert_int_eq(trust_segment(&t, &st, 1001, "/s", why, sizeof(why)),
			 CARMY_EUNTRUSTED);
	ck_assert_msg(strstr(why, "anyone can write") != NULL, "%s", why);
	st = seg(S_IFDIR | 0700, 1001, 1001);
	ck_assert_int_eq(trust_segment(&t, &st, 1001, "/s", why, sizeof(why)),
			 CARMY_EUNTRUSTED);
}
END_TEST

START_TEST(test_group_writable_segment_needs_our_group_or_our_own)
{
	struct trust t;
	struct stat st;

	ck_assert_int_eq(trust_parse(&t, geteuid(), "1001", why, sizeof(why)),
			 0);
	/* A group we are in: a --group carmyd we are a client of. */
	st = seg(S_IFREG | 0660, 1001, getegid());
	ck_assert_int_eq(trust_segment(&t, &st, 1001, "/s", why, sizeof(why)),
			 0);
	/* One we are not in: refused to a user (4321 here, whoever runs
	 * this), not to root, an operator who may write it anyway. */
	st = seg(S_IFREG | 0660, 1001, STRANGERS);
	ck_assert_int_eq(trust_parse(&t, 4321, "1001", why, sizeof(why)), 0);
	ck_assert_int_eq(trust_segment(&t, &st, 1001, "/s", why, sizeof(why)),
			 CARMY_EUNTRUSTED);
	ck_assert_msg(strstr(why, "group 4244") != NULL, "%s", why);
	ck_assert_int_eq(trust_parse(&t, 0, "1001", why, sizeof(why)), 0);
	ck_assert_int_eq(trust_segment(&t, &st, 1001, "/s", why, sizeof(why)),
			 0);
	/* Our own, shared with whichever group we chose. */
	ck_assert_int_eq(trust_parse(&t, geteuid(), "1001", why, sizeof(why)),
			 0);
	st = seg(S_IFREG | 0660, geteuid(), STRANGERS);
	ck_assert_int_eq(trust_segment(&t, &st, geteuid(), "/s", why,
				       sizeof(why)), 0);
}
END_TEST

static Suite *trust_suite(void)
{
	Suite *s = suite_create("trust");
	TCase *tc = tcase_create("trust");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_policy_is_self_root_and_the_listed_users);
	tcase_add_test(tc, test_policy_with_an_unknown_user_is_untrusted);
	tcase_add_test(tc, test_policy_of_more_than_the_maximum_users_is_untrusted);
	tcase_add_test(tc, test_own_owner_only_directory_is_trusted);
	tcase_add_test(tc, test_directory_others_or_group_can_write_is_untrusted);
	tcase_add_test(tc, test_symlinked_directory_is_untrusted);
	tcase_add_test(tc, test_tmp_itself_is_untrusted_as_the_sockets_directory);
	tcase_add_test(tc, test_missing_directory_is_unavailable);
	tcase_add_test(tc, test_directory_that_is_a_file_is_untrusted);
	tcase_add_test(tc, test_relative_path_is_checked_in_the_working_directory);
	tcase_add_test(tc, test_writable_ancestor_is_untrusted_unless_sticky);
	tcase_add_test(tc, test_directory_of_another_user_is_trusted_only_when_listed);
	tcase_add_test(tc, test_peer_is_trusted_only_as_a_trusted_uid);
	tcase_add_test(tc, test_segment_must_be_the_peers_and_not_writable_by_others);
	tcase_add_test(tc, test_group_writable_segment_needs_our_group_or_our_own);
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
