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

/* One map entry while its map is being sorted: key and value are encoded
 * back to back in a scratch buffer, so an entry is copied out in one go. */
struct canon_kv {
	const char *key;	/* set once the scratch buffer stops moving */
	size_t off;
	size_t key_len;
	size_t len;		/* key and value */
};

static int canon_put(msgpack_packer *pk, const msgpack_object *o);
static int canon_put_map(msgpack_packer *pk, const msgpack_object_map *m);
static int canon_kv_cmp(const void *a, const void *b);
static int canon_hash_part(XXH3_state_t *st, const void *p, size_t len);
static int canon_hash_msgpack(XXH3_state_t *st, msgpack_sbuffer *sb,
			      const void *p, size_t len);

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
	XXH3_state_t *st;
	msgpack_sbuffer sb;
	XXH128_canonical_t digest;
	int ret;

	if (!call || !out)
		return -EINVAL;
	if (!call->tool && call->tool_len)
		return CARMY_EINVALID_ARGS;

	st = XXH3_createState();
	if (!st)
		return -ENOMEM;
	msgpack_sbuffer_init(&sb);

	/* XXH3 only fails on NULL arguments, which are excluded here, but
	 * a failure must never yield a digest that looks valid. */
	ret = -EINVAL;
	if (XXH3_128bits_reset(st) != XXH_OK)
		goto out;
	if (XXH3_128bits_update(st, CANON_DOMAIN,
				sizeof(CANON_DOMAIN) - 1) != XXH_OK)
		goto out;

	ret = canon_hash_part(st, call->tool, call->tool_len);
	if (ret)
		goto out;
	ret = canon_hash_msgpack(st, &sb, call->args, call->args_len);
	if (ret)
		goto out;
	ret = canon_hash_msgpack(st, &sb, call->meta, call->meta_len);
	if (ret)
		goto out;

	XXH128_canonicalFromHash(&digest, XXH3_128bits_digest(st));
	memcpy(out, digest.digest, CANON_FP_LEN);
out:
	msgpack_sbuffer_destroy(&sb);
	XXH3_freeState(st);
	return ret;
}

/* ---------------------------------------------------------------- scan */

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
	uint64_t n = len;

	for (int i = 7; i >= 0; i--, n >>= 8)
		be[i] = (uint8_t)n;
	if (XXH3_128bits_update(st, be, sizeof(be)) != XXH_OK)
		return -EINVAL;
	if (len && XXH3_128bits_update(st, p, len) != XXH_OK)
		return -EINVAL;
	return 0;
}

/* A canonical object is never empty, so length 0 can stand for "absent"
 * without colliding with anything present. */
static int canon_hash_msgpack(XXH3_state_t *st, msgpack_sbuffer *sb,
			      const void *p, size_t len)
{
	int ret;

	if (!p)
		return len ? CARMY_EINVALID_ARGS : canon_hash_part(st, NULL, 0);

	msgpack_sbuffer_clear(sb);
	ret = canon_msgpack(p, len, sb);
	if (ret)
		return ret;
	return canon_hash_part(st, sb->data, sb->size);
}
