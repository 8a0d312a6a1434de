/*
 * canon.c - canonical msgpack and the fingerprint of a call.
 *
 * The pipeline is scan, then re-encode. wire_scan() walks the untrusted
 * bytes first, iteratively and without allocating, and accepts them only if
 * they are exactly one object whose every count and length is backed by
 * bytes that are really there, nested at most WIRE_MAX_DEPTH deep. The
 * re-encoder below then reads them directly, byte by byte (no msgpack-c
 * object tree, no zone), and writes the canonical form described in
 * canon.h. Its recursion is bounded by that depth.
 *
 * The output is never longer than twice the input (only a float32 grows,
 * from 5 to 9 bytes), so one buffer of that size, on the stack for the usual
 * small arguments, holds it. A map's entries are written where they fall,
 * then, if their keys are out of order, sorted and moved into place.
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
/* Preimages up to this size are built and hashed on the stack. */
#define CANON_SMALL 2048
/* Maps up to this many entries are sorted with stack space. */
#define CANON_SMALL_MAP 16

/* The re-encoder's output buffer. */
struct out {
	uint8_t *p;
	size_t n;
};

/* One map entry, at off in the output: its key's length and its total. */
struct kv {
	size_t off;
	size_t klen;
	size_t len;
};

static int emit(const uint8_t *in, size_t *pos, struct out *o);
static int emit_array(const uint8_t *in, size_t *pos, struct out *o,
		      uint64_t n);
static int emit_map(const uint8_t *in, size_t *pos, struct out *o,
		    uint64_t n);
static void put_uint(struct out *o, uint64_t v);
static void put_neg(struct out *o, int64_t v);
static void put_head(struct out *o, uint64_t n, uint8_t fix, uint64_t fix_max,
		     uint8_t op8, uint8_t op16, uint8_t op32);
static void put_be(struct out *o, uint64_t v, unsigned width);
static uint64_t get_be(const uint8_t *p, unsigned width);
static int kv_cmp(const uint8_t *base, const struct kv *a, const struct kv *b);

/* ---------------------------------------------------------------- API */

int canon_msgpack(const void *buf, size_t len, msgpack_sbuffer *out)
{
	struct out o = { NULL, 0 };
	size_t pos = 0;
	int ret;

	if (!out)
		return -EINVAL;
	if (!buf || wire_scan(buf, len, len) != (long)len)
		return CARMY_EINVALID_ARGS;
	o.p = malloc(2 * len + 16);
	if (!o.p)
		return -ENOMEM;
	ret = emit(buf, &pos, &o);
	if (ret == 0 && msgpack_sbuffer_write(out, (const char *)o.p, o.n) != 0)
		ret = -ENOMEM;
	free(o.p);
	return ret;
}

int canon_fingerprint(const struct carmy_call *call,
		      uint8_t out[CANON_FP_LEN])
{
	const size_t dlen = sizeof(CANON_DOMAIN) - 1;
	const void *part[3];
	size_t plen[3], need, pos;
	uint8_t small[CANON_SMALL], *buf = small;
	XXH128_canonical_t digest;
	struct out o;
	int ret = 0;

	if (!call || !out)
		return -EINVAL;
	part[0] = call->tool;
	plen[0] = call->tool_len;
	part[1] = call->args;
	plen[1] = call->args_len;
	part[2] = call->meta;
	plen[2] = call->meta_len;
	if (!part[0] && plen[0])
		return CARMY_EINVALID_ARGS;

	/* The preimage: domain, then each part as an 8-byte big-endian
	 * length and its bytes, so no byte can slide from one part into
	 * the next. args and meta go in canonical form; absent (NULL, 0)
	 * hashes as length 0, which no canonical object has. */
	need = dlen + 24 + plen[0] + 2 * (plen[1] + plen[2]) + 32;
	if (need > sizeof(small)) {
		buf = malloc(need);
		if (!buf)
			return -ENOMEM;
	}
	memcpy(buf, CANON_DOMAIN, dlen);
	o.p = buf;
	o.n = dlen;
	for (int i = 0; i < 3; i++) {
		size_t at = o.n;

		o.n += 8;
		if (i == 0 || !part[i]) {
			if (i > 0 && plen[i]) {
				ret = CARMY_EINVALID_ARGS;
				goto out;
			}
			if (plen[i])
				memcpy(o.p + o.n, part[i], plen[i]);
			o.n += plen[i];
		} else {
			if (wire_scan(part[i], plen[i], plen[i]) != (long)plen[i]) {
				ret = CARMY_EINVALID_ARGS;
				goto out;
			}
			pos = 0;
			ret = emit(part[i], &pos, &o);
			if (ret)
				goto out;
		}
		{
			struct out len_at = { o.p + at, 0 };

			put_be(&len_at, o.n - at - 8, 8);
		}
	}
	XXH128_canonicalFromHash(&digest, XXH3_128bits(o.p, o.n));
	memcpy(out, digest.digest, CANON_FP_LEN);
out:
	if (buf != small)
		free(buf);
	return ret;
}

/* ---------------------------------------------------------------- emit */

/* Re-encode the object at in[*pos] canonically onto o. The input has passed
 * wire_scan(), so every length read here is backed by real bytes. Fails
 * only on duplicate map keys (or -ENOMEM for a big map's scratch). */
static int emit(const uint8_t *in, size_t *pos, struct out *o)
{
	uint8_t b = in[(*pos)++];
	unsigned w;
	uint64_t n;

	if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
		o->p[o->n++] = b;	/* fixints, nil, booleans */
		return 0;
	}
	if (b <= 0x8f)
		return emit_map(in, pos, o, b & 0x0f);
	if (b <= 0x9f)
		return emit_array(in, pos, o, b & 0x0f);
	if (b <= 0xbf) {
		n = b & 0x1f;
		goto str;
	}
	switch (b) {
	case 0xcc: case 0xcd: case 0xce: case 0xcf:	/* uint8..64 */
		w = 1u << (b - 0xcc);
		put_uint(o, get_be(in + *pos, w));
		*pos += w;
		return 0;
	case 0xd0: case 0xd1: case 0xd2: case 0xd3: {	/* int8..64 */
		int64_t v;

		w = 1u << (b - 0xd0);
		v = (int64_t)(get_be(in + *pos, w) << (64 - 8 * w)) >> (64 - 8 * w);
		*pos += w;
		/* Non-negative values belong to the unsigned family, so
		 * int8 5 and uint16 5 are the same call. */
		if (v >= 0)
			put_uint(o, (uint64_t)v);
		else
			put_neg(o, v);
		return 0;
	}
	case 0xca: {	/* float32 widened to float64: exact, merges nothing */
		uint32_t bits = (uint32_t)get_be(in + *pos, 4);
		float f;
		double d;
		uint64_t dbits;

		memcpy(&f, &bits, 4);
		d = f;
		memcpy(&dbits, &d, 8);
		*pos += 4;
		o->p[o->n++] = 0xcb;
		put_be(o, dbits, 8);
		return 0;
	}
	case 0xcb:
		memcpy(o->p + o->n, in + *pos - 1, 9);
		o->n += 9;
		*pos += 8;
		return 0;
	case 0xd9: case 0xda: case 0xdb:		/* str8/16/32 */
		w = 1u << (b - 0xd9);
		n = get_be(in + *pos, w);
		*pos += w;
str:
		put_head(o, n, 0xa0, 31, 0xd9, 0xda, 0xdb);
		goto body;
	case 0xc4: case 0xc5: case 0xc6:		/* bin8/16/32 */
		w = 1u << (b - 0xc4);
		n = get_be(in + *pos, w);
		*pos += w;
		put_head(o, n, 0, 0, 0xc4, 0xc5, 0xc6);
		goto body;
	case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:	/* fixext */
		n = 1u << (b - 0xd4);
		o->p[o->n++] = b;
		n += 1;			/* the type byte travels with the data */
		goto body;
	case 0xc7: case 0xc8: case 0xc9:		/* ext8/16/32 */
		w = 1u << (b - 0xc7);
		n = get_be(in + *pos, w);
		*pos += w;
		switch (n) {
		case 1: o->p[o->n++] = 0xd4; break;
		case 2: o->p[o->n++] = 0xd5; break;
		case 4: o->p[o->n++] = 0xd6; break;
		case 8: o->p[o->n++] = 0xd7; break;
		case 16: o->p[o->n++] = 0xd8; break;
		default: put_head(o, n, 0, 0, 0xc7, 0xc8, 0xc9); break;
		}
		n += 1;
		goto body;
	case 0xdc: case 0xdd:				/* array16/32 */
		w = b == 0xdc ? 2 : 4;
		n = get_be(in + *pos, w);
		*pos += w;
		return emit_array(in, pos, o, n);
	case 0xde: case 0xdf:				/* map16/32 */
		w = b == 0xde ? 2 : 4;
		n = get_be(in + *pos, w);
		*pos += w;
		return emit_map(in, pos, o, n);
	default:	/* 0xc1: wire_scan() never lets it through */
		return CARMY_EINVALID_ARGS;
	}
body:
	memcpy(o->p + o->n, in + *pos, n);
	o->n += n;
	*pos += n;
	return 0;
}

static int emit_array(const uint8_t *in, size_t *pos, struct out *o,
		      uint64_t n)
{
	put_head(o, n, 0x90, 15, 0, 0xdc, 0xdd);
	for (uint64_t i = 0; i < n; i++) {
		int ret = emit(in, pos, o);

		if (ret)
			return ret;
	}
	return 0;
}

/*
 * Write the entries in arrival order, remembering where each starts; if the
 * keys are not already in canonical order (by their canonical bytes:
 * memcmp, then the shorter first), sort them and move the entries into
 * place through a copy. Equal keys are an error: letting one win would make
 * the fingerprint depend on which one a decoder keeps.
 */
static int emit_map(const uint8_t *in, size_t *pos, struct out *o,
		    uint64_t n)
{
	struct kv small_kv[CANON_SMALL_MAP], *kv = small_kv;
	uint8_t small_copy[512], *copy = small_copy;
	bool sorted = true;
	size_t start;
	int ret = 0;

	put_head(o, n, 0x80, 15, 0, 0xde, 0xdf);
	if (n == 0)
		return 0;
	if (n > CANON_SMALL_MAP) {
		kv = malloc(n * sizeof(*kv));	/* n <= input bytes / 2 */
		if (!kv)
			return -ENOMEM;
	}
	start = o->n;
	for (uint64_t i = 0; i < n; i++) {
		kv[i].off = o->n;
		ret = emit(in, pos, o);
		if (ret)
			goto out;
		kv[i].klen = o->n - kv[i].off;
		ret = emit(in, pos, o);
		if (ret)
			goto out;
		kv[i].len = o->n - kv[i].off;
		if (i > 0 && kv_cmp(o->p, &kv[i - 1], &kv[i]) >= 0)
			sorted = false;
	}
	if (sorted)
		goto out;

	/* Insertion sort: maps are small, and this keeps equal keys side
	 * by side for the duplicate check. */
	for (uint64_t i = 1; i < n; i++) {
		struct kv x = kv[i];
		uint64_t j = i;

		for (; j > 0 && kv_cmp(o->p, &kv[j - 1], &x) > 0; j--)
			kv[j] = kv[j - 1];
		kv[j] = x;
	}
	for (uint64_t i = 1; i < n; i++) {
		if (kv_cmp(o->p, &kv[i - 1], &kv[i]) == 0) {
			ret = CARMY_EINVALID_ARGS;
			goto out;
		}
	}
	if (o->n - start > sizeof(small_copy)) {
		copy = malloc(o->n - start);
		if (!copy) {
			ret = -ENOMEM;
			goto out;
		}
	}
	memcpy(copy, o->p + start, o->n - start);
	for (uint64_t i = 0, at = start; i < n; i++) {
		memcpy(o->p + at, copy + (kv[i].off - start), kv[i].len);
		at += kv[i].len;
	}
	if (copy != small_copy)
		free(copy);
out:
	if (kv != small_kv)
		free(kv);
	return ret;
}

/* ---------------------------------------------------------------- bytes */

static int kv_cmp(const uint8_t *base, const struct kv *a, const struct kv *b)
{
	size_t m = a->klen < b->klen ? a->klen : b->klen;
	int c = memcmp(base + a->off, base + b->off, m);

	if (c)
		return c;
	return (a->klen > b->klen) - (a->klen < b->klen);
}

/* The smallest encoding of a non-negative integer. */
static void put_uint(struct out *o, uint64_t v)
{
	if (v <= 0x7f) {
		o->p[o->n++] = (uint8_t)v;
	} else if (v <= 0xff) {
		o->p[o->n++] = 0xcc;
		put_be(o, v, 1);
	} else if (v <= 0xffff) {
		o->p[o->n++] = 0xcd;
		put_be(o, v, 2);
	} else if (v <= 0xffffffff) {
		o->p[o->n++] = 0xce;
		put_be(o, v, 4);
	} else {
		o->p[o->n++] = 0xcf;
		put_be(o, v, 8);
	}
}

/* The smallest encoding of a negative integer. */
static void put_neg(struct out *o, int64_t v)
{
	if (v >= -32) {
		o->p[o->n++] = (uint8_t)v;
	} else if (v >= INT8_MIN) {
		o->p[o->n++] = 0xd0;
		put_be(o, (uint64_t)v, 1);
	} else if (v >= INT16_MIN) {
		o->p[o->n++] = 0xd1;
		put_be(o, (uint64_t)v, 2);
	} else if (v >= INT32_MIN) {
		o->p[o->n++] = 0xd2;
		put_be(o, (uint64_t)v, 4);
	} else {
		o->p[o->n++] = 0xd3;
		put_be(o, (uint64_t)v, 8);
	}
}

/* The smallest header for a length or count n: the fixed form (fix | n)
 * when fix is non-zero and n <= fix_max, else the narrowest of the 8-bit
 * (when op8 exists), 16-bit and 32-bit forms. */
static void put_head(struct out *o, uint64_t n, uint8_t fix, uint64_t fix_max,
		     uint8_t op8, uint8_t op16, uint8_t op32)
{
	if (fix && n <= fix_max) {
		o->p[o->n++] = (uint8_t)(fix | n);
	} else if (op8 && n <= 0xff) {
		o->p[o->n++] = op8;
		put_be(o, n, 1);
	} else if (n <= 0xffff) {
		o->p[o->n++] = op16;
		put_be(o, n, 2);
	} else {
		o->p[o->n++] = op32;
		put_be(o, n, 4);
	}
}

static void put_be(struct out *o, uint64_t v, unsigned width)
{
	for (unsigned i = width; i-- > 0; v >>= 8)
		o->p[o->n + i] = (uint8_t)v;
	o->n += width;
}

static uint64_t get_be(const uint8_t *p, unsigned width)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < width; i++)
		v = v << 8 | p[i];
	return v;
}
