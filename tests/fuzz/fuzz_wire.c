/*
 * fuzz_wire.c - libFuzzer target: everything carmyd does with the bytes that
 * arrive on one client connection, without sockets.
 *
 * The input is the byte stream a client sends. It is fed the way
 * daemon/request.c's req_read() receives it: into a read buffer that grows
 * up to carmyd's message cap (max_result + WIRE_OVERHEAD), each whole
 * message found by wire_scan() with that cap handed to on_message(), which
 * decodes it with wire_decode(from_client=1) and acts on it: HELLO assigns
 * the owner id, COMPLETE calls shm_record_result() on an in-memory segment,
 * RECLAIM calls shm_reclaim(), anything else ends the connection, and the
 * end of the connection sweeps its owner's entries.
 *
 * request.c's req_read()/on_message() and conn.c's conn_drop() are tied to
 * a socket, epoll and the store, and daemon/ is not to be refactored for
 * this target; so their framing loop and dispatch are REIMPLEMENTED below,
 * line for line where they touch the bytes (buffer growth, wire_scan,
 * memmove, the checks before shm_record_result). Keep them in step with
 * daemon/request.c and daemon/conn.c.
 *
 * Before each input the segment is reset and real reservations are made
 * with shm_reserve() (fuzz_common.h: FW_E_*), so that a COMPLETE naming
 * entry 0 with execution id fw_exec(0) records a live entry.
 *
 * Besides "no crash, no out-of-bounds access, no UB", the target checks:
 *  - wire_scan() never returns more than it was given, and never "need
 *    more bytes" once the buffer holds the whole cap (carmyd would then
 *    recv() into no room and take the 0 for a closed connection);
 *  - the stream is processed the same whether it arrives at once or in
 *    small pieces (same replies, same segment afterwards);
 *  - every reply carmyd would send decodes on the client side;
 *  - a recorded result is replayed byte for byte by another client;
 *  - canon_msgpack()/canon_fingerprint() on the input (and on every
 *    message in it) as args: refuse what wire_scan() refuses, agree with
 *    each other, are idempotent, never
 *    grow an object beyond twice its size, and leave nothing behind on
 *    failure.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "carmy.h"
#include "libclient/canon.h"
#include "libclient/wire.h"
#include "shm/shm.h"
#include "tests/fuzz/fuzz_common.h"

#define READ_CHUNK (64 * 1024)	/* daemon/request.c */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct shm_view view;
static struct shm_alive alive;
static size_t msg_cap;		/* daemon/server.h: sv->msg_cap */
static uint8_t *snapshot;	/* the segment after the first pass */

/* daemon/server.h's struct conn, minus the socket. out collects every reply the
 * connection was sent, in order. */
struct conn {
	uint32_t owner;
	uint8_t *rbuf;
	size_t rlen, rcap;
	struct wire_scanner scan;
	msgpack_sbuffer out;
	bool gone;
};

/* ------------------------------------------------------------ the segment */

static uint64_t fw_make_exec(void *arg, uint8_t exec[SHM_EXEC_LEN])
{
	fw_exec(*(const uint32_t *)arg, exec);
	return FW_NOW - 1;
}

static enum shm_outcome reserve(uint32_t i, uint32_t owner, uint32_t *cursor,
				struct shm_found *f)
{
	uint8_t fp[SHM_FP_LEN];
	struct shm_claim c = { .owner = owner, .pid = FW_PID, .fp = fp,
			       .make_exec = fw_make_exec, .arg = &i,
			       .cursor = cursor };
	struct shm_key k;
	char rid[8];

	fw_rid(i, rid);
	memset(fp, (int)i, sizeof(fp));
	FUZZ_CHECK(shm_key_init(&k, view.seed, "p", 1, "s", 1, rid,
				strlen(rid)) == 0);
	return shm_reserve(&view, &k, &c, f);
}

/* A freshly started carmyd's segment with the FW_E_* reservations in it.
 * The header (and the liveness word we hold in it) is kept. */
static void reset_segment(void)
{
	struct shm_header *h = shm_header(&view);
	uint32_t cur = 0, cur_other = 0;
	struct shm_found f;
	uint8_t exec[SHM_EXEC_LEN];

	memset(view.base + SHM_HEADER_SIZE, 0, view.geo.size - SHM_HEADER_SIZE);
	h->sh_tombs = 0;
	h->sh_move_seq = 0;
	view.move_seq = 0;

	FUZZ_CHECK(reserve(FW_E_LIVE, FW_OWNER, &cur, &f) == SHM_OUT_RESERVED &&
		   f.entry == FW_E_LIVE);
	FUZZ_CHECK(reserve(FW_E_DONE, FW_OWNER, &cur, &f) == SHM_OUT_RESERVED &&
		   f.entry == FW_E_DONE);
	fw_exec(FW_E_DONE, exec);
	FUZZ_CHECK(shm_record_result(&view, FW_E_DONE, FW_OWNER, exec,
				     CARMY_STATUS_COMPLETED, 0, "done", 4,
				     FW_NOW) == 0);
	FUZZ_CHECK(reserve(FW_E_LIVE2, FW_OWNER, &cur, &f) == SHM_OUT_RESERVED &&
		   f.entry == FW_E_LIVE2);
	cur_other = FW_E_OTHER;
	FUZZ_CHECK(reserve(FW_E_OTHER, FW_OTHER, &cur_other, &f) ==
			   SHM_OUT_RESERVED && f.entry == FW_E_OTHER);
	cur = FW_E_TOMB;
	FUZZ_CHECK(reserve(FW_E_TOMB, FW_OWNER, &cur, &f) == SHM_OUT_RESERVED &&
		   f.entry == FW_E_TOMB);
	FUZZ_CHECK(shm_release(&view, FW_E_TOMB, FW_OWNER) == 0);
	/* Claims whose client died before publishing them. */
	view.tickets[FW_E_CLAIM] = shm_ticket(FW_OWNER, FW_PID);
	view.tickets[FW_E_CLAIM_GONE] = shm_ticket(FW_OWNER, FW_PID + 1);
}

/* store.c's dead_owner/pid_gone: only the connection's own owner is gone
 * (FW_OTHER is still connected); the client process may still run. */
static bool owner_dead(uint32_t owner, void *arg)
{
	return owner == *(const uint32_t *)arg;
}

static bool pid_gone(uint32_t pid, void *arg)
{
	(void)arg;
	return pid != FW_PID;
}

/* ------------------------------------------------------------ oracles */

/* A result carmyd just recorded for entry e is what another client's replay
 * of the same identity reads back. */
static void check_replay(uint32_t e, int status, int code, const void *data,
			 size_t len)
{
	uint32_t cursor = 0;
	struct shm_result r;
	struct shm_found f;
	uint8_t exec[SHM_EXEC_LEN];

	FUZZ_CHECK(e < FW_NENTRIES);
	FUZZ_CHECK(reserve(e, FW_OTHER, &cursor, &f) == SHM_OUT_FOUND);
	FUZZ_CHECK(f.entry == e && f.state == SHM_COMPLETED);
	FUZZ_CHECK(shm_read_result(&view, f.entry, f.bucket, f.word, &r) == 0);
	fw_exec(e, exec);
	FUZZ_CHECK(r.status == status && r.result_code == code);
	FUZZ_CHECK(r.len == len && (len == 0 || memcmp(r.data, data, len) == 0));
	FUZZ_CHECK(memcmp(r.exec, exec, SHM_EXEC_LEN) == 0);
	FUZZ_CHECK(memcmp(f.exec, exec, SHM_EXEC_LEN) == 0);
	free(r.data);
}

/* canon on one candidate msgpack object as a call's args. */
static void check_canon(const uint8_t *p, size_t n)
{
	struct carmy_call call = { .tool = "t", .tool_len = 1,
				   .args = p, .args_len = n };
	uint8_t fp1[CANON_FP_LEN], fp2[CANON_FP_LEN];
	msgpack_sbuffer a, b;
	int ra, rf;

	if (n == 0)
		return;	/* (NULL, 0) means "absent"; non-NULL empty is invalid */
	msgpack_sbuffer_init(&a);
	msgpack_sbuffer_init(&b);
	ra = canon_msgpack(p, n, &a);
	rf = canon_fingerprint(&call, fp1);
	FUZZ_CHECK(ra == rf);
	/* Validated while re-encoded, by wire_scan()'s rules: whatever it
	 * refuses is refused (it accepts duplicate keys, canon does not). */
	if (wire_scan(p, n, n) != (long)n)
		FUZZ_CHECK(ra == CARMY_EINVALID_ARGS);
	if (ra != 0) {
		FUZZ_CHECK(ra == CARMY_EINVALID_ARGS);
		FUZZ_CHECK(a.size == 0);
		goto out;
	}
	FUZZ_CHECK(a.size > 0 && a.size <= 2 * n);
	/* Canonical bytes are their own canonical form ... */
	FUZZ_CHECK(canon_msgpack(a.data, a.size, &b) == 0);
	FUZZ_CHECK(b.size == a.size && memcmp(a.data, b.data, a.size) == 0);
	/* ... and fingerprint as the original does. */
	call.args = a.data;
	call.args_len = a.size;
	FUZZ_CHECK(canon_fingerprint(&call, fp2) == 0);
	FUZZ_CHECK(memcmp(fp1, fp2, CANON_FP_LEN) == 0);
	/* The same bytes as meta are a different call. */
	call.args = NULL;
	call.args_len = 0;
	call.meta = p;
	call.meta_len = n;
	FUZZ_CHECK(canon_fingerprint(&call, fp2) == 0);
	FUZZ_CHECK(memcmp(fp1, fp2, CANON_FP_LEN) != 0);
out:
	msgpack_sbuffer_destroy(&a);
	msgpack_sbuffer_destroy(&b);
}

/* Every reply in out decodes on the client's side (wire_decode from the
 * daemon), and the last one is an ERROR exactly when the connection was
 * failed. */
static void check_replies(const struct conn *c)
{
	size_t off = 0;

	while (off < c->out.size) {
		struct wire_msg m;
		long n = wire_scan(c->out.data + off, c->out.size - off,
				   SIZE_MAX / 2);

		FUZZ_CHECK(n > 0);
		FUZZ_CHECK(wire_decode(c->out.data + off, (size_t)n, 0, &m) == 0);
		off += (size_t)n;
	}
}

/* ------------------------------------------------------------ carmyd */

/* conn.c conn_drop(): the connection is gone, its owner dead. */
static void drop(struct conn *c)
{
	if (c->owner != 0) {
		const struct shm_sweep_ops ops = { owner_dead, pid_gone,
						   &c->owner };
		struct shm_sweep_stats st = { 0 };

		shm_sweep(&view, &ops, &st);
	}
	c->gone = true;
}

/* conn.c conn_fail(): tell the peer why, then drop it. (conn.c first
 * empties its output buffer; here out is the transcript of everything
 * sent, and every earlier reply was already flushed.) */
static void fail_conn(struct conn *c, int code)
{
	FUZZ_CHECK(wire_put_reply(&c->out, WIRE_ERROR, code) == 0);
	drop(c);
}

/* request.c on_message(). Returns 0, or -1 if the connection was dropped. */
static int on_message(struct conn *c, const uint8_t *buf, size_t len)
{
	struct wire_msg m;
	int rc;

	check_canon(buf, len);
	if (wire_decode(buf, len, 1, &m) != 0) {
		fail_conn(c, CARMY_EPROTOCOL);
		return -1;
	}
	switch (m.type) {
	case WIRE_HELLO:
		if (c->owner != 0) {
			fail_conn(c, CARMY_EPROTOCOL);
			return -1;
		}
		if (m.u.hello.version != WIRE_VERSION ||
		    m.u.hello.layout != shm_layout_signature()) {
			fail_conn(c, CARMY_ELAYOUT);
			return -1;
		}
		c->owner = FW_OWNER;	/* store_new_owner() on a fresh carmyd */
		rc = wire_put_hello_ok(&c->out, c->owner, FW_SHM_NAME,
				       view.geo.max_result, 1, 0, UINT32_MAX,
				       UINT32_MAX);
		break;
	case WIRE_COMPLETE: {
		int status = m.u.complete.status;
		int code = m.u.complete.result_code;
		const uint8_t *data = m.u.complete.result;
		size_t dlen = m.u.complete.result_len;

		if (c->owner == 0) {
			fail_conn(c, CARMY_EPROTOCOL);
			return -1;
		}
		/* The result points into the message, inside the buffer. */
		FUZZ_CHECK(dlen == 0 ||
			   (data >= buf && data + dlen <= buf + len));
		if (status < CARMY_STATUS_COMPLETED ||
		    status > CARMY_STATUS_CANCELLED ||
		    (code != 0 && code != CARMY_ERESULT_TOO_LARGE)) {
			rc = wire_put_reply(&c->out, WIRE_COMPLETE,
					    CARMY_EINVALID_STATUS);
			break;
		}
		if (dlen > view.geo.max_result) {
			status = CARMY_STATUS_FAILED;
			code = CARMY_ERESULT_TOO_LARGE;
			dlen = 0;
		}
		rc = shm_record_result(&view, m.u.complete.entry, c->owner,
				       m.u.complete.exec, status, code, data,
				       dlen, FW_NOW);
		if (rc == 0)
			check_replay(m.u.complete.entry, status, code, data,
				     dlen);
		else
			FUZZ_CHECK(rc == CARMY_ENOT_OWNER ||
				   rc == CARMY_ENOT_RESERVED);
		rc = wire_put_reply(&c->out, WIRE_COMPLETE, rc);
		break;
	}
	case WIRE_RECLAIM: {
		uint32_t *hint = &shm_header(&view)->sh_tombs;
		uint32_t seen;

		if (c->owner == 0) {
			fail_conn(c, CARMY_EPROTOCOL);
			return -1;
		}
		/* store_reclaim(), without its once-a-millisecond limit
		 * (a clock would make runs differ). */
		seen = __atomic_load_n(hint, __ATOMIC_SEQ_CST);
		(void)shm_reclaim(&view);
		__atomic_sub_fetch(hint, seen, __ATOMIC_SEQ_CST);
		rc = wire_put_reply(&c->out, WIRE_RECLAIM, 0);
		break;
	}
	default:
		fail_conn(c, CARMY_EPROTOCOL);
		return -1;
	}
	FUZZ_CHECK(rc == 0);
	return 0;
}

/*
 * request.c req_read(), with recv() replaced by taking the next piece of
 * the input: all that fits when piece is 0, else at most a pseudo-random
 * 1..piece bytes at a time (a socket may deliver a stream in any pieces).
 * The end of the input is the client closing the connection.
 */
static void feed(struct conn *c, const uint8_t *data, size_t size,
		 unsigned piece)
{
	uint32_t rng = (uint32_t)size * 2654435761u + 1;
	size_t pos = 0;

	while (!c->gone) {
		size_t got, room;

		if (c->rcap - c->rlen < READ_CHUNK && c->rcap < msg_cap) {
			size_t ncap = c->rlen + READ_CHUNK;
			uint8_t *nb;

			if (ncap > msg_cap)
				ncap = msg_cap;
			nb = realloc(c->rbuf, ncap);
			FUZZ_CHECK(nb != NULL);
			c->rbuf = nb;
			c->rcap = ncap;
		}
		room = c->rcap - c->rlen;
		got = size - pos;
		if (piece != 0) {
			rng = rng * 1103515245u + 12345u;
			if (got > 1 + (rng >> 16) % piece)
				got = 1 + (rng >> 16) % piece;
		}
		if (got > room)
			got = room;
		if (got == 0) {
			/* recv() returned 0: end of stream (or, with no room
			 * left, a zero-length read, which the check below
			 * rules out). */
			drop(c);
			return;
		}
		memcpy(c->rbuf + c->rlen, data + pos, got);
		pos += got;
		c->rlen += got;

		while (c->rlen > 0) {
			long n = wire_scan_more(&c->scan, c->rbuf, c->rlen,
						msg_cap);

			/* Resumed or from scratch, the same answer. */
			FUZZ_CHECK(n == wire_scan(c->rbuf, c->rlen, msg_cap));

			if (n < 0) {
				FUZZ_CHECK(n == CARMY_EPROTOCOL);
				fail_conn(c, CARMY_EPROTOCOL);
				return;
			}
			if (n == 0) {
				FUZZ_CHECK(c->rlen < msg_cap);
				break;
			}
			FUZZ_CHECK((size_t)n <= c->rlen);
			if (on_message(c, c->rbuf, (size_t)n) != 0)
				return;
			memmove(c->rbuf, c->rbuf + n, c->rlen - (size_t)n);
			c->rlen -= (size_t)n;
			c->scan.off = 0;
			c->scan.depth = 0;
		}
	}
}

/* One connection from accept to drop; returns its replies in *out. */
static void connection(const uint8_t *data, size_t size, unsigned piece,
		       msgpack_sbuffer *out)
{
	struct conn c = { 0 };

	reset_segment();
	msgpack_sbuffer_init(&c.out);
	feed(&c, data, size, piece);
	FUZZ_CHECK(c.gone);
	check_replies(&c);
	free(c.rbuf);
	*out = c.out;
}

/* ------------------------------------------------------------ libFuzzer */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct shm_geometry geo;
	void *mem;

	(void)argc;
	(void)argv;
	FUZZ_CHECK(shm_geometry(FW_CAPACITY, FW_MAX_RESULT, &geo) == 0);
	FUZZ_CHECK(posix_memalign(&mem, 4096, geo.size) == 0);
	memset(mem, 0, geo.size);
	shm_format(mem, &geo, FW_SEED, 1);
	FUZZ_CHECK(shm_view_init(&view, mem, geo.size) == 0);
	/* We play carmyd: hold the liveness word for the whole run (as
	 * tests/shm/check_table.c does). Nothing ever writes it again. */
	FUZZ_CHECK(shm_hold_alive(&alive, &view) == 0);
	msg_cap = (size_t)view.geo.max_result + WIRE_OVERHEAD;
	snapshot = malloc(geo.size);
	FUZZ_CHECK(snapshot != NULL);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	msgpack_sbuffer whole, pieces;

	check_canon(data, size);

	connection(data, size, 0, &whole);
	memcpy(snapshot, view.base, view.geo.size);
	connection(data, size, 32, &pieces);
	FUZZ_CHECK(whole.size == pieces.size &&
		   (whole.size == 0 ||
		    memcmp(whole.data, pieces.data, whole.size) == 0));
	FUZZ_CHECK(memcmp(snapshot, view.base, view.geo.size) == 0);

	msgpack_sbuffer_destroy(&whole);
	msgpack_sbuffer_destroy(&pieces);
	return 0;
}
