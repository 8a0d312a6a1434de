/*
 * record.c - the journal's record format (drawn in docs/journal.md): how
 * big a request's record is, writing one, sealing one (marks, checksum,
 * light pieces and the head's CRC), and whether the bytes at an offset
 * are a whole, good record of either format. Pure functions of memory:
 * no file, no struct jnl. Everything above it in internal.h's order
 * writes and reads records through these.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <xxhash.h>

#include "carmy_store.h"
#include "stores/journal/internal.h"

static bool body_ok(uint8_t op, const uint8_t *body, size_t blen);
static bool call_ok(const uint8_t *p, size_t room);
static void call_kept(const struct carmy_store_record *r, uint16_t *tool,
		      uint16_t *args);
static uint32_t head_check(uint64_t salt, const uint8_t *p);
static uint64_t rec_sum(const uint8_t *p, size_t len, uint64_t salt);

/* ---------------------------------------------------------------- writing */

size_t jnl_rec_size(const struct carmy_store_req *req)
{
	const struct carmy_store_record *r = req->rec;
	size_t n = sizeof(struct jrec_head);

	switch (req->op) {
	case CARMY_STORE_RESERVE: {
		uint16_t tk, ak;

		call_kept(r, &tk, &ak);
		n += sizeof(struct jrec_reserve) + r->len[0] + r->len[1] +
		     r->len[2] + sizeof(struct jrec_call) + tk + ak;
		break;
	}
	case CARMY_STORE_COMPLETE:
		n += sizeof(struct jrec_complete) + r->result_len;
		break;
	case CARMY_STORE_RESOLVE:
		n += sizeof(struct jrec_resolve) +
		     (r->state == CARMY_STORE_COMPLETED ? r->result_len : 0);
		break;
	default:
		n += sizeof(struct jrec_release);
		break;
	}
	return (n + 7) / 8 * 8 + 8;
}

/* Write req's record, len bytes (jnl_rec_size), at p, as number seq, with
 * batch the first record not yet durable when it is written (its batch's
 * first, or that of an earlier batch still in flight), sealed with salt
 * for file offset off. */
void jnl_rec_put(const struct carmy_store_req *req, uint64_t seq,
		 uint64_t batch, uint64_t salt, uint64_t off, uint8_t *p,
		 size_t len)
{
	const struct carmy_store_record *r = req->rec;
	struct jrec_head h = { .jr_len = (uint32_t)len, .jr_op = (uint8_t)req->op,
			       .jr_seq = seq, .jr_batch = batch };
	uint8_t *q = p + sizeof(h);

	memset(p, 0, len);
	memcpy(p, &h, sizeof(h));
	switch (req->op) {
	case CARMY_STORE_RESERVE: {
		struct jrec_reserve rv = { .rv_started_ns = r->started_ns,
					   .rv_pid = r->pid,
					   .rv_flags = JRV_CALL };
		struct jrec_call jc = { .jc_tool_len = r->tool_len,
					.jc_args_len = r->args_len,
					.jc_format = r->result_format };

		memcpy(rv.rv_exec, r->exec, 16);
		memcpy(rv.rv_fingerprint, r->fingerprint, 16);
		memcpy(rv.rv_rawprint, r->rawprint, 16);
		memcpy(rv.rv_len, r->len, sizeof(rv.rv_len));
		memcpy(q, &rv, sizeof(rv));
		q += sizeof(rv);
		for (int k = 0; k < 3; k++) {
			memcpy(q, r->part[k], r->len[k]);
			q += r->len[k];
		}
		call_kept(r, &jc.jc_tool_kept, &jc.jc_args_kept);
		memcpy(q, &jc, sizeof(jc));
		q += sizeof(jc);
		if (jc.jc_tool_kept > 0)
			memcpy(q, r->tool, jc.jc_tool_kept);
		q += jc.jc_tool_kept;
		if (jc.jc_args_kept > 0)
			memcpy(q, r->args, jc.jc_args_kept);
		break;
	}
	case CARMY_STORE_COMPLETE: {
		struct jrec_complete cp = {
			.cp_finished_ns = r->finished_ns,
			.cp_status = r->status,
			.cp_result_code = r->result_code,
			.cp_result_len = r->result_len,
		};

		memcpy(cp.cp_exec, r->exec, 16);
		memcpy(q, &cp, sizeof(cp));
		if (r->result_len > 0)
			memcpy(q + sizeof(cp), r->result, r->result_len);
		break;
	}
	case CARMY_STORE_RESOLVE: {
		bool committed = r->state == CARMY_STORE_COMPLETED;
		struct jrec_resolve rs = {
			.rs_finished_ns = r->finished_ns,
			.rs_resolved_ns = r->resolved_ns,
			.rs_uid = r->resolved_uid,
			.rs_pid = r->resolved_pid,
			.rs_status = r->status,
			.rs_result_code = r->result_code,
			.rs_result_len = committed ? r->result_len : 0,
			.rs_committed = committed,
		};

		memcpy(rs.rs_exec, r->exec, 16);
		memcpy(q, &rs, sizeof(rs));
		if (committed && r->result_len > 0)
			memcpy(q + sizeof(rs), r->result, r->result_len);
		break;
	}
	default: {
		struct jrec_release rl;

		memcpy(rl.rl_exec, r->exec, 16);
		memcpy(q, &rl, sizeof(rl));
		break;
	}
	}
	jnl_rec_seal(p, off, salt);
}

/*
 * Seal the record at p, which goes at file offset off: its head's len, op,
 * seq and batch and its payload are written, padding zeroed. Sets the
 * marks, the checksum, the count of light pieces (which depends on where
 * the sector boundaries fall, so a record copied elsewhere is sealed
 * again) and, last, the head's check over all of that.
 */
void jnl_rec_seal(uint8_t *p, uint64_t off, uint64_t salt)
{
	struct jrec_head h;
	uint32_t light, zero;
	uint64_t sum;

	memcpy(&h, p, sizeof(h));
	h.jr_mark = JREC_MARK;
	h.jr_pad = 0;
	h.jr_light = h.jr_check = 0;
	memcpy(p, &h, sizeof(h));
	sum = rec_sum(p, h.jr_len, salt);
	memcpy(p + h.jr_len - 8, &sum, 8);
	jnl_rec_pieces(p, off, h.jr_len, &light, &zero);
	h.jr_light = light | JREC_MARK << 24;
	memcpy(p, &h, sizeof(h));
	h.jr_check = head_check(salt, p);
	memcpy(p, &h, sizeof(h));
}

/* ---------------------------------------------------------------- checking */

/* Is there a whole, good record with sequence number seq at p? Returns its
 * length, or 0. Only bytes below avail are read. */
size_t jnl_rec_valid(uint64_t salt, const uint8_t *p, size_t avail,
		     uint64_t seq)
{
	struct jrec_head h;
	uint64_t sum;

	if (avail < REC_MIN)
		return 0;
	memcpy(&h, p, sizeof(h));
	if (h.jr_len < REC_MIN || h.jr_len > avail || h.jr_len % 8 != 0 ||
	    h.jr_len > REC_MAX || h.jr_seq != seq || h.jr_batch > h.jr_seq ||
	    !jnl_rec_head_ok(salt, p))
		return 0;
	memcpy(&sum, p + h.jr_len - 8, 8);
	if (sum != rec_sum(p, h.jr_len, salt))
		return 0;
	/* The checksum proves these bytes were written by us; the sizes
	 * inside must still agree with the length. */
	if (!body_ok(h.jr_op, p + sizeof(h), h.jr_len - sizeof(h) - 8))
		return 0;
	return h.jr_len;
}

/* The same for a record of a format 1 file. */
size_t jnl_rec_valid_v1(uint64_t salt, const uint8_t *p, size_t avail,
			uint64_t seq)
{
	struct jrec_head_v1 h;
	uint64_t sum;

	if (avail < REC_MIN_V1)
		return 0;
	memcpy(&h, p, sizeof(h));
	if (h.jr_len < REC_MIN_V1 || h.jr_len > avail || h.jr_len % 8 != 0 ||
	    h.jr_len > REC_MAX || h.jr_seq != seq || h.jr_batch > h.jr_seq)
		return 0;
	memcpy(&sum, p + h.jr_len - 8, 8);
	if (sum != XXH3_64bits_withSeed(p, h.jr_len - 8, salt))
		return 0;
	if (!body_ok(h.jr_op, p + sizeof(h), h.jr_len - sizeof(h) - 8))
		return 0;
	return h.jr_len;
}

/* Do the sizes inside a payload of op (blen bytes, with its padding)
 * agree with it? */
static bool body_ok(uint8_t op, const uint8_t *body, size_t blen)
{
	switch (op) {
	case CARMY_STORE_RESERVE: {
		struct jrec_reserve rv;
		size_t id = 0;

		if (blen < sizeof(rv))
			return false;
		memcpy(&rv, body, sizeof(rv));
		for (int k = 0; k < 3; k++) {
			if (rv.rv_len[k] == 0 ||
			    rv.rv_len[k] > CARMY_STORE_ID_MAX)
				return false;
			id += rv.rv_len[k];
		}
		if (sizeof(rv) + id > blen || (rv.rv_flags & ~JRV_CALL) != 0)
			return false;
		return !(rv.rv_flags & JRV_CALL) ||
		       call_ok(body + sizeof(rv) + id, blen - sizeof(rv) - id);
	}
	case CARMY_STORE_COMPLETE:
	case CARMY_STORE_RESOLVE: {
		/* Both end in a result whose length is in their fixed part. */
		bool cp = op == CARMY_STORE_COMPLETE;
		size_t fixed = cp ? sizeof(struct jrec_complete) :
				    sizeof(struct jrec_resolve);
		uint32_t rlen;

		if (blen < fixed)
			return false;
		memcpy(&rlen, body + (cp ? offsetof(struct jrec_complete,
						    cp_result_len) :
					   offsetof(struct jrec_resolve,
						    rs_result_len)),
		       sizeof(rlen));
		return fixed + (size_t)rlen <= blen;
	}
	case CARMY_STORE_RELEASE:
	case CARMY_STORE_PURGE:
		return blen >= sizeof(struct jrec_release);
	default:
		return false;
	}
}

/* Is the struct jrec_call at p, with room bytes of the payload left from
 * it, one we write: kept lengths within the bounds and the whole lengths,
 * and the kept bytes there? */
static bool call_ok(const uint8_t *p, size_t room)
{
	struct jrec_call jc;

	if (room < sizeof(jc))
		return false;
	memcpy(&jc, p, sizeof(jc));
	return jc.jc_tool_kept <= CARMY_STORE_TOOL_MAX &&
	       jc.jc_tool_kept <= jc.jc_tool_len &&
	       jc.jc_args_kept <= CARMY_STORE_ARGS_MAX &&
	       jc.jc_args_kept <= jc.jc_args_len &&
	       sizeof(jc) + (size_t)jc.jc_tool_kept + jc.jc_args_kept <= room;
}

/* How many bytes of r's tool name and arguments its RESERVE keeps: what r
 * says, within the bounds and the whole lengths (the size and the writing
 * of a record agree on it). */
static void call_kept(const struct carmy_store_record *r, uint16_t *tool,
		      uint16_t *args)
{
	uint32_t tk = r->tool != NULL ? r->tool_kept : 0;
	uint32_t ak = r->args != NULL ? r->args_kept : 0;

	tk = tk < CARMY_STORE_TOOL_MAX ? tk : CARMY_STORE_TOOL_MAX;
	tk = tk < r->tool_len ? tk : r->tool_len;
	ak = ak < CARMY_STORE_ARGS_MAX ? ak : CARMY_STORE_ARGS_MAX;
	ak = ak < r->args_len ? ak : r->args_len;
	*tool = (uint16_t)tk;
	*args = (uint16_t)ak;
}

/* The head at p is whole: its marks, and its check. */
bool jnl_rec_head_ok(uint64_t salt, const uint8_t *p)
{
	struct jrec_head h;

	memcpy(&h, p, sizeof(h));
	return h.jr_mark == JREC_MARK && h.jr_light >> 24 == JREC_MARK &&
	       h.jr_check == head_check(salt, p);
}

/* ---------------------------------------------------------------- sums */

/*
 * CRC-32C (Castagnoli) of the salt, then the head at p up to jr_check. A
 * CRC rather than a hash: it finds every error of up to 5 bits in these 36
 * bytes, where a hash would only be unlikely to miss one; the salt makes a
 * head of another journal fail it.
 */
static uint32_t head_check(uint64_t salt, const uint8_t *p)
{
	uint8_t in[8 + offsetof(struct jrec_head, jr_check)];

	memcpy(in, &salt, 8);
	memcpy(in + 8, p, sizeof(in) - 8);
	return jnl_crc32c(in, sizeof(in));
}

/* CRC-32C a byte at a time, by table (reflected polynomial 0x82f63b78):
 * where the processor has no instruction for it. */
uint32_t jnl_crc32c_table(const void *buf, size_t n)
{
	static const uint32_t t[256] = {
	0x00000000, 0xf26b8303, 0xe13b70f7, 0x1350f3f4,
	0xc79a971f, 0x35f1141c, 0x26a1e7e8, 0xd4ca64eb,
	0x8ad958cf, 0x78b2dbcc, 0x6be22838, 0x9989ab3b,
	0x4d43cfd0, 0xbf284cd3, 0xac78bf27, 0x5e133c24,
	0x105ec76f, 0xe235446c, 0xf165b798, 0x030e349b,
	0xd7c45070, 0x25afd373, 0x36ff2087, 0xc494a384,
	0x9a879fa0, 0x68ec1ca3, 0x7bbcef57, 0x89d76c54,
	0x5d1d08bf, 0xaf768bbc, 0xbc267848, 0x4e4dfb4b,
	0x20bd8ede, 0xd2d60ddd, 0xc186fe29, 0x33ed7d2a,
	0xe72719c1, 0x154c9ac2, 0x061c6936, 0xf477ea35,
	0xaa64d611, 0x580f5512, 0x4b5fa6e6, 0xb93425e5,
	0x6dfe410e, 0x9f95c20d, 0x8cc531f9, 0x7eaeb2fa,
	0x30e349b1, 0xc288cab2, 0xd1d83946, 0x23b3ba45,
	0xf779deae, 0x05125dad, 0x1642ae59, 0xe4292d5a,
	0xba3a117e, 0x4851927d, 0x5b016189, 0xa96ae28a,
	0x7da08661, 0x8fcb0562, 0x9c9bf696, 0x6ef07595,
	0x417b1dbc, 0xb3109ebf, 0xa0406d4b, 0x522bee48,
	0x86e18aa3, 0x748a09a0, 0x67dafa54, 0x95b17957,
	0xcba24573, 0x39c9c670, 0x2a993584, 0xd8f2b687,
	0x0c38d26c, 0xfe53516f, 0xed03a29b, 0x1f682198,
	0x5125dad3, 0xa34e59d0, 0xb01eaa24, 0x42752927,
	0x96bf4dcc, 0x64d4cecf, 0x77843d3b, 0x85efbe38,
	0xdbfc821c, 0x2997011f, 0x3ac7f2eb, 0xc8ac71e8,
	0x1c661503, 0xee0d9600, 0xfd5d65f4, 0x0f36e6f7,
	0x61c69362, 0x93ad1061, 0x80fde395, 0x72966096,
	0xa65c047d, 0x5437877e, 0x4767748a, 0xb50cf789,
	0xeb1fcbad, 0x197448ae, 0x0a24bb5a, 0xf84f3859,
	0x2c855cb2, 0xdeeedfb1, 0xcdbe2c45, 0x3fd5af46,
	0x7198540d, 0x83f3d70e, 0x90a324fa, 0x62c8a7f9,
	0xb602c312, 0x44694011, 0x5739b3e5, 0xa55230e6,
	0xfb410cc2, 0x092a8fc1, 0x1a7a7c35, 0xe811ff36,
	0x3cdb9bdd, 0xceb018de, 0xdde0eb2a, 0x2f8b6829,
	0x82f63b78, 0x709db87b, 0x63cd4b8f, 0x91a6c88c,
	0x456cac67, 0xb7072f64, 0xa457dc90, 0x563c5f93,
	0x082f63b7, 0xfa44e0b4, 0xe9141340, 0x1b7f9043,
	0xcfb5f4a8, 0x3dde77ab, 0x2e8e845f, 0xdce5075c,
	0x92a8fc17, 0x60c37f14, 0x73938ce0, 0x81f80fe3,
	0x55326b08, 0xa759e80b, 0xb4091bff, 0x466298fc,
	0x1871a4d8, 0xea1a27db, 0xf94ad42f, 0x0b21572c,
	0xdfeb33c7, 0x2d80b0c4, 0x3ed04330, 0xccbbc033,
	0xa24bb5a6, 0x502036a5, 0x4370c551, 0xb11b4652,
	0x65d122b9, 0x97baa1ba, 0x84ea524e, 0x7681d14d,
	0x2892ed69, 0xdaf96e6a, 0xc9a99d9e, 0x3bc21e9d,
	0xef087a76, 0x1d63f975, 0x0e330a81, 0xfc588982,
	0xb21572c9, 0x407ef1ca, 0x532e023e, 0xa145813d,
	0x758fe5d6, 0x87e466d5, 0x94b49521, 0x66df1622,
	0x38cc2a06, 0xcaa7a905, 0xd9f75af1, 0x2b9cd9f2,
	0xff56bd19, 0x0d3d3e1a, 0x1e6dcdee, 0xec064eed,
	0xc38d26c4, 0x31e6a5c7, 0x22b65633, 0xd0ddd530,
	0x0417b1db, 0xf67c32d8, 0xe52cc12c, 0x1747422f,
	0x49547e0b, 0xbb3ffd08, 0xa86f0efc, 0x5a048dff,
	0x8ecee914, 0x7ca56a17, 0x6ff599e3, 0x9d9e1ae0,
	0xd3d3e1ab, 0x21b862a8, 0x32e8915c, 0xc083125f,
	0x144976b4, 0xe622f5b7, 0xf5720643, 0x07198540,
	0x590ab964, 0xab613a67, 0xb831c993, 0x4a5a4a90,
	0x9e902e7b, 0x6cfbad78, 0x7fab5e8c, 0x8dc0dd8f,
	0xe330a81a, 0x115b2b19, 0x020bd8ed, 0xf0605bee,
	0x24aa3f05, 0xd6c1bc06, 0xc5914ff2, 0x37faccf1,
	0x69e9f0d5, 0x9b8273d6, 0x88d28022, 0x7ab90321,
	0xae7367ca, 0x5c18e4c9, 0x4f48173d, 0xbd23943e,
	0xf36e6f75, 0x0105ec76, 0x12551f82, 0xe03e9c81,
	0x34f4f86a, 0xc69f7b69, 0xd5cf889d, 0x27a40b9e,
	0x79b737ba, 0x8bdcb4b9, 0x988c474d, 0x6ae7c44e,
	0xbe2da0a5, 0x4c4623a6, 0x5f16d052, 0xad7d5351,
	};
	const uint8_t *p = buf;
	uint32_t crc = 0xffffffffu;

	while (n-- > 0)
		crc = crc >> 8 ^ t[(crc ^ *p++) & 0xff];
	return ~crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same with SSE4.2's crc32 instruction, 8 bytes at a time: a head
 * is checked in a few nanoseconds instead of a hundred and more, which
 * a restart reading millions of records feels. */
__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42(const void *buf, size_t n)
{
	const uint8_t *p = buf;
	uint64_t crc = 0xffffffffu;

	for (; n >= 8; p += 8, n -= 8) {
		uint64_t w;

		memcpy(&w, p, 8);
		crc = __builtin_ia32_crc32di(crc, w);
	}
	for (; n > 0; p++, n--)
		crc = __builtin_ia32_crc32qi((uint32_t)crc, *p);
	return ~(uint32_t)crc;
}
#endif

/* CRC-32C of n bytes at buf (initial value and final xor 0xffffffff, as
 * iSCSI and ext4 use it: "123456789" gives 0xe3069283), with the
 * processor's instruction when it has one. */
uint32_t jnl_crc32c(const void *buf, size_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (__builtin_cpu_supports("sse4.2"))
		return crc32c_sse42(buf, n);
#endif
	return jnl_crc32c_table(buf, n);
}

/* A record's checksum: XXH3 of its head up to jr_light (which it leaves
 * out: the light pieces are counted with the checksum in place), seeding
 * XXH3 of its payload and padding, under the file's salt. */
static uint64_t rec_sum(const uint8_t *p, size_t len, uint64_t salt)
{
	const size_t hl = sizeof(struct jrec_head);
	uint64_t seed = XXH3_64bits_withSeed(p, offsetof(struct jrec_head,
							 jr_light), salt);

	return XXH3_64bits_withSeed(p + hl, len - hl - 8, seed);
}

/*
 * The pieces of the record at p (len bytes at file offset off) after its
 * head: from the head's end or a sector boundary to the next boundary or
 * the record's end. How many are light (at most JREC_LIGHT_BITS bits set)
 * and how many all zeros. A piece stops being counted once it is heavy,
 * so a record of ordinary bytes costs a word or two per piece.
 */
void jnl_rec_pieces(const uint8_t *p, uint64_t off, size_t len,
		    uint32_t *light, uint32_t *zero)
{
	*light = *zero = 0;
	for (uint64_t a = off + sizeof(struct jrec_head); a < off + len;) {
		uint64_t b = (a / JREC_SECTOR + 1) * JREC_SECTOR;
		unsigned bits = 0;

		if (b > off + len)
			b = off + len;
		for (uint64_t q = a; q < b && bits <= JREC_LIGHT_BITS; q += 8) {
			uint64_t w;

			memcpy(&w, p + (q - off), 8);
			bits += (unsigned)__builtin_popcountll(w);
		}
		*light += bits <= JREC_LIGHT_BITS;
		*zero += bits == 0;
		a = b;
	}
}
