/*
 * gen_corpus.c - write the seed corpora of the fuzz targets:
 *
 *   gen_corpus DIR    writes the files of DIR/wire/, DIR/segment/ and
 *                     DIR/journal/
 *
 * Wire seeds are built with libclient/wire.c's own encoders (valid HELLO,
 * COMPLETE and RECLAIM sequences aimed at fuzz_wire's live entries) plus
 * hostile byte strings; segment seeds are pieces of fuzz_segment's template
 * (fuzz_common.h), whole or scribbled; journal seeds are recipes
(fuzz_journal.c) for a journal with executions in every state, whole, cut
short, damaged or compacted. Everything is deterministic: running
 * it again on the same platform writes the same bytes (`make fuzz-corpus`).
 * The HELLO seeds carry this build's layout signature.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <msgpack.h>

#include "carmy.h"
#include "carmy_store.h"
#include "libclient/wire.h"
#include "shm/shm.h"
#include "stores/journal/internal.h"
#include "tests/fuzz/fuzz_common.h"

static const char *dir;

static void put(const char *sub, const char *name, const void *p, size_t n)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/%s", dir, sub, name);
	f = fopen(path, "wb");
	if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
}

static void mkdirs(const char *sub)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", dir, sub);
	if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
		perror(dir);
		exit(1);
	}
	if (mkdir(path, 0777) != 0 && errno != EEXIST) {
		perror(path);
		exit(1);
	}
}

/* ------------------------------------------------------------ wire */

static void ok(int rc)
{
	if (rc != 0) {
		fprintf(stderr, "gen_corpus: encoder failed\n");
		exit(1);
	}
}

static void hello(msgpack_sbuffer *sb)
{
	ok(wire_put_hello(sb, shm_layout_signature(), 0, 0));
}

static void complete(msgpack_sbuffer *sb, uint32_t entry, uint32_t exec_of,
		     int status, int code, const void *res, size_t len)
{
	uint8_t exec[SHM_EXEC_LEN];

	fw_exec(exec_of, exec);
	ok(wire_put_complete(sb, entry, exec, status, code, res, len));
}

static void abandon(msgpack_sbuffer *sb, uint32_t entry, uint32_t exec_of)
{
	uint8_t exec[SHM_EXEC_LEN];

	fw_exec(exec_of, exec);
	ok(wire_put_reserve(sb, WIRE_ABANDON, entry, exec));
}

static void wire_seeds(void)
{
	static const uint8_t big[FW_MAX_RESULT + 8] = { 0 };
	msgpack_sbuffer sb;
	msgpack_packer pk;

#define SEED(name, ...)                                                      \
	do {                                                                 \
		msgpack_sbuffer_init(&sb);                                   \
		__VA_ARGS__;                                                 \
		put("wire", name, sb.data, sb.size);                         \
		msgpack_sbuffer_destroy(&sb);                                \
	} while (0)

	mkdirs("wire");
	SEED("hello", hello(&sb));
	SEED("hello_complete", hello(&sb);
	     complete(&sb, FW_E_LIVE, FW_E_LIVE, CARMY_STATUS_COMPLETED, 0,
		      "result", 6));
	SEED("hello_complete_twice", hello(&sb);
	     complete(&sb, FW_E_LIVE, FW_E_LIVE, CARMY_STATUS_COMPLETED, 0,
		      "one", 3);
	     complete(&sb, FW_E_LIVE, FW_E_LIVE, CARMY_STATUS_FAILED, 0,
		      "two", 3));
	SEED("hello_complete_empty", hello(&sb);
	     complete(&sb, FW_E_LIVE2, FW_E_LIVE2, CARMY_STATUS_CANCELLED, 0,
		      "", 0));
	/* Over max_result but within carmyd's cap: recorded as too large. */
	SEED("hello_complete_too_large", hello(&sb);
	     complete(&sb, FW_E_LIVE2, FW_E_LIVE2, CARMY_STATUS_COMPLETED, 0,
		      big, sizeof(big)));
	SEED("hello_complete_refusals", hello(&sb);
	     complete(&sb, FW_E_OTHER, FW_E_OTHER, CARMY_STATUS_COMPLETED, 0,
		      "x", 1);
	     complete(&sb, FW_E_DONE, FW_E_DONE, CARMY_STATUS_COMPLETED, 0,
		      "x", 1);
	     complete(&sb, FW_E_LIVE, FW_E_LIVE2, CARMY_STATUS_COMPLETED, 0,
		      "x", 1);
	     complete(&sb, FW_E_TOMB, FW_E_TOMB, CARMY_STATUS_COMPLETED, 0,
		      "x", 1);
	     complete(&sb, FW_E_CLAIM, FW_E_CLAIM, CARMY_STATUS_COMPLETED, 0,
		      "x", 1);
	     complete(&sb, 0xffffffffu, 0, CARMY_STATUS_COMPLETED, 0, "x", 1);
	     complete(&sb, FW_E_LIVE, FW_E_LIVE, 9, 0, "x", 1);
	     complete(&sb, FW_E_LIVE, FW_E_LIVE, CARMY_STATUS_TIMED_OUT,
		      CARMY_ERESULT_TOO_LARGE, "", 0));
	SEED("hello_reclaim", hello(&sb); ok(wire_put_reclaim(&sb));
	     complete(&sb, FW_E_LIVE, FW_E_LIVE, CARMY_STATUS_COMPLETED, 0,
		      "r", 1);
	     ok(wire_put_reclaim(&sb)));
	SEED("hello_twice", hello(&sb); hello(&sb));
	SEED("hello_bad_layout", ok(wire_put_hello(&sb, 0x1234, 0, 0)));
	SEED("complete_before_hello",
	     complete(&sb, FW_E_LIVE, FW_E_LIVE, CARMY_STATUS_COMPLETED, 0,
		      "x", 1));
	SEED("reclaim_before_hello", ok(wire_put_reclaim(&sb)));
	/* A daemon's message sent by a client. */
	SEED("hello_then_reply", hello(&sb);
	     ok(wire_put_reply(&sb, WIRE_COMPLETE, 0)));
	SEED("hello_then_hello_ok", hello(&sb);
	     ok(wire_put_hello_ok(&sb, 16, "/x", 64, 1, 0, 0, 0)));
	/* The durable store's and the operator's requests, and a HELLO
	 * asking for an owner id back. */
	{
		static const uint8_t ex[16] = { 1, 2, 3 }, fp[16] = { 4 };
		const void *part[3] = { "p", "s", "r" };
		const size_t plen[3] = { 1, 1, 1 };

		SEED("hello_resume", ok(wire_put_hello(&sb,
						       shm_layout_signature(),
						       16, 1)));
		SEED("reserve_release", hello(&sb);
		     ok(wire_put_reserve(&sb, WIRE_RESERVE, FW_E_LIVE, ex));
		     ok(wire_put_reserve(&sb, WIRE_RELEASE, 0, ex)));
		/* ABANDON: ours running (then its COMPLETE refused, and
		 * the ABANDON again), another owner's, a completed one, a
		 * released one, an unpublished claim, no entry. */
		SEED("hello_abandon", hello(&sb);
		     abandon(&sb, FW_E_LIVE, FW_E_LIVE);
		     complete(&sb, FW_E_LIVE, FW_E_LIVE,
			      CARMY_STATUS_COMPLETED, 0, "x", 1);
		     abandon(&sb, FW_E_LIVE, FW_E_LIVE);
		     abandon(&sb, FW_E_LIVE2, FW_E_LIVE);
		     abandon(&sb, FW_E_OTHER, FW_E_OTHER);
		     abandon(&sb, FW_E_DONE, FW_E_DONE);
		     abandon(&sb, FW_E_TOMB, FW_E_TOMB);
		     abandon(&sb, FW_E_CLAIM, FW_E_CLAIM);
		     abandon(&sb, 0xffffffffu, 0));
		SEED("resolve_wait_purge", hello(&sb);
		     ok(wire_put_settle(&sb, WIRE_RESOLVE, part, plen, ex, fp, 1,
					CARMY_STATUS_COMPLETED, "ok", 2, 0));
		     ok(wire_put_settle(&sb, WIRE_WAIT, part, plen, ex, NULL,
					0, 0, NULL, 0, 100));
		     ok(wire_put_purge(&sb, 60000)));
	}

	/* Arguments-like objects, for canon: unsorted keys, every integer
	 * width, float32, str/bin/ext of each header size, nesting, a map
	 * bigger than canon's stack scratch, duplicate keys. */
	SEED("canon_map", msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	     msgpack_pack_map(&pk, 5);
	     msgpack_pack_str(&pk, 1); msgpack_pack_str_body(&pk, "b", 1);
	     msgpack_pack_array(&pk, 6);
	     msgpack_pack_uint64(&pk, 5); msgpack_pack_int16(&pk, -3);
	     msgpack_pack_int64(&pk, 70000); msgpack_pack_float(&pk, 1.5f);
	     msgpack_pack_double(&pk, -0.0); msgpack_pack_nil(&pk);
	     msgpack_pack_str(&pk, 1); msgpack_pack_str_body(&pk, "a", 1);
	     msgpack_pack_map(&pk, 1); msgpack_pack_int8(&pk, 1);
	     msgpack_pack_true(&pk);
	     msgpack_pack_bin(&pk, 3); msgpack_pack_bin_body(&pk, "bin", 3);
	     msgpack_pack_ext(&pk, 4, 7); msgpack_pack_ext_body(&pk, "ext4", 4);
	     msgpack_pack_uint16(&pk, 300);
	     msgpack_pack_ext(&pk, 3, -2); msgpack_pack_ext_body(&pk, "e3!", 3);
	     msgpack_pack_int32(&pk, -100000);
	     msgpack_pack_v4raw(&pk, 2); msgpack_pack_v4raw_body(&pk, "zz", 2));
	SEED("canon_big_map", msgpack_packer_init(&pk, &sb,
						  msgpack_sbuffer_write);
	     msgpack_pack_map(&pk, 20);
	     for (int i = 20; i-- > 0;) {
		     msgpack_pack_int(&pk, i * 37 % 20);
		     msgpack_pack_int(&pk, i);
	     });
	/* Big enough for canon's heap paths (preimage, map sort copy). */
	SEED("canon_big_values", msgpack_packer_init(&pk, &sb,
						     msgpack_sbuffer_write);
	     msgpack_pack_map(&pk, 20);
	     for (int i = 20; i-- > 0;) {
		     msgpack_pack_int(&pk, i);
		     msgpack_pack_bin(&pk, 60);
		     msgpack_pack_bin_body(&pk, big, 60);
	     });
	SEED("canon_dup_keys", msgpack_packer_init(&pk, &sb,
						   msgpack_sbuffer_write);
	     msgpack_pack_map(&pk, 2);
	     msgpack_pack_uint8(&pk, 1); msgpack_pack_int(&pk, 1);
	     msgpack_pack_uint32(&pk, 1); msgpack_pack_int(&pk, 2));
#undef SEED

	/* Hostile: counts and lengths no cap allows, the reserved byte,
	 * nesting at and past the limit, and a valid HELLO before them. */
	{
		static const uint8_t array32[] = { 0xdd, 0xff, 0xff, 0xff, 0xff };
		static const uint8_t map32[] = { 0xdf, 0xff, 0xff, 0xff, 0xff };
		static const uint8_t bin32[] = { 0xc6, 0xff, 0xff, 0xff, 0xff };
		static const uint8_t str32[] = { 0xdb, 0x7f, 0xff, 0xff, 0xff };
		static const uint8_t ext32[] = { 0xc9, 0xff, 0xff, 0xff, 0xff, 1 };
		static const uint8_t reserved[] = { 0xc1 };
		static const uint8_t in_array[] = { 0x92, 0x02, 0xc1 };
		uint8_t deep[WIRE_MAX_DEPTH + 2];

		put("wire", "array32_huge", array32, sizeof(array32));
		put("wire", "map32_huge", map32, sizeof(map32));
		put("wire", "bin32_huge", bin32, sizeof(bin32));
		put("wire", "str32_huge", str32, sizeof(str32));
		put("wire", "ext32_huge", ext32, sizeof(ext32));
		put("wire", "reserved_c1", reserved, sizeof(reserved));
		put("wire", "reserved_c1_in_array", in_array, sizeof(in_array));
		/* WIRE_MAX_DEPTH nested arrays: the deepest allowed ... */
		memset(deep, 0x91, sizeof(deep));
		deep[WIRE_MAX_DEPTH] = 0xc0;
		put("wire", "deep_at_limit", deep, WIRE_MAX_DEPTH + 1);
		/* ... and one more. */
		deep[WIRE_MAX_DEPTH] = 0x91;
		deep[WIRE_MAX_DEPTH + 1] = 0xc0;
		put("wire", "deep_past_limit", deep, WIRE_MAX_DEPTH + 2);

		msgpack_sbuffer_init(&sb);
		hello(&sb);
		msgpack_sbuffer_write(&sb, (const char *)array32,
				      sizeof(array32));
		put("wire", "hello_array32_huge", sb.data, sb.size);
		msgpack_sbuffer_destroy(&sb);

		msgpack_sbuffer_init(&sb);
		hello(&sb);
		msgpack_sbuffer_write(&sb, (const char *)deep, sizeof(deep));
		put("wire", "hello_deep_past_limit", sb.data, sb.size);
		msgpack_sbuffer_destroy(&sb);
	}
}

/* ------------------------------------------------------------ segment */

static void segment_seeds(void)
{
	struct shm_geometry geo;
	struct shm_view v;
	uint8_t *seg, buf[4096];
	size_t n, tlen, blen;
	void *p;

	if (shm_geometry(FS_CAPACITY, FS_MAX_RESULT, &geo) != 0 ||
	    posix_memalign(&p, 4096, geo.size) != 0)
		exit(1);
	seg = p;
	memset(seg, 0, geo.size);
	if (fs_build_template(seg, &geo, &v) != 0) {
		fprintf(stderr, "gen_corpus: the segment template is not what "
			"fuzz_common.h describes\n");
		exit(1);
	}
	mkdirs("segment");
	tlen = geo.capacity * sizeof(uint64_t);
	blen = geo.nbuckets * sizeof(uint64_t);

	/* The template's own header, raw: shm_sane accepts it. */
	buf[0] = 0;
	memcpy(buf + 1, seg, SHM_HEADER_SIZE);
	put("segment", "header", buf, 1 + SHM_HEADER_SIZE);

	/* Header, tickets and buckets, packed. */
	buf[0] = FS_MODE_PACKED;
	n = 1;
	memcpy(buf + n, seg, SHM_HEADER_SIZE);
	n += SHM_HEADER_SIZE;
	memcpy(buf + n, seg + geo.tickets_off, tlen);
	n += tlen;
	memcpy(buf + n, seg + geo.buckets_off, blen);
	n += blen;
	put("segment", "header_tickets_buckets", buf, n);

	/* After the header, packed: tickets, buckets, the first entry. */
	buf[0] = FS_MODE_BODY | FS_MODE_PACKED | FS_MODE_ORPHANS;
	n = 1;
	memcpy(buf + n, seg + geo.tickets_off, tlen);
	n += tlen;
	memcpy(buf + n, seg + geo.buckets_off, blen);
	n += blen;
	memcpy(buf + n, seg + geo.entries_off, sizeof(struct shm_entry));
	n += sizeof(struct shm_entry);
	put("segment", "tickets_buckets_entry0", buf, n);

	/* Every ticket SWEEPING (a carmyd killed mid-sweep), raw. */
	buf[0] = FS_MODE_BODY;
	for (uint32_t i = 0; i < geo.capacity; i++) {
		uint64_t t = shm_ticket(SHM_TICKET_SWEEPING, 500 + i);

		memcpy(buf + 1 + i * sizeof(t), &t, sizeof(t));
	}
	put("segment", "tickets_sweeping", buf, 1 + tlen);

	/* Buckets BLOCKED, TOMB and out-of-range states, the entry index
	 * past the capacity, a move cut short (two buckets naming an entry). */
	buf[0] = FS_MODE_BODY | FS_MODE_PACKED;
	memcpy(buf + 1, seg + geo.tickets_off, tlen);
	for (uint32_t i = 0; i < geo.nbuckets; i++) {
		uint64_t w;

		memcpy(&w, seg + geo.buckets_off + i * sizeof(w), sizeof(w));
		switch (i % 8) {
		case 1: w = shm_word(SHM_BLOCKED, 5, 0, 0); break;
		case 3: w = shm_word(SHM_TOMB, 1, 0, 0); break;
		case 5: w = shm_word(SHM_COMPLETED, 2, 0x123456, 0xffffff); break;
		case 6: w = shm_word(7, 0x1fff, 0xffffff, 3); break;
		default: break;
		}
		memcpy(buf + 1 + tlen + i * sizeof(w), &w, sizeof(w));
	}
	put("segment", "buckets_scribbled", buf, 1 + tlen + blen);

	/* A scribbled header, kept by carmyd's private view: another
	 * geometry, an odd move sequence, a dead carmyd's mutex word. */
	buf[0] = FS_MODE_PRIVATE;
	{
		struct shm_header h;

		memcpy(&h, seg, sizeof(h));
		h.sh_capacity = 1;
		h.sh_max_result = 0;
		h.sh_move_seq = 7;
		h.sh_tombs = 0xffffffffu;
		h.sh_alive = FS_FAKE_TID | FUTEX_OWNER_DIED;
		memcpy(buf + 1, &h, sizeof(h));
	}
	put("segment", "header_private_scribbled", buf, 1 + SHM_HEADER_SIZE);

	/* A smaller geometry that fits: shm_sane accepts it. */
	buf[0] = 0;
	{
		struct shm_header h;
		struct shm_geometry g;

		if (shm_geometry(2, 16, &g) != 0)
			exit(1);
		memcpy(&h, seg, sizeof(h));
		h.sh_capacity = g.capacity;
		h.sh_nbuckets = g.nbuckets;
		h.sh_max_result = g.max_result;
		h.sh_result_stride = g.result_stride;
		h.sh_tickets_off = g.tickets_off;
		h.sh_buckets_off = g.buckets_off;
		h.sh_entries_off = g.entries_off;
		h.sh_calls_off = g.calls_off;
		h.sh_results_off = g.results_off;
		h.sh_size = g.size;
		memcpy(buf + 1, &h, sizeof(h));
	}
	put("segment", "header_other_geometry", buf, 1 + SHM_HEADER_SIZE);
	free(seg);
}

/* ------------------------------------------------------------ journal */

/* A recipe being written: flags, then records. */
struct recipe {
	uint8_t b[16384];
	size_t n;
};

static void rput(struct recipe *r, const void *p, size_t n)
{
	if (r->n + n > sizeof(r->b)) {
		fprintf(stderr, "gen_corpus: recipe too long\n");
		exit(1);
	}
	memcpy(r->b + r->n, p, n);
	r->n += n;
}

/* The back of every record rrec() is given none for (0: each a batch of
 * its own). */
static uint8_t rback;

/* One record: op, back (0: rback), the body's length, body. */
static void rrec(struct recipe *r, uint8_t op, uint8_t back, const void *body,
		 size_t blen)
{
	uint8_t h[4] = { op, back != 0 ? back : rback, (uint8_t)blen,
			 (uint8_t)(blen >> 8) };

	rput(r, h, sizeof(h));
	rput(r, body, blen);
}

/* Exec ids are 16 bytes of one value; identities three short strings;
 * with tool not NULL, the call after them (args its first args_kept bytes
 * of args_len). */
static void rreserve_call(struct recipe *r, uint8_t x, const char *principal,
			  const char *session, const char *request_id,
			  const char *tool, const char *args,
			  uint16_t args_kept, uint32_t args_len)
{
	const char *part[3] = { principal, session, request_id };
	uint8_t body[sizeof(struct jrec_reserve) + 3 * 64 +
		     sizeof(struct jrec_call) + 64];
	struct jrec_reserve rv;
	size_t n = sizeof(rv);

	memset(&rv, 0, sizeof(rv));
	memset(rv.rv_exec, x, sizeof(rv.rv_exec));
	memset(rv.rv_fingerprint, x ^ 0x5a, sizeof(rv.rv_fingerprint));
	memset(rv.rv_rawprint, x ^ 0xa5, sizeof(rv.rv_rawprint));
	rv.rv_started_ns = 1000u * x;
	rv.rv_pid = 100u + x;
	for (int k = 0; k < 3; k++) {
		rv.rv_len[k] = (uint16_t)strlen(part[k]);
		memcpy(body + n, part[k], rv.rv_len[k]);
		n += rv.rv_len[k];
	}
	if (tool != NULL) {
		struct jrec_call jc = {
			.jc_tool_len = (uint32_t)strlen(tool),
			.jc_tool_kept = (uint16_t)strlen(tool),
			.jc_args_len = args_len, .jc_args_kept = args_kept,
			.jc_format = 1,
		};

		rv.rv_flags = JRV_CALL;
		memcpy(body + n, &jc, sizeof(jc));
		n += sizeof(jc);
		memcpy(body + n, tool, jc.jc_tool_kept);
		n += jc.jc_tool_kept;
		memcpy(body + n, args, args_kept);
		n += args_kept;
	}
	memcpy(body, &rv, sizeof(rv));
	rrec(r, CARMY_STORE_RESERVE, 0, body, n);
}

static void rreserve(struct recipe *r, uint8_t x, const char *principal,
		     const char *session, const char *request_id)
{
	rreserve_call(r, x, principal, session, request_id, NULL, NULL, 0, 0);
}

static void rcomplete(struct recipe *r, uint8_t x, const char *result)
{
	uint8_t body[sizeof(struct jrec_complete) + 64];
	struct jrec_complete cp;

	memset(&cp, 0, sizeof(cp));
	memset(cp.cp_exec, x, sizeof(cp.cp_exec));
	cp.cp_finished_ns = 2000u * x;
	cp.cp_status = CARMY_STATUS_COMPLETED;
	cp.cp_result_len = (uint32_t)strlen(result);
	memcpy(body, &cp, sizeof(cp));
	memcpy(body + sizeof(cp), result, cp.cp_result_len);
	rrec(r, CARMY_STORE_COMPLETE, 0, body, sizeof(cp) + cp.cp_result_len);
}

/* RELEASE and PURGE: the exec id alone. */
static void rexec(struct recipe *r, uint8_t op, uint8_t x)
{
	struct jrec_release rl;

	memset(rl.rl_exec, x, sizeof(rl.rl_exec));
	rrec(r, op, 0, &rl, sizeof(rl));
}

static void rresolve(struct recipe *r, uint8_t x, bool committed,
		     const char *result)
{
	uint8_t body[sizeof(struct jrec_resolve) + 64];
	struct jrec_resolve rs;

	memset(&rs, 0, sizeof(rs));
	memset(rs.rs_exec, x, sizeof(rs.rs_exec));
	rs.rs_finished_ns = rs.rs_resolved_ns = 3000u * x;
	rs.rs_uid = 1000;
	rs.rs_pid = 4321;
	rs.rs_committed = committed;
	rs.rs_status = CARMY_STATUS_COMPLETED;
	rs.rs_result_len = (uint32_t)strlen(result);
	memcpy(body, &rs, sizeof(rs));
	memcpy(body + sizeof(rs), result, rs.rs_result_len);
	rrec(r, CARMY_STORE_RESOLVE, 0, body, sizeof(rs) + rs.rs_result_len);
}

/* Every state and every op: completed, running, released and reserved
 * again, resolved both ways, purged. */
static void history(struct recipe *r, uint8_t flags)
{
	r->n = 0;
	rput(r, &flags, 1);
	if (flags & FJ_FLIP) {
		/* Byte 200 of the file: inside the first records. */
		uint8_t flip[5] = { 200, 0, 0, 0, 0x10 };

		rput(r, flip, sizeof(flip));
	}
	/* A call kept whole, and one cut (msgpack ["ab","cd"]). */
	rreserve_call(r, 1, "alice", "s1", "req-1", "echo",
		      "\x92\xa2" "ab\xa2" "cd", 7, 7);
	rreserve_call(r, 2, "alice", "s1", "req-2", "echo",
		      "\x92\xa2" "ab\xa2", 4, 7);
	rcomplete(r, 1, "{\"ok\":true}");
	rreserve(r, 3, "bob", "s2", "req-3");
	rexec(r, CARMY_STORE_RELEASE, 3);
	rreserve(r, 4, "bob", "s2", "req-3");
	rreserve(r, 5, "carol", "s3", "req-5");
	rresolve(r, 5, true, "settled by hand");
	rreserve(r, 6, "carol", "s3", "req-6");
	rresolve(r, 6, false, "");
	rreserve(r, 7, "dave", "s4", "req-7");
	rcomplete(r, 7, "old");
	rexec(r, CARMY_STORE_PURGE, 7);
	rcomplete(r, 9, "for an execution never reserved");
}

static void journal_seeds(void)
{
	static struct recipe r;
	struct jrec_reserve rv;
	uint8_t cut[4] = { CARMY_STORE_COMPLETE, 0, 200, 0 };

	mkdirs("journal");
	history(&r, FJ_ZEROS);
	put("journal", "history", r.b, r.n);
	history(&r, FJ_ZEROS | FJ_COMPACT | FJ_SUBMIT);
	put("journal", "history_compact_append", r.b, r.n);
	history(&r, FJ_ZEROS | FJ_FLIP);
	put("journal", "history_damaged", r.b, r.n);
	/* The store's own journal of that history, a bit flipped in it. */
	history(&r, FJ_ZEROS | FJ_FLIP | FJ_ACKED);
	put("journal", "history_acked_flip", r.b, r.n);

	/* The last record cut short at the end of the file: a torn tail
	 * (cut short before zeros, it would be whole on disk: damage). */
	history(&r, FJ_SUBMIT);
	rput(&r, cut, sizeof(cut));
	rput(&r, "only part of a COMPLETE", 23);
	put("journal", "history_torn", r.b, r.n);

	/* Sizes inside a sealed record that lie: identity parts longer than
	 * the record, and a batch that starts after its record. */
	r.n = 0;
	rput(&r, &(uint8_t){ FJ_ZEROS | FJ_LIE }, 1);
	memset(&rv, 0, sizeof(rv));
	memset(rv.rv_exec, 1, sizeof(rv.rv_exec));
	rv.rv_len[0] = rv.rv_len[1] = rv.rv_len[2] = CARMY_STORE_ID_MAX;
	rrec(&r, CARMY_STORE_RESERVE, 0x40, &rv, sizeof(rv));
	rreserve(&r, 2, "p", "s", "r");
	/* A call that keeps more than its whole length. */
	rreserve_call(&r, 3, "p", "s", "r3", "t", "abcdef", 6, 2);
	put("journal", "lying_sizes", r.b, r.n);

	/* A hole (sector 2 never written) in 30 reservations, whole ones
	 * after it: written while the ones before were in flight (each
	 * one's batch field is the first record: accepted, cut at the
	 * hole), or each once the one before was durable (refused). */
	for (int beside = 0; beside < 2; beside++) {
		uint8_t head[3] = { FJ_ZEROS | FJ_HOLE, 2, 0 };

		r.n = 0;
		rput(&r, head, sizeof(head));
		for (int i = 1; i <= 30; i++) {
			char id[16];

			snprintf(id, sizeof(id), "req-%d", i);
			rback = beside ? (uint8_t)(i - 1) : 0;
			rreserve(&r, (uint8_t)i, "p", "s", id);
		}
		rback = 0;
		put("journal", beside ? "hole_beside" : "hole_after", r.b,
		    r.n);
	}
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: gen_corpus DIR\n");
		return 2;
	}
	dir = argv[1];
	wire_seeds();
	segment_seeds();
	journal_seeds();
	return 0;
}
