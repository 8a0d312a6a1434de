/*
 * check_security.c - what carmyd owes to everyone else when one peer is
 * careless or hostile: owner-only socket and segment; completions accepted
 * only from the connection that owns the reservation; malformed, truncated,
 * oversized or hostile msgpack gets that sender an error or a disconnect
 * and harms no one; and bytes scribbled over the segment never crash
 * carmyd.
 *
 * The raw peer here speaks the wire protocol by hand (msgpack-c's packer
 * for well-formed messages, literal bytes for hostile ones) on its own Unix
 * socket, and can reserve directly in the segment with its owner id, as
 * libcarmy does.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <msgpack.h>

#include "libclient/reservation.h"
#include "tests/e2e/e2e.h"

#define MAX_RESULT 1024
/* carmyd's cap: max-result + overhead, where the overhead is room for a
 * RESOLVE's identity (three parts of up to 256 bytes) and its fields. */
#define MSG_CAP (MAX_RESULT + 3 * (256 + 5) + 128)
/* A reply (or a hang-up) must come: this bounds a failure only. */
#define REPLY_TIMEOUT_MS HARNESS_WAIT_MS

enum { T_ERROR = 0, T_HELLO = 1, T_COMPLETE = 2 };
/* The protocol spoken here by hand, as a hostile peer would (wire.h is
 * deliberately not used): its version, and the HELLO reply of 9 fields. */
#define PROTOCOL_VERSION 5

static struct carmyd_proc d;
static carmy_t *good;	/* a bystander connected before any mischief */

static void setup(void)
{
	static const char *const opts[] = { "--capacity", "64",
					    "--max-result", "1024", NULL };

	e2e_start(&d, opts);
	good = e2e_connect(&d);
}

static void teardown(void)
{
	carmy_close(good);
	good = NULL;
	e2e_stop(&d);
}

/* ------------------------------------------------------------ raw peer */

struct raw {
	int fd;
	uint32_t owner;
	uint32_t cursor;	/* where its next ticket search starts */
	char shm_name[64];
	uint32_t max_result;
};

/* One reply from carmyd. */
struct reply {
	int type;
	int code;		/* ERROR, COMPLETE; HELLO: its code */
	uint32_t owner;		/* HELLO */
	char shm_name[64];	/* HELLO */
	uint32_t max_result;	/* HELLO */
};

static int raw_dial(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	strcpy(sa.sun_path, d.socket);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Send everything, or stop when carmyd has hung up. Returns 0 or -1. */
static int raw_send(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static uint64_t obj_uint(const msgpack_object *o)
{
	return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
}

static int obj_int(const msgpack_object *o)
{
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		return (int)o->via.i64;
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
		return (int)o->via.u64;
	return 12345;	/* not an integer: no code matches it */
}

/*
 * Read one reply within timeout_ms. Returns 1 with *rep filled, 0 if
 * carmyd closed the connection (EOF or reset) first, -1 on timeout.
 * Asserts that whatever arrives is one well-formed reply.
 */
static int raw_reply(int fd, int timeout_ms, struct reply *rep)
{
	uint64_t deadline = harness_now_ns() + (uint64_t)timeout_ms * 1000000u;
	uint8_t buf[512];
	size_t have = 0;

	memset(rep, 0, sizeof(*rep));
	for (;;) {
		int64_t left = (int64_t)(deadline - harness_now_ns()) / 1000000;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		msgpack_unpacked up;
		size_t off = 0;
		ssize_t got;
		int ur;

		if (left < 0 || poll(&pfd, 1, (int)left) <= 0)
			return -1;
		got = recv(fd, buf + have, sizeof(buf) - have, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			ck_assert_msg(have == 0, "carmyd sent half a reply");
			return 0;
		}
		have += (size_t)got;
		msgpack_unpacked_init(&up);
		ur = msgpack_unpack_next(&up, (const char *)buf, have, &off);
		if (ur == MSGPACK_UNPACK_CONTINUE) {
			msgpack_unpacked_destroy(&up);
			ck_assert_uint_lt(have, sizeof(buf));
			continue;
		}
		ck_assert_int_eq(ur, MSGPACK_UNPACK_SUCCESS);
		ck_assert_int_eq(up.data.type, MSGPACK_OBJECT_ARRAY);
		ck_assert_uint_ge(up.data.via.array.size, 2);
		rep->type = (int)obj_uint(&up.data.via.array.ptr[0]);
		rep->code = obj_int(&up.data.via.array.ptr[1]);
		if (rep->type == T_HELLO) {
			const msgpack_object *a = up.data.via.array.ptr;

			ck_assert_uint_eq(up.data.via.array.size, 9);
			ck_assert_int_eq(a[3].type, MSGPACK_OBJECT_STR);
			ck_assert_uint_lt(a[3].via.str.size, sizeof(rep->shm_name));
			rep->owner = (uint32_t)obj_uint(&a[2]);
			memcpy(rep->shm_name, a[3].via.str.ptr, a[3].via.str.size);
			rep->max_result = (uint32_t)obj_uint(&a[4]);
		}
		msgpack_unpacked_destroy(&up);
		ck_assert_msg(off == have, "bytes after a reply");
		return 1;
	}
}

static void put_hello(msgpack_sbuffer *sb, uint64_t version, uint64_t layout)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_uint8(&pk, T_HELLO);
	msgpack_pack_uint64(&pk, version);
	msgpack_pack_uint64(&pk, layout);
}

static void put_complete(msgpack_sbuffer *sb, int64_t entry,
			 const uint8_t *exec, size_t exec_len, int status,
			 int code, const void *result, size_t len)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 6);
	msgpack_pack_uint8(&pk, T_COMPLETE);
	msgpack_pack_int64(&pk, entry);
	msgpack_pack_bin(&pk, exec_len);
	msgpack_pack_bin_body(&pk, exec, exec_len);
	msgpack_pack_int32(&pk, status);
	msgpack_pack_int32(&pk, code);
	msgpack_pack_bin(&pk, len);
	if (len > 0)
		msgpack_pack_bin_body(&pk, result, len);
}

/* Connect and say HELLO as libcarmy would. */
static void raw_open(struct raw *rw)
{
	msgpack_sbuffer sb;
	struct reply rep;

	memset(rw, 0, sizeof(*rw));
	rw->fd = raw_dial();
	msgpack_sbuffer_init(&sb);
	put_hello(&sb, PROTOCOL_VERSION, shm_layout_signature());
	ck_assert_int_eq(raw_send(rw->fd, sb.data, sb.size), 0);
	msgpack_sbuffer_destroy(&sb);
	ck_assert_int_eq(raw_reply(rw->fd, REPLY_TIMEOUT_MS, &rep), 1);
	ck_assert_int_eq(rep.type, T_HELLO);
	ck_assert_int_eq(rep.code, 0);
	ck_assert_uint_ge(rep.owner, SHM_OWNER_MIN);
	ck_assert_uint_eq(rep.max_result, MAX_RESULT);
	rw->owner = rep.owner;
	strcpy(rw->shm_name, rep.shm_name);
}

/* Read and discard until carmyd hangs up. Returns 0, or -1 on timeout. */
static int drain_until_eof(int fd, int timeout_ms)
{
	uint64_t deadline = harness_now_ns() + (uint64_t)timeout_ms * 1000000u;
	uint8_t buf[4096];

	for (;;) {
		int64_t left = (int64_t)(deadline - harness_now_ns()) / 1000000;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t got;

		if (left < 0 || poll(&pfd, 1, (int)left) <= 0)
			return -1;
		got = recv(fd, buf, sizeof(buf), 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return 0;
	}
}

/* Send a COMPLETE and return carmyd's code for it. */
static int raw_complete(struct raw *rw, int64_t entry, const uint8_t *exec,
			int status, int code, const void *result, size_t len)
{
	msgpack_sbuffer sb;
	struct reply rep;

	msgpack_sbuffer_init(&sb);
	put_complete(&sb, entry, exec, SHM_EXEC_LEN, status, code, result, len);
	ck_assert_int_eq(raw_send(rw->fd, sb.data, sb.size), 0);
	msgpack_sbuffer_destroy(&sb);
	ck_assert_int_eq(raw_reply(rw->fd, REPLY_TIMEOUT_MS, &rep), 1);
	ck_assert_int_eq(rep.type, T_COMPLETE);
	return rep.code;
}

static uint64_t copy_exec(void *arg, uint8_t out[SHM_EXEC_LEN])
{
	memcpy(out, arg, SHM_EXEC_LEN);
	return 1;
}

/* Reserve rid directly in the segment under the raw peer's owner id. */
static void raw_reserve(struct raw *rw, struct shm_view *v, const char *rid,
			uint8_t exec[SHM_EXEC_LEN], struct shm_found *f)
{
	uint8_t fp[SHM_FP_LEN];
	struct shm_claim claim = { .owner = rw->owner, .pid = (uint32_t)getpid(),
				   .fp = fp, .make_exec = copy_exec,
				   .arg = exec, .cursor = &rw->cursor };
	struct shm_key k;

	memset(fp, 0xab, sizeof(fp));
	for (int i = 0; i < SHM_EXEC_LEN; i++)
		exec[i] = (uint8_t)(rid[0] + i * 17);
	ck_assert_int_eq(shm_key_init(&k, v->seed, "raw", 3, "s", 1, rid,
				      strlen(rid)), 0);
	ck_assert_int_eq(shm_reserve(v, &k, &claim, f), SHM_OUT_RESERVED);
}

/* ------------------------------------------------------------ bystander */

/* The bystander reserves, completes and replays a new identity. */
static void expect_bystander_works(const char *what)
{
	static unsigned n;
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call;
	char rid[48];
	int rc;

	snprintf(rid, sizeof(rid), "bystander-%u", n++);
	call = E2E_CALL("good", "s", rid);
	ck_assert_msg(e2e_alive(&d), "carmyd died after %s", what);
	rc = carmy_begin(good, &call, &r);
	ck_assert_msg(rc == CARMY_RESERVED, "after %s: begin: %s", what,
		      carmy_errname(rc));
	rc = carmy_complete(good, &r, CARMY_STATUS_COMPLETED, rid, strlen(rid));
	ck_assert_msg(rc == 0, "after %s: complete: %s", what, carmy_errname(rc));
	ck_assert_int_eq(carmy_begin(good, &call, &r), CARMY_REPLAY);
	ck_assert_str_eq(r.result, rid);
	carmy_reservation_clear(&r);
}

/* ------------------------------------------------------------ permissions */

START_TEST(test_socket_and_segment_are_owner_only)
{
	char path[128];
	struct stat st;

	ck_assert_int_eq(stat(d.socket, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	ck_assert_msg((st.st_mode & 07777) == 0600, "socket mode %o",
		      st.st_mode & 07777);
	ck_assert_uint_eq(st.st_uid, getuid());

	snprintf(path, sizeof(path), "/dev/shm%s", d.segment);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert(S_ISREG(st.st_mode));
	ck_assert_msg((st.st_mode & 07777) == 0600, "segment mode %o",
		      st.st_mode & 07777);
	ck_assert_uint_eq(st.st_uid, getuid());
}
END_TEST

/* Also when carmyd creates the socket's directory itself, and whatever the
 * umask of whoever starts it. */
START_TEST(test_default_directory_and_files_are_owner_only_under_a_loose_umask)
{
	static char sock[160];
	static const char *opts[] = { "--socket", sock, NULL };
	struct carmyd_proc loose;
	char path[256], dir[140];
	struct stat st;
	mode_t old;

	ck_assert_uint_lt(strlen(d.dir) + 16, sizeof(dir));
	strcpy(dir, d.dir);
	strcat(dir, "/made-by-carmyd");
	strcpy(sock, dir);
	strcat(sock, "/carmyd.sock");
	old = umask(0);
	e2e_start(&loose, opts);
	umask(old);
	ck_assert_int_eq(stat(dir, &st), 0);
	ck_assert_msg((st.st_mode & 07777) == 0700, "directory mode %o",
		      st.st_mode & 07777);
	ck_assert_int_eq(stat(sock, &st), 0);
	ck_assert_msg((st.st_mode & 07777) == 0600, "socket mode %o",
		      st.st_mode & 07777);
	snprintf(path, sizeof(path), "/dev/shm%s", loose.segment);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_msg((st.st_mode & 07777) == 0600, "segment mode %o",
		      st.st_mode & 07777);
	e2e_stop(&loose);
	snprintf(path, sizeof(path), "%s.lock", sock);
	unlink(path);
	unlink(sock);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* The documented way to share: --group makes socket and segment readable
 * and writable by that group, and still by nobody else. */
START_TEST(test_group_option_shares_socket_and_segment_with_the_group_only)
{
	static char group[64];
	static const char *const opts[] = { "--group", group, NULL };
	struct group *gr = getgrgid(getgid());
	struct carmyd_proc shared;
	char path[128];
	struct stat st;
	carmy_t *x;

	ck_assert_ptr_nonnull(gr);
	snprintf(group, sizeof(group), "%s", gr->gr_name);
	e2e_start(&shared, opts);
	ck_assert_int_eq(stat(shared.socket, &st), 0);
	ck_assert_msg((st.st_mode & 07777) == 0660, "socket mode %o",
		      st.st_mode & 07777);
	ck_assert_uint_eq(st.st_gid, getgid());
	snprintf(path, sizeof(path), "/dev/shm%s", shared.segment);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_msg((st.st_mode & 07777) == 0660, "segment mode %o",
		      st.st_mode & 07777);
	ck_assert_uint_eq(st.st_gid, getgid());
	x = e2e_connect(&shared);
	carmy_close(x);
	e2e_stop(&shared);
}
END_TEST

/* ------------------------------------------------------------ ownership */

START_TEST(test_completion_from_another_connection_is_not_owner)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation u = CARMY_RESERVATION_INIT;
	struct carmy_call call = E2E_CALL("p", "s", "owned-by-good");
	uint8_t exec[SHM_EXEC_LEN];
	struct raw rw;

	ck_assert_int_eq(carmy_begin(good, &call, &r), CARMY_RESERVED);
	e2e_exec_bytes(r.execution_id, exec);
	raw_open(&rw);
	/* Everything a thief could know, sent from the wrong connection. */
	for (int status = CARMY_STATUS_COMPLETED; status <= CARMY_STATUS_CANCELLED;
	     status++)
		ck_assert_int_eq(raw_complete(&rw, resv_entry(&r), exec, status, 0,
					      "stolen", 6), CARMY_ENOT_OWNER);
	/* Still running, still the owner's. */
	ck_assert_int_eq(carmy_begin(good, &call, &u), CARMY_EUNCERTAIN);
	ck_assert_int_eq(u.state, CARMY_STATE_RUNNING);
	ck_assert_str_eq(u.execution_id, r.execution_id);
	ck_assert_int_eq(carmy_complete(good, &r, CARMY_STATUS_COMPLETED, "mine", 4),
			 0);
	/* And once completed, still nobody else's to overwrite. */
	ck_assert_int_ne(raw_complete(&rw, resv_entry(&r), exec,
				      CARMY_STATUS_FAILED, 0, "late", 4), 0);
	ck_assert_int_eq(carmy_begin(good, &call, &u), CARMY_REPLAY);
	ck_assert_int_eq(u.status, CARMY_STATUS_COMPLETED);
	ck_assert_str_eq(u.result, "mine");
	/* Entries that do not exist. */
	ck_assert_int_ne(raw_complete(&rw, 0xffffff, exec, 1, 0, "", 0), 0);
	ck_assert_int_ne(raw_complete(&rw, UINT32_MAX, exec, 1, 0, "", 0), 0);
	close(rw.fd);
	expect_bystander_works("completions from the wrong connection");
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&u);
}
END_TEST

START_TEST(test_owner_completes_only_its_own_execution)
{
	struct carmy_reservation u = CARMY_RESERVATION_INIT;
	uint8_t exec[SHM_EXEC_LEN], wrong[SHM_EXEC_LEN], big[MAX_RESULT + 1];
	struct shm_view v;
	struct shm_found f, g;
	struct shm_entry *en;
	struct raw rw;

	raw_open(&rw);
	ck_assert_int_eq(shm_map(rw.shm_name, true, &v), 0);
	raw_reserve(&rw, &v, "own", exec, &f);
	memcpy(wrong, exec, sizeof(wrong));
	wrong[3] ^= 1;
	ck_assert_int_eq(raw_complete(&rw, f.entry, wrong, 1, 0, "x", 1),
			 CARMY_ENOT_RESERVED);
	ck_assert_int_eq(raw_complete(&rw, f.entry, exec, 0, 0, "x", 1),
			 CARMY_EINVALID_STATUS);
	ck_assert_int_eq(raw_complete(&rw, f.entry, exec, 9, 0, "x", 1),
			 CARMY_EINVALID_STATUS);
	ck_assert_int_eq(raw_complete(&rw, f.entry, exec, 1, 77, "x", 1),
			 CARMY_EINVALID_STATUS);
	ck_assert(shm_owns(&v, f.entry, rw.owner, &f.bucket, &f.word));
	/* A result over --max-result straight from the wire: recorded as
	 * failed with RESULT_TOO_LARGE, not dropped. */
	memset(big, 'b', sizeof(big));
	{
		int rc = raw_complete(&rw, f.entry, exec, CARMY_STATUS_COMPLETED,
				      0, big, sizeof(big));

		ck_assert_msg(rc == 0 || rc == CARMY_ERESULT_TOO_LARGE,
			      "a result over --max-result: %s",
			      carmy_errname(rc));
	}
	en = shm_entry_at(&v, f.entry);
	ck_assert_int_eq(en->en_status, CARMY_STATUS_FAILED);
	ck_assert_int_eq(en->en_result_code, CARMY_ERESULT_TOO_LARGE);
	ck_assert_uint_eq(en->en_result_len, 0);
	ck_assert_int_eq(SHM_W_STATE(v.buckets[f.bucket]), SHM_COMPLETED);
	/* Done is done, also for its owner. */
	ck_assert_int_ne(raw_complete(&rw, f.entry, exec, 1, 0, "again", 5), 0);

	/* A reservation the raw peer leaves behind turns uncertain when it
	 * hangs up, like anyone's. */
	raw_reserve(&rw, &v, "left", exec, &g);
	close(rw.fd);
	{
		struct carmy_call call = E2E_CALL("raw", "s", "left");
		int rc = e2e_poll_begin(good, &call, &u, CARMY_ECONFLICT,
					CARMY_STATE_INTERRUPTED, 2000, NULL);

		/* Its fingerprint is not libcarmy's: a conflict, which
		 * reports the entry's state all the same. */
		ck_assert_int_eq(rc, CARMY_ECONFLICT);
		ck_assert_int_eq(u.state, CARMY_STATE_INTERRUPTED);
	}
	shm_unmap(&v);
	expect_bystander_works("a raw owner");
	carmy_reservation_clear(&u);
}
END_TEST

/* ------------------------------------------------------------ bad input */

struct hostile {
	const char *name;
	bool hello_first;	/* sent after a valid HELLO */
	const uint8_t *bytes;
	size_t len;
	int want_code;		/* if carmyd replies, with this code (0: any) */
};

#define H(n, hf, code, ...) { n, hf, E2E_BYTES(__VA_ARGS__), code }

/* Send one hostile message; carmyd must answer with an error and hang up,
 * or just hang up, within the deadline. */
static void expect_refused(const struct hostile *h)
{
	struct reply rep;
	struct raw rw;
	int fd, got;

	if (h->hello_first) {
		raw_open(&rw);
		fd = rw.fd;
	} else {
		fd = raw_dial();
	}
	if (raw_send(fd, h->bytes, h->len) == 0) {
		got = raw_reply(fd, REPLY_TIMEOUT_MS, &rep);
		ck_assert_msg(got >= 0, "%s: no error and no disconnect within "
			      "%d ms", h->name, REPLY_TIMEOUT_MS);
		if (got == 1) {
			ck_assert_msg(rep.type == T_ERROR && rep.code < 0,
				      "%s: answered type %d code %d", h->name,
				      rep.type, rep.code);
			if (h->want_code != 0)
				ck_assert_msg(rep.code == h->want_code,
					      "%s: %s", h->name,
					      carmy_errname(rep.code));
			ck_assert_msg(raw_reply(fd, REPLY_TIMEOUT_MS, &rep) == 0,
				      "%s: still connected after an error",
				      h->name);
		}
	}
	close(fd);
	expect_bystander_works(h->name);
}

START_TEST(test_hostile_messages_get_an_error_or_a_disconnect)
{
	const struct hostile cases[] = {
		H("array32 claiming 4G elements", false, CARMY_EPROTOCOL,
		  0xdd, 0xff, 0xff, 0xff, 0xff),
		H("array32 claiming 4G elements after HELLO", true, CARMY_EPROTOCOL,
		  0xdd, 0xff, 0xff, 0xff, 0xff),
		H("map32 claiming 4G pairs", false, CARMY_EPROTOCOL,
		  0xdf, 0xff, 0xff, 0xff, 0xff),
		H("map32 claiming 4G pairs after HELLO", true, CARMY_EPROTOCOL,
		  0xdf, 0xff, 0xff, 0xff, 0xff),
		H("array32 of 4G in a COMPLETE", true, CARMY_EPROTOCOL,
		  0x96, 0x02, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff),
		H("reserved byte 0xc1", false, CARMY_EPROTOCOL, 0xc1),
		H("0xc1 inside a message", true, CARMY_EPROTOCOL, 0x92, 0x02, 0xc1),
		H("bin32 of 4G", true, CARMY_EPROTOCOL,
		  0x96, 0x02, 0x00, 0xc6, 0xff, 0xff, 0xff, 0xff),
		H("str32 of 2G", false, CARMY_EPROTOCOL,
		  0x91, 0xdb, 0x7f, 0xff, 0xff, 0xff),
		H("ext32 of 4G", false, CARMY_EPROTOCOL,
		  0x91, 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01),
		H("not an array", false, CARMY_EPROTOCOL, 0x05),
		H("a map", true, CARMY_EPROTOCOL, 0x81, 0x01, 0x02),
		H("empty array", false, CARMY_EPROTOCOL, 0x90),
		H("unknown type", true, CARMY_EPROTOCOL, 0x91, 0x07),
		H("type as a string", false, CARMY_EPROTOCOL, 0x91, 0xa1, '1'),
		H("COMPLETE before HELLO", false, CARMY_EPROTOCOL,
		  0x96, 0x02, 0x00, 0xc4, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		  0, 0, 0, 0, 0, 0, 0x01, 0x00, 0xc4, 0x00),
		H("COMPLETE with 5 elements", true, CARMY_EPROTOCOL,
		  0x95, 0x02, 0x00, 0xc4, 0x00, 0x01, 0x00),
		H("COMPLETE with a 15-byte execution id", true, CARMY_EPROTOCOL,
		  0x96, 0x02, 0x00, 0xc4, 0x0f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		  0, 0, 0, 0, 0, 0x01, 0x00, 0xc4, 0x00),
		H("COMPLETE with a negative entry", true, CARMY_EPROTOCOL,
		  0x96, 0x02, 0xff, 0xc4, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		  0, 0, 0, 0, 0, 0, 0x01, 0x00, 0xc4, 0x00),
		H("COMPLETE with a str result", true, CARMY_EPROTOCOL,
		  0x96, 0x02, 0x00, 0xc4, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		  0, 0, 0, 0, 0, 0, 0x01, 0x00, 0xa1, 'x'),
		H("HELLO of another layout", false, CARMY_ELAYOUT,
		  0x93, 0x01, 0x01, 0x00),
		H("HELLO of another version", false, CARMY_ELAYOUT,
		  0x93, 0x01, 0x63, 0x00),
		H("second HELLO", true, CARMY_EPROTOCOL, 0x93, 0x01, 0x01, 0x00),
		H("HELLO with a float version", false, CARMY_EPROTOCOL,
		  0x93, 0x01, 0xca, 0x3f, 0x80, 0, 0, 0x00),
		H("garbage", false, CARMY_EPROTOCOL,
		  'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/', '1',
		  '.', '1', '\r', '\n', '\r', '\n'),
		H("array16 of 60000 elements", true, CARMY_EPROTOCOL,
		  0xdc, 0xea, 0x60, 0xc0, 0xc0, 0xc0),
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_refused(&cases[i]);
}
END_TEST

START_TEST(test_deep_nesting_is_refused)
{
	uint8_t deep[41];
	struct hostile h = { "40 nested arrays", false, deep, sizeof(deep),
			     CARMY_EPROTOCOL };

	memset(deep, 0x91, sizeof(deep));
	deep[sizeof(deep) - 1] = 0x01;
	expect_refused(&h);
	h.hello_first = true;
	h.name = "40 nested arrays after HELLO";
	expect_refused(&h);
}
END_TEST

START_TEST(test_oversized_message_is_refused)
{
	msgpack_sbuffer sb;
	uint8_t exec[SHM_EXEC_LEN] = { 0 };
	uint8_t *big = calloc(1, 1u << 20);
	struct hostile h = { "COMPLETE with a result of 1 MB", true, NULL, 0,
			     CARMY_EPROTOCOL };

	ck_assert_ptr_nonnull(big);
	/* Bigger than the message cap (max-result + overhead): refused on
	 * its header, long before the body is in. */
	msgpack_sbuffer_init(&sb);
	put_complete(&sb, 0, exec, sizeof(exec), 1, 0, big, 1u << 20);
	h.bytes = (const uint8_t *)sb.data;
	h.len = sb.size;
	expect_refused(&h);
	msgpack_sbuffer_destroy(&sb);
	/* Just over the cap. */
	msgpack_sbuffer_init(&sb);
	put_complete(&sb, 0, exec, sizeof(exec), 1, 0, big, MSG_CAP);
	h.name = "COMPLETE just over the message cap";
	h.bytes = (const uint8_t *)sb.data;
	h.len = sb.size;
	expect_refused(&h);
	msgpack_sbuffer_destroy(&sb);
	free(big);
}
END_TEST

/* Half a message, then the peer goes away (or stalls): nobody waits for it. */
/* carmyd stopped while peers are still connected (one HELLO'd, one
 * half-way through a message, one silent) exits cleanly, having freed
 * them: under AddressSanitizer (CI) a connection left behind is a leak,
 * and a leak makes carmyd exit non-zero. */
START_TEST(test_stopping_with_peers_still_connected_frees_them)
{
	struct raw rw;
	int half = raw_dial(), silent = raw_dial();

	raw_open(&rw);
	ck_assert_int_eq(raw_send(half, "\x96\x02", 2), 0);
	expect_bystander_works("peers connected");
	carmy_close(good);
	good = NULL;
	e2e_stop(&d);		/* asserts exit status 0 */
	close(rw.fd);
	close(half);
	close(silent);
}
END_TEST

START_TEST(test_truncated_message_then_close_harms_no_one)
{
	static const uint8_t partial[][8] = {
		{ 0x96, 0x02, 0x00, 0xc4, 0x10, 0, 0, 0 },
		{ 0x93, 0x01, 0x01, 0xcf, 0, 0, 0, 0 },
		{ 0xdd, 0x00, 0x00, 0x00, 0x03, 0x02, 0x01, 0xc6 },
	};
	struct raw rw;
	int stalled;

	for (int i = 0; i < 3; i++) {
		int fd = raw_dial();

		ck_assert_int_eq(raw_send(fd, partial[i], sizeof(partial[i])), 0);
		close(fd);
		expect_bystander_works("a truncated message and close");
	}
	/* A peer that sends half a message and then stalls, kept open while
	 * others work: carmyd serves them meanwhile. */
	stalled = raw_dial();
	ck_assert_int_eq(raw_send(stalled, partial[0], 4), 0);
	raw_open(&rw);
	ck_assert_int_eq(raw_send(rw.fd, partial[0], sizeof(partial[0])), 0);
	expect_bystander_works("a stalled peer");
	close(rw.fd);	/* a HELLO'd peer, mid-message */
	close(stalled);
	expect_bystander_works("two peers hung up mid-message");
}
END_TEST

/* Random bytes, many times over: whatever they parse as, carmyd survives
 * and serves others. */
START_TEST(test_random_bytes_harm_no_one)
{
	unsigned seed = (unsigned)harness_now_ns();
	uint8_t buf[2048];

	e2e_note("random bytes seed %u", seed);
	for (int i = 0; i < 200; i++) {
		size_t len = 1 + (size_t)rand_r(&seed) % sizeof(buf);
		int fd = raw_dial();

		for (size_t k = 0; k < len; k++)
			buf[k] = (uint8_t)rand_r(&seed);
		if (i % 2 == 0) {	/* sometimes after a valid HELLO */
			msgpack_sbuffer sb;

			msgpack_sbuffer_init(&sb);
			put_hello(&sb, PROTOCOL_VERSION, shm_layout_signature());
			raw_send(fd, sb.data, sb.size);
			msgpack_sbuffer_destroy(&sb);
		}
		raw_send(fd, buf, len);
		shutdown(fd, SHUT_WR);
		/* carmyd must hang up: either the bytes were bad, or they
		 * were followed by EOF. */
		ck_assert_msg(drain_until_eof(fd, REPLY_TIMEOUT_MS) == 0,
			      "random message %d: still connected", i);
		close(fd);
		if (i % 20 == 0)
			expect_bystander_works("random bytes");
	}
	expect_bystander_works("random bytes");
}
END_TEST

/* A peer that floods requests and never reads the replies is cut off once
 * its unread replies pile up; others are served throughout. */
START_TEST(test_peer_that_never_reads_replies_is_cut_off)
{
	uint8_t exec[SHM_EXEC_LEN] = { 0 };
	msgpack_sbuffer sb;
	struct raw rw;
	uint64_t deadline = harness_now_ns() + 45000000000u;	/* valgrind */
	size_t sent = 0;
	bool cut = false;
	int flags;

	raw_open(&rw);
	msgpack_sbuffer_init(&sb);
	for (int i = 0; i < 512; i++)	/* a batch of bogus completions */
		put_complete(&sb, 0xfffff, exec, sizeof(exec), 1, 0, NULL, 0);
	flags = fcntl(rw.fd, F_GETFL);
	fcntl(rw.fd, F_SETFL, flags | O_NONBLOCK);
	while (!cut && harness_now_ns() < deadline) {
		ssize_t n = send(rw.fd, sb.data, sb.size, MSG_NOSIGNAL);

		if (n < 0 && errno == EAGAIN) {
			struct pollfd pfd = { .fd = rw.fd, .events = POLLOUT };

			poll(&pfd, 1, 100);
			if (pfd.revents & (POLLERR | POLLHUP))
				cut = true;
			continue;
		}
		if (n < 0)
			cut = true;	/* EPIPE / ECONNRESET */
		else
			sent += (size_t)n;
		if (sent / sb.size % 64 == 0)
			ck_assert(e2e_alive(&d));
	}
	msgpack_sbuffer_destroy(&sb);
	e2e_note("flooding peer cut off after %zu bytes", sent);
	ck_assert_msg(cut, "carmyd kept a peer that never reads after %zu bytes",
		      sent);
	close(rw.fd);
	expect_bystander_works("a flooding peer");
}
END_TEST

/* ------------------------------------------------------------ scribbling */

static void scribble(uint8_t *p, size_t len, unsigned *seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)rand_r(seed);
}

/* Plausible-looking garbage: words with valid states and entry numbers
 * (in and out of range) are what reach the deeper code paths. */
static void scribble_plausibly(struct shm_view *v, unsigned *seed)
{
	for (uint32_t e = 0; e < v->geo.capacity; e++) {
		uint32_t t = (uint32_t)rand_r(seed);

		v->tickets[e] = t % 4 == 0 ? t : t % 24;
	}
	for (uint32_t b = 0; b < v->geo.nbuckets; b++) {
		uint32_t e = (uint32_t)rand_r(seed) % (v->geo.capacity + 4);

		v->buckets[b] = shm_word((unsigned)rand_r(seed) % 8,
					 (uint32_t)rand_r(seed),
					 (uint32_t)rand_r(seed), e);
	}
	for (uint32_t e = 0; e < v->geo.capacity; e++) {
		struct shm_entry *en = shm_entry_at(v, e);

		en->en_bucket = (uint32_t)rand_r(seed) % (v->geo.nbuckets + 4);
		for (int i = 0; i < 3; i++)
			en->en_len[i] = (uint16_t)rand_r(seed);
		en->en_result_len = (uint32_t)rand_r(seed);
		en->en_status = (uint8_t)rand_r(seed);
	}
}

/* Connect, try a few calls, hang up: makes carmyd sweep. Returns whether a
 * connection could be made. Any outcome of the calls is fine, but only
 * documented ones. */
static bool poke(void)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	carmy_t *x = NULL;
	int rc = carmy_connect(&x, d.socket);

	if (rc != 0) {
		ck_assert_msg(rc == CARMY_ECORRUPT || rc == CARMY_ELAYOUT ||
			      rc == CARMY_EPROTOCOL,
			      "connect to a scribbled segment: %s",
			      carmy_errname(rc));
		return false;
	}
	for (int i = 0; i < 8; i++) {
		char rid[32];
		struct carmy_call call;

		snprintf(rid, sizeof(rid), "poke-%d", i);
		call = E2E_CALL("poke", "s", rid);
		rc = carmy_begin(x, &call, &r);
		ck_assert_msg(rc == CARMY_RESERVED || rc == CARMY_REPLAY ||
			      rc == CARMY_ECONFLICT || rc == CARMY_EUNCERTAIN ||
			      rc == CARMY_ECAPACITY || rc == CARMY_EUNAVAILABLE ||
			      rc == CARMY_EDISCONNECTED,
			      "begin on a scribbled segment: %s",
			      carmy_errname(rc));
		if (rc == CARMY_RESERVED && i % 2)
			carmy_complete(x, &r, CARMY_STATUS_COMPLETED, "p", 1);
	}
	carmy_reservation_clear(&r);
	carmy_close(x);
	return true;
}

/* carmyd puts a scribbled header back on its next tick: its geometry, and
 * the words that say the segment was loaded from carmyd's store (left
 * scribbled, they would make the next carmyd load it all again). */
static bool wait_header_restored(const struct shm_view *v,
				 const struct shm_geometry *want,
				 const struct shm_header *saved, int timeout_ms)
{
	uint64_t deadline = harness_now_ns() + (uint64_t)timeout_ms * 1000000u;
	const struct shm_header *h = shm_header(v);

	for (;;) {
		struct shm_geometry geo;
		struct timespec ts = { 0, 2000000 };

		if (shm_sane(v->base, v->mapped, &geo) == 0 &&
		    memcmp(&geo, want, sizeof(geo)) == 0 &&
		    __atomic_load_n(&h->sh_loaded, __ATOMIC_ACQUIRE) ==
			    saved->sh_loaded &&
		    __atomic_load_n(&h->sh_store, __ATOMIC_ACQUIRE) ==
			    saved->sh_store)
			return true;
		if (harness_now_ns() > deadline)
			return false;
		nanosleep(&ts, NULL);	/* polling, bounded above */
	}
}

/* A bucket BLOCKED (a reclaim of carmyd's in progress; here written by
 * hand): carmy_try_begin(), which must never wait long, answers -EAGAIN
 * at once, nothing reserved, where carmy_begin() would wait for it. (carmyd
 * makes a BLOCKED bucket no reclaim of its own holds a tombstone within a
 * second: a try that came later than that, on a busy machine, reserves,
 * and is made again on another identity.) Once the bucket is given back,
 * the try reserves. */
START_TEST(test_a_try_on_a_blocked_bucket_is_eagain)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = { 0 };
	struct shm_view v;
	struct shm_key k;
	uint64_t *bucket = NULL, saved = 0, blocked = 0;
	char rid[32];
	int rc = 0;

	ck_assert_int_eq(shm_map(d.segment, true, &v), 0);
	for (unsigned i = 0; rc != -EAGAIN; i++) {
		ck_assert_uint_lt(i, 1000);
		/* An identity whose home bucket is free: nothing else there
		 * for carmyd to change while it is blocked. */
		snprintf(rid, sizeof(rid), "blocked-%u", i);
		ck_assert_int_eq(shm_key_init(&k, v.seed, "good", 4, "s", 1,
					      rid, strlen(rid)), 0);
		bucket = &v.buckets[k.hash & (v.geo.nbuckets - 1)];
		saved = __atomic_load_n(bucket, __ATOMIC_ACQUIRE);
		if (SHM_W_STATE(saved) != SHM_FREE)
			continue;
		blocked = shm_word(SHM_BLOCKED, SHM_W_VER(saved) + 1, 0, 0);
		if (!__atomic_compare_exchange_n(bucket, &saved, blocked,
						 false, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE))
			continue;
		call = E2E_CALL("good", "s", rid);
		rc = carmy_try_begin(good, &call, &r);
		if (rc == CARMY_RESERVED)	/* made a tombstone first */
			ck_assert_int_eq(carmy_complete(good, &r,
					 CARMY_STATUS_COMPLETED, "ok", 2), 0);
		else
			ck_assert_int_eq(rc, -EAGAIN);
		carmy_reservation_clear(&r);
	}
	/* Given back (unless carmyd made it a tombstone meanwhile). */
	(void)__atomic_compare_exchange_n(bucket, &blocked, saved, false,
					  __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	ck_assert_int_eq(carmy_try_begin(good, &call, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(good, &r, CARMY_STATUS_COMPLETED,
					"ok", 2), 0);
	carmy_reservation_clear(&r);
	shm_unmap(&v);
}
END_TEST

START_TEST(test_scribbled_segment_never_crashes_carmyd)
{
	unsigned seed = (unsigned)harness_now_ns();
	struct shm_view v;
	struct shm_geometry geo;
	struct shm_header saved;

	e2e_note("scribble seed %u", seed);
	ck_assert_int_eq(shm_map(d.segment, true, &v), 0);
	geo = v.geo;
	memcpy(&saved, v.base, sizeof(saved));
	ck_assert_uint_eq(saved.sh_loaded, 1);	/* carmyd loaded its store */
	ck_assert_uint_ne(saved.sh_store, 0);
	for (int round = 0; round < 6; round++) {
		uint64_t t0;

		/* Something for the sweeps to find. */
		poke();
		switch (round % 3) {
		case 0:		/* pure noise everywhere */
			scribble((uint8_t *)v.tickets,
				 v.geo.capacity * sizeof(uint64_t), &seed);
			scribble((uint8_t *)v.buckets,
				 v.geo.nbuckets * sizeof(uint64_t), &seed);
			scribble((uint8_t *)v.entries, (size_t)v.geo.capacity *
				 sizeof(struct shm_entry), &seed);
			scribble(v.results, (size_t)v.geo.capacity *
				 v.geo.result_stride, &seed);
			break;
		case 1:		/* plausible words */
			scribble_plausibly(&v, &seed);
			break;
		case 2:		/* the header keeps its magic and layout */
			scribble_plausibly(&v, &seed);
			break;
		}
		scribble(v.base, SHM_HEADER_SIZE, &seed);
		if (round % 3 == 2) {
			shm_header(&v)->sh_magic = SHM_MAGIC;
			shm_header(&v)->sh_layout = shm_layout_signature();
			shm_header(&v)->sh_capacity = saved.sh_capacity;
			shm_header(&v)->sh_max_result = saved.sh_max_result;
		}
		/* Make carmyd sweep now (a hang-up), then let it tick. */
		poke();
		t0 = harness_now_ns();
		ck_assert_msg(wait_header_restored(&v, &geo, &saved,
						   HARNESS_WAIT_MS),
			      "round %d: the header was not restored "
			      "(carmyd %s)", round,
			      e2e_alive(&d) ? "alive" : "dead");
		e2e_note("round %d: header restored after %.0f ms", round,
			 e2e_ms_since(t0));
		ck_assert_msg(e2e_alive(&d), "round %d: carmyd died", round);
		ck_assert_msg(poke(), "round %d: cannot connect after the "
			      "header was restored", round);
		ck_assert(e2e_alive(&d));
	}
	/* The bystander may have lost its entries, but not its footing. */
	{
		carmy_t *x = e2e_connect(&d);

		carmy_close(x);
	}
	shm_unmap(&v);
	ck_assert(e2e_alive(&d));
}
END_TEST

static Suite *security_suite(void)
{
	Suite *s = suite_create("security");
	TCase *tc = tcase_create("security");

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_socket_and_segment_are_owner_only);
	tcase_add_test(tc, test_default_directory_and_files_are_owner_only_under_a_loose_umask);
	tcase_add_test(tc, test_group_option_shares_socket_and_segment_with_the_group_only);
	tcase_add_test(tc, test_completion_from_another_connection_is_not_owner);
	tcase_add_test(tc, test_owner_completes_only_its_own_execution);
	tcase_add_test(tc, test_hostile_messages_get_an_error_or_a_disconnect);
	tcase_add_test(tc, test_deep_nesting_is_refused);
	tcase_add_test(tc, test_oversized_message_is_refused);
	tcase_add_test(tc, test_truncated_message_then_close_harms_no_one);
	tcase_add_test(tc, test_stopping_with_peers_still_connected_frees_them);
	tcase_add_test(tc, test_random_bytes_harm_no_one);
	tcase_add_test(tc, test_peer_that_never_reads_replies_is_cut_off);
	tcase_add_test(tc, test_a_try_on_a_blocked_bucket_is_eagain);
	tcase_add_test(tc, test_scribbled_segment_never_crashes_carmyd);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(security_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0;
}
