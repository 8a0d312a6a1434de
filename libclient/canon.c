/*
 * canon.c - canonical msgpack and the fingerprint of a call.
 *
 * The pipeline is scan, decode, re-encode. wire_scan() walks the untrusted
 * bytes first, iteratively and without allocating, because msgpack-c trusts
 * every count it reads: a 5-byte array32 header claiming 4G elements makes
 * it reserve gigabytes before noticing the input ends (msgpack-c issue
 * 1013). Only bytes the scan accepts reach msgpack_unpack_next(); by then
 * every claimed element is known to exist, so msgpack-c's allocation is
 * bounded by a small multiple of the input length, and nesting is known to
 * fit its 32-deep parser stack, which also bounds the recursion below.
 *
 * Re-encoding relies on msgpack-c's packer choosing the smallest encoding
 * for integers (pack_uint64/pack_int64), str/bin/ext headers and container
 * headers, which was checked against msgpack-c 4.0 and is what the tests
 * in tests/libclient/check_canon.c pin down.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>
#include <xxhash.h>

#include "libclient/canon.h"
#include "libclient/wire.h"

/* Version tag hashed first: a change to the canonical form or to the
 * layout of the hashed parts must change every fingerprint, so an old
 * entry is never mistaken for a new call. */
#define CANON_DOMAIN "carmy-fp-1"
/* Preimages up to this size are hashed from the stack in one shot. */
#define CANON_SMALL 2048

/* One map entry while its map is being sorted: key and value are encoded
 * back to back in a scratch buffer, so an entry is copied out in one go. */
struct canon_kv {
	const char *key;	/* set once the scratch buffer stops moving */
	size_t off;
	size_t key_len;
	size_t len;		/* key and value */
};

static bool canon_check(const uint8_t *p, size_t len, size_t *pos);
static bool canon_check_array(const uint8_t *p, size_t len, size_t *pos,
			      uint64_t n);
static bool canon_check_map(const uint8_t *p, size_t len, size_t *pos,
			    uint64_t n);
static int canon_put(msgpack_packer *pk, const msgpack_object *o);
static int canon_put_map(msgpack_packer *pk, const msgpack_object_map *m);
static int canon_kv_cmp(const void *a, const void *b);
static int canon_hash_part(XXH3_state_t *st, const void *p, size_t len);
static int canon_part(const void *p, size_t len, msgpack_sbuffer *sb,
		      const void **outp, size_t *outlen);
static void put_be64(uint8_t *b, uint64_t n);

/* ---------------------------------------------------------------- API */

int canon_msgpack(const void *buf, size_t len, msgpack_sbuffer *out)
{
	msgpack_unpacked up;
	msgpack_packer pk;
	size_t off = 0;
	size_t start;
	int ret;

	if (!out)
		return -EINVAL;
	if (!buf)
		return CARMY_EINVALID_ARGS;
	/* Exactly one whole object, every count backed by real bytes. */
	if (wire_scan(buf, len, len) != (long)len)
		return CARMY_EINVALID_ARGS;

	msgpack_unpacked_init(&up);
	switch (msgpack_unpack_next(&up, buf, len, &off)) {
	case MSGPACK_UNPACK_SUCCESS:
	case MSGPACK_UNPACK_EXTRA_BYTES:
		/* The scan already demanded an exact fit; this guards
		 * against the two parsers ever disagreeing. */
		ret = off == len ? 0 : CARMY_EINVALID_ARGS;
		break;
	case MSGPACK_UNPACK_NOMEM_ERROR:
		/* msgpack-c also says NOMEM for nesting past its stack, but
		 * the scan has ruled that out: this is a real failed malloc. */
		ret = -ENOMEM;
		break;
	default:
		ret = CARMY_EINVALID_ARGS;
		break;
	}
	if (ret)
		goto out;

	start = out->size;
	msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
	ret = canon_put(&pk, &up.data);
	if (ret)
		out->size = start;
out:
	msgpack_unpacked_destroy(&up);
	return ret;
}

int canon_fingerprint(const struct carmy_call *call,
		      uint8_t out[CANON_FP_LEN])
{
	struct { const void *p; size_t len; } part[3];
	msgpack_sbuffer sb[2];
	XXH128_canonical_t digest;
	uint8_t small[CANON_SMALL];
	size_t total = sizeof(CANON_DOMAIN) - 1;
	int ret = 0;

	if (!call || !out)
		return -EINVAL;
	if (!call->tool && call->tool_len)
		return CARMY_EINVALID_ARGS;
	part[0].p = call->tool;
	part[0].len = call->tool_len;
	msgpack_sbuffer_init(&sb[0]);
	msgpack_sbuffer_init(&sb[1]);
	for (int i = 0; i < 2 && ret == 0; i++) {
		const void *p = i == 0 ? call->args : call->meta;
		size_t len = i == 0 ? call->args_len : call->meta_len;

		ret = canon_part(p, len, &sb[i], &part[i + 1].p,
				 &part[i + 1].len);
	}
	if (ret)
		goto out;

	/* Usually the whole preimage fits on the stack: one-shot XXH3. */
	for (int i = 0; i < 3; i++)
		total += 8 + part[i].len;
	if (total <= sizeof(small)) {
		size_t n = sizeof(CANON_DOMAIN) - 1;

		memcpy(small, CANON_DOMAIN, n);
		for (int i = 0; i < 3; i++) {
			put_be64(small + n, part[i].len);
			n += 8;
			if (part[i].len)
				memcpy(small + n, part[i].p, part[i].len);
			n += part[i].len;
		}
		XXH128_canonicalFromHash(&digest, XXH3_128bits(small, n));
	} else {
		XXH3_state_t *st = XXH3_createState();

		ret = -ENOMEM;
		if (!st)
			goto out;
		/* XXH3 only fails on NULL arguments, excluded here, but a
		 * failure must never yield a digest that looks valid. */
		ret = -EINVAL;
		if (XXH3_128bits_reset(st) == XXH_OK &&
		    XXH3_128bits_update(st, CANON_DOMAIN,
					sizeof(CANON_DOMAIN) - 1) == XXH_OK &&
		    canon_hash_part(st, part[0].p, part[0].len) == 0 &&
		    canon_hash_part(st, part[1].p, part[1].len) == 0 &&
		    canon_hash_part(st, part[2].p, part[2].len) == 0) {
			XXH128_canonicalFromHash(&digest, XXH3_128bits_digest(st));
			ret = 0;
		}
		XXH3_freeState(st);
		if (ret)
			goto out;
	}
	memcpy(out, digest.digest, CANON_FP_LEN);
out:
	msgpack_sbuffer_destroy(&sb[0]);
	msgpack_sbuffer_destroy(&sb[1]);
	return ret;
}

/*
 * The canonical bytes of one msgpack part: the input itself when it is
 * already canonical (no allocation), else its re-encoding in sb. A NULL
 * part with length 0 is absent and hashes as length 0: a canonical object
 * is never empty, so that collides with nothing present.
 */
static int canon_part(const void *p, size_t len, msgpack_sbuffer *sb,
		      const void **outp, size_t *outlen)
{
	int ret;

	*outp = NULL;
	*outlen = 0;
	if (!p)
		return len ? CARMY_EINVALID_ARGS : 0;
	if (wire_scan(p, len, len) != (long)len)
		return CARMY_EINVALID_ARGS;
	if (canon_is_canonical(p, len)) {
		*outp = p;
		*outlen = len;
		return 0;
	}
	ret = canon_msgpack(p, len, sb);
	if (ret)
		return ret;
	*outp = sb->data;
	*outlen = sb->size;
	return 0;
}

static void put_be64(uint8_t *b, uint64_t n)
{
	for (int i = 7; i >= 0; i--, n >>= 8)
		b[i] = (uint8_t)n;
}

/* ---------------------------------------------------------------- check */

/*
 * Is buf/len, already accepted by wire_scan(), in canonical form? Most
 * agents send arguments that are (small maps with sorted keys, minimal
 * integers), and hashing those bytes as they are saves decoding and
 * re-encoding them on every begin. The rules mirror canon_put() exactly;
 * tests/libclient/check_canon.c checks both agree on every vector.
 */
bool canon_is_canonical(const void *buf, size_t len)
{
	size_t pos = 0;

	return canon_check(buf, len, &pos) && pos == len;
}

static uint64_t be_read(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/* Smallest header width (0 = fixed form) for a length or count n, given
 * the largest value the fixed form holds (31 for str, 15 for containers,
 * none for bin: fix_max 0 with has_fix false). */
static unsigned min_width(uint64_t n, uint64_t fix_max, bool has_fix)
{
	if (has_fix && n <= fix_max)
		return 0;
	if (n < 0x100 && fix_max != 15)	/* str8/bin8; containers have none */
		return 1;
	if (n < 0x10000)
		return 2;
	return 4;
}

/* Recursion depth is bounded by wire_scan's WIRE_MAX_DEPTH. */
static bool canon_check(const uint8_t *p, size_t len, size_t *pos)
{
	uint8_t b = p[(*pos)++];
	uint64_t n, v;
	unsigned w;

	if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
		return true;
	if (b >= 0xa0 && b <= 0xbf) {		/* fixstr */
		*pos += b & 0x1f;
		return true;
	}
	if (b <= 0x8f)
		return canon_check_map(p, len, pos, b & 0x0f);
	if (b <= 0x9f)
		return canon_check_array(p, len, pos, b & 0x0f);
	switch (b) {
	case 0xcc: case 0xcd: case 0xce: case 0xcf:	/* uint8..64 */
		w = 1u << (b - 0xcc);
		v = be_read(p + *pos, w);
		*pos += w;
		/* Exactly the width the packer would choose. */
		return w == 1 ? v >= 0x80 : v >> (4 * w) != 0;
	case 0xd0: case 0xd1: case 0xd2: case 0xd3: {	/* int8..64 */
		int64_t sv;

		w = 1u << (b - 0xd0);
		v = be_read(p + *pos, w);
		*pos += w;
		sv = (int64_t)(v << (64 - 8 * w)) >> (64 - 8 * w);
		if (sv >= 0)
			return false;		/* belongs to the uint family */
		return w == 1 ? sv < -32 : sv < -(INT64_C(1) << (4 * w - 1));
	}
	case 0xca:				/* float32: widened */
		return false;
	case 0xcb:
		*pos += 8;
		return true;
	case 0xd9: case 0xda: case 0xdb:		/* str8/16/32 */
		w = 1u << (b - 0xd9);
		n = be_read(p + *pos, w);
		*pos += w + n;
		return min_width(n, 31, true) == w;
	case 0xc4: case 0xc5: case 0xc6:		/* bin8/16/32 */
		w = 1u << (b - 0xc4);
		n = be_read(p + *pos, w);
		*pos += w + n;
		return min_width(n, 0, false) == w;
	case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:	/* fixext */
		*pos += 1 + (1u << (b - 0xd4));
		return true;
	case 0xc7: case 0xc8: case 0xc9:		/* ext8/16/32 */
		w = 1u << (b - 0xc7);
		n = be_read(p + *pos, w);
		*pos += w + 1 + n;
		if (n == 1 || n == 2 || n == 4 || n == 8 || n == 16)
			return false;		/* a fixext fits */
		return min_width(n, 0, false) == w;
	case 0xdc: case 0xdd:				/* array16/32 */
		w = b == 0xdc ? 2 : 4;
		n = be_read(p + *pos, w);
		*pos += w;
		return min_width(n, 15, true) == w &&
		       canon_check_array(p, len, pos, n);
	case 0xde: case 0xdf:				/* map16/32 */
		w = b == 0xde ? 2 : 4;
		n = be_read(p + *pos, w);
		*pos += w;
		return min_width(n, 15, true) == w &&
		       canon_check_map(p, len, pos, n);
	default:
		return false;
	}
}

static bool canon_check_array(const uint8_t *p, size_t len, size_t *pos,
			      uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (!canon_check(p, len, pos))
			return false;
	return true;
}

/* Keys must be canonical themselves and strictly increasing in the order
 * canon_kv_cmp() sorts them: memcmp, then the shorter first. */
static bool canon_check_map(const uint8_t *p, size_t len, size_t *pos,
			    uint64_t n)
{
	const uint8_t *prev = NULL;
	size_t prev_len = 0;

	for (uint64_t i = 0; i < n; i++) {
		size_t start = *pos, klen;
		int c;

		if (!canon_check(p, len, pos))
			return false;
		klen = *pos - start;
		if (prev != NULL) {
			c = memcmp(prev, p + start, prev_len < klen ? prev_len : klen);
			if (c > 0 || (c == 0 && prev_len >= klen))
				return false;
		}
		prev = p + start;
		prev_len = klen;
		if (!canon_check(p, len, pos))
			return false;
	}
	return true;
}

/* ---------------------------------------------------------------- encode */

/* Recursion is bounded: wire_scan() capped nesting at CANON_MAX_DEPTH.
 * msgpack's pack functions fail only when the sbuffer cannot grow. */
static int canon_put(msgpack_packer *pk, const msgpack_object *o)
{
	int r;

	switch (o->type) {
	case MSGPACK_OBJECT_NIL:
		r = msgpack_pack_nil(pk);
		break;
	case MSGPACK_OBJECT_BOOLEAN:
		r = o->via.boolean ? msgpack_pack_true(pk) :
				     msgpack_pack_false(pk);
		break;
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		/* msgpack-c reports every non-negative value here, whatever
		 * family it was written in, so int8 5 and uint16 5 meet. */
		r = msgpack_pack_uint64(pk, o->via.u64);
		break;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		r = msgpack_pack_int64(pk, o->via.i64);
		break;
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		/* msgpack-c already widened a float32 into via.f64. */
		r = msgpack_pack_double(pk, o->via.f64);
		break;
	case MSGPACK_OBJECT_STR:
		r = msgpack_pack_str(pk, o->via.str.size);
		if (!r)
			r = msgpack_pack_str_body(pk, o->via.str.ptr,
						  o->via.str.size);
		break;
	case MSGPACK_OBJECT_BIN:
		r = msgpack_pack_bin(pk, o->via.bin.size);
		if (!r)
			r = msgpack_pack_bin_body(pk, o->via.bin.ptr,
						  o->via.bin.size);
		break;
	case MSGPACK_OBJECT_EXT:
		r = msgpack_pack_ext(pk, o->via.ext.size, o->via.ext.type);
		if (!r)
			r = msgpack_pack_ext_body(pk, o->via.ext.ptr,
						  o->via.ext.size);
		break;
	case MSGPACK_OBJECT_ARRAY:
		r = msgpack_pack_array(pk, o->via.array.size);
		for (uint32_t i = 0; !r && i < o->via.array.size; i++) {
			int ret = canon_put(pk, &o->via.array.ptr[i]);

			if (ret)
				return ret;
		}
		break;
	case MSGPACK_OBJECT_MAP:
		return canon_put_map(pk, &o->via.map);
	default:
		return CARMY_EINVALID_ARGS;
	}
	return r ? -ENOMEM : 0;
}

/*
 * Keys must be compared in canonical form, which is only known after
 * encoding them, so every entry is encoded into a scratch buffer first,
 * then the entries are sorted and copied out. Each byte is copied once per
 * enclosing map, at most CANON_MAX_DEPTH times.
 */
static int canon_put_map(msgpack_packer *pk, const msgpack_object_map *m)
{
	msgpack_sbuffer scratch;
	msgpack_packer spk;
	struct canon_kv *kv;
	int ret;

	if (msgpack_pack_map(pk, m->size))
		return -ENOMEM;
	if (m->size == 0)
		return 0;

	/* m->size is at most half the input length (wire_scan). */
	kv = calloc(m->size, sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	msgpack_sbuffer_init(&scratch);
	msgpack_packer_init(&spk, &scratch, msgpack_sbuffer_write);

	for (uint32_t i = 0; i < m->size; i++) {
		kv[i].off = scratch.size;
		ret = canon_put(&spk, &m->ptr[i].key);
		if (ret)
			goto out;
		kv[i].key_len = scratch.size - kv[i].off;
		ret = canon_put(&spk, &m->ptr[i].val);
		if (ret)
			goto out;
		kv[i].len = scratch.size - kv[i].off;
	}
	for (uint32_t i = 0; i < m->size; i++)
		kv[i].key = scratch.data + kv[i].off;

	qsort(kv, m->size, sizeof(*kv), canon_kv_cmp);

	/* Sorted, equal keys are neighbours. Letting one win would make
	 * the fingerprint depend on which the decoder kept. */
	for (uint32_t i = 1; i < m->size; i++) {
		if (canon_kv_cmp(&kv[i - 1], &kv[i]) == 0) {
			ret = CARMY_EINVALID_ARGS;
			goto out;
		}
	}

	ret = 0;
	for (uint32_t i = 0; i < m->size; i++) {
		if (pk->callback(pk->data, kv[i].key, kv[i].len)) {
			ret = -ENOMEM;
			break;
		}
	}
out:
	msgpack_sbuffer_destroy(&scratch);
	free(kv);
	return ret;
}

/* Bytewise, then shorter first. Canonical encodings are prefix-free, so
 * the length rule only settles ties between equal keys; it is kept so the
 * order is a total one whatever the bytes are. */
static int canon_kv_cmp(const void *a, const void *b)
{
	const struct canon_kv *x = a, *y = b;
	size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
	int c = memcmp(x->key, y->key, n);

	if (c)
		return c;
	return (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

/* ---------------------------------------------------------------- hash */

/* Length first, as 8 big-endian bytes, so that no byte can move from the
 * end of one part to the start of the next without changing the hash. */
static int canon_hash_part(XXH3_state_t *st, const void *p, size_t len)
{
	uint8_t be[8];

	put_be64(be, len);
	if (XXH3_128bits_update(st, be, sizeof(be)) != XXH_OK)
		return -EINVAL;
	if (len && XXH3_128bits_update(st, p, len) != XXH_OK)
		return -EINVAL;
	return 0;
}
