/*
 * canon.c - canonical msgpack and the fingerprint of a call.
 *
 * One pass validates and re-encodes. The re-encoder reads the untrusted
 * bytes directly (no msgpack-c object tree, no zone) and writes the
 * canonical form described in canon.h, checking as it goes exactly what
 * wire_scan() checks for a message: every header, count and length backed
 * by bytes that are really there (a count may not exceed the bytes left,
 * since every element takes at least one), 0xc1 refused, containers nested
 * at most CANON_MAX_DEPTH deep, and nothing after the one object. Its
 * recursion is bounded by that depth. Validating while emitting, rather than
 * scanning first, halves the work on the path every begin() takes.
 *
 * The output is never longer than twice the input (only a float32 grows,
 * from 5 to 9 bytes), so one buffer of that size, on the stack for the usual
 * small arguments, holds it. A map's entries are written where they fall,
 * then, if their keys are out of order, sorted and moved into place.
 */
#include <endian.h>
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
/* The raw print's tag: its preimages can never equal a fingerprint's. */
#define RAW_DOMAIN "carmy-raw-1"
/* Preimages up to this size are built and hashed on the stack. */
#define CANON_SMALL 2048
/* Maps up to this many entries are sorted with stack space. */
#define CANON_SMALL_MAP 16

/* The untrusted input: bytes p[pos..len). */
struct in {
	const uint8_t *p;
	size_t pos;
	size_t len;
};

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

static int print(const struct carmy_call *call, bool canonical,
		 uint8_t out[CANON_FP_LEN]);
static int encode(const void *buf, size_t len, struct out *o);
static int emit(struct in *in, struct out *o, int depth);
static int emit_array(struct in *in, struct out *o, uint64_t n, int depth);
static int emit_map(struct in *in, struct out *o, uint64_t n, int depth);
static void put_uint(struct out *o, uint64_t v);
static void put_neg(struct out *o, int64_t v);
static void put_head(struct out *o, uint64_t n, uint8_t fix, uint64_t fix_max,
		     uint8_t op8, uint8_t op16, uint8_t op32);
static void put_be(struct out *o, uint64_t v, unsigned width);
static uint64_t get_be(const uint8_t *p, unsigned width);
static inline uint8_t *put_part(uint8_t *p, const void *bytes, size_t len);
static int kv_cmp(const uint8_t *base, const struct kv *a, const struct kv *b);
static int kv_qcmp(const void *a, const void *b, void *base);

/* ---------------------------------------------------------------- API */

int canon_msgpack(const void *buf, size_t len, msgpack_sbuffer *out)
{
	struct out o = { NULL, 0 };
	int ret;

	if (!out)
		return -EINVAL;
	if (!buf)
		return CARMY_EINVALID_ARGS;
	o.p = malloc(2 * len + 16);
	if (!o.p)
		return -ENOMEM;
	ret = encode(buf, len, &o);
	if (ret == 0 && msgpack_sbuffer_write(out, (const char *)o.p, o.n) != 0)
		ret = -ENOMEM;
	free(o.p);
	return ret;
}

int canon_fingerprint(const struct carmy_call *call,
		      uint8_t out[CANON_FP_LEN])
{
	return print(call, true, out);
}

/*
 * The raw print is on the path of every begin(), replays included: the
 * usual small call gets a straight-line copy into one stack buffer, the
 * preimage print() would build, without its loops over the parts.
 */
int canon_rawprint(const struct carmy_call *call, uint8_t out[CANON_FP_LEN])
{
	static const char domain[] = RAW_DOMAIN;
	uint8_t buf[CANON_SMALL], *p = buf;
	XXH128_canonical_t digest;

	if (!call || !out)
		return -EINVAL;
	if (call->tool_len + call->args_len + call->meta_len >
	    sizeof(buf) - (sizeof(domain) - 1) - 24)
		return print(call, false, out);
	if ((!call->tool && call->tool_len) ||
	    (!call->args && call->args_len) || (call->args && !call->args_len) ||
	    (!call->meta && call->meta_len) || (call->meta && !call->meta_len))
		return CARMY_EINVALID_ARGS;
	memcpy(p, domain, sizeof(domain) - 1);
	p += sizeof(domain) - 1;
	p = put_part(p, call->tool, call->tool_len);
	p = put_part(p, call->args, call->args_len);
	p = put_part(p, call->meta, call->meta_len);
	XXH128_canonicalFromHash(&digest, XXH3_128bits(buf, (size_t)(p - buf)));
	memcpy(out, digest.digest, CANON_FP_LEN);
	return 0;
}

/*
 * Both prints: XXH3-128 of a domain tag, then tool, args and meta, each as
 * an 8-byte big-endian length and its bytes, so no byte can slide from one
 * part into the next. For the fingerprint, args and meta go in canonical
 * form; for the raw print, as given. Absent (NULL, 0) hashes as length 0,
 * which no msgpack object has, so a present but empty part is refused.
 */
static int print(const struct carmy_call *call, bool canonical,
		 uint8_t out[CANON_FP_LEN])
{
	const char *domain = canonical ? CANON_DOMAIN : RAW_DOMAIN;
	const size_t dlen = strlen(domain);
	const void *part[3];
	size_t plen[3], need;
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
	for (int i = 0; i < 3; i++)
		if ((!part[i] && plen[i]) || (i > 0 && part[i] && !plen[i]))
			return CARMY_EINVALID_ARGS;

	/* The canonical form is at most twice as long as the input. */
	need = dlen + 24 + plen[0] + 2 * (plen[1] + plen[2]) + 32;
	if (need > sizeof(small)) {
		buf = malloc(need);
		if (!buf)
			return -ENOMEM;
	}
	memcpy(buf, domain, dlen);
	o.p = buf;
	o.n = dlen;
	for (int i = 0; i < 3; i++) {
		size_t at = o.n;

		o.n += 8;
		if (i > 0 && canonical && part[i]) {
			ret = encode(part[i], plen[i], &o);
			if (ret)
				goto out;
		} else if (plen[i]) {
			memcpy(o.p + o.n, part[i], plen[i]);
			o.n += plen[i];
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

/* Append the canonical form of the one object in buf/len to o, which has
 * room for 2 * len + 16 more bytes. On failure o->n is where it was. */
static int encode(const void *buf, size_t len, struct out *o)
{
	struct in in = { buf, 0, len };
	size_t start = o->n;
	int ret = emit(&in, o, 1);

	if (ret == 0 && in.pos != len)
		ret = CARMY_EINVALID_ARGS;	/* trailing bytes */
	if (ret)
		o->n = start;
	return ret;
}

/* Take w header bytes as a big-endian number, if they are there. */
#define TAKE(in, w, v) do {						\
	if ((in)->len - (in)->pos < (w))				\
		return CARMY_EINVALID_ARGS;				\
	(v) = get_be((in)->p + (in)->pos, (w));				\
	(in)->pos += (w);						\
} while (0)

/* Re-encode the object at in->pos canonically onto o; depth is its nesting
 * level, 1 for the top. Every byte written is paid for by at least one byte
 * read (only a float32 grows, from 5 bytes to 9), so o cannot overflow.
 * Fails on malformed, truncated or too deeply nested input, duplicate map
 * keys, or -ENOMEM for a big map's scratch. */
static int emit(struct in *in, struct out *o, int depth)
{
	unsigned w;
	uint64_t n;
	uint8_t b;

	if (in->pos >= in->len)
		return CARMY_EINVALID_ARGS;
	b = in->p[in->pos++];
	if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
		o->p[o->n++] = b;	/* fixints, nil, booleans */
		return 0;
	}
	if (b <= 0x8f)
		return emit_map(in, o, b & 0x0f, depth);
	if (b <= 0x9f)
		return emit_array(in, o, b & 0x0f, depth);
	if (b <= 0xbf) {
		n = b & 0x1f;
		goto str;
	}
	switch (b) {
	case 0xcc: case 0xcd: case 0xce: case 0xcf:	/* uint8..64 */
		TAKE(in, 1u << (b - 0xcc), n);
		put_uint(o, n);
		return 0;
	case 0xd0: case 0xd1: case 0xd2: case 0xd3: {	/* int8..64 */
		int64_t v;

		w = 1u << (b - 0xd0);
		TAKE(in, w, n);
		v = (int64_t)(n << (64 - 8 * w)) >> (64 - 8 * w);
		/* Non-negative values belong to the unsigned family, so
		 * int8 5 and uint16 5 are the same call. */
		if (v >= 0)
			put_uint(o, (uint64_t)v);
		else
			put_neg(o, v);
		return 0;
	}
	case 0xca: {	/* float32 widened to float64: exact, merges nothing */
		uint32_t bits;
		float f;
		double d;
		uint64_t dbits;

		TAKE(in, 4, n);
		bits = (uint32_t)n;
		if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu)) {
			/* A NaN, widened by its bits: the CPU's conversion
			 * would quiet a signalling one, merging two values. */
			dbits = (uint64_t)(bits >> 31) << 63 |
				UINT64_C(0x7ff) << 52 |
				(uint64_t)(bits & 0x7fffffu) << 29;
		} else {
			memcpy(&f, &bits, 4);
			d = f;
			memcpy(&dbits, &d, 8);
		}
		o->p[o->n++] = 0xcb;
		put_be(o, dbits, 8);
		return 0;
	}
	case 0xcb:
		if (in->len - in->pos < 8)
			return CARMY_EINVALID_ARGS;
		memcpy(o->p + o->n, in->p + in->pos - 1, 9);
		o->n += 9;
		in->pos += 8;
		return 0;
	case 0xd9: case 0xda: case 0xdb:		/* str8/16/32 */
		TAKE(in, 1u << (b - 0xd9), n);
str:
		if (n > in->len - in->pos)
			return CARMY_EINVALID_ARGS;
		put_head(o, n, 0xa0, 31, 0xd9, 0xda, 0xdb);
		goto body;
	case 0xc4: case 0xc5: case 0xc6:		/* bin8/16/32 */
		TAKE(in, 1u << (b - 0xc4), n);
		if (n > in->len - in->pos)
			return CARMY_EINVALID_ARGS;
		put_head(o, n, 0, 0, 0xc4, 0xc5, 0xc6);
		goto body;
	case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:	/* fixext */
		n = (1u << (b - 0xd4)) + 1;	/* the type byte travels too */
		if (n > in->len - in->pos)
			return CARMY_EINVALID_ARGS;
		o->p[o->n++] = b;
		goto body;
	case 0xc7: case 0xc8: case 0xc9:		/* ext8/16/32 */
		TAKE(in, 1u << (b - 0xc7), n);
		if (n >= in->len - in->pos)	/* the type byte, then n */
			return CARMY_EINVALID_ARGS;
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
		TAKE(in, b == 0xdc ? 2u : 4u, n);
		return emit_array(in, o, n, depth);
	case 0xde: case 0xdf:				/* map16/32 */
		TAKE(in, b == 0xde ? 2u : 4u, n);
		return emit_map(in, o, n, depth);
	default:	/* 0xc1: never used */
		return CARMY_EINVALID_ARGS;
	}
body:
	memcpy(o->p + o->n, in->p + in->pos, n);
	o->n += n;
	in->pos += n;
	return 0;
}

#undef TAKE

/*
 * emit() for one element of a container, with the commonest elements done
 * inline: fixints, nil, booleans and fixstr are already canonical, so they
 * are copied as they are. Map keys are nearly always short strings.
 */
static inline int emit_one(struct in *in, struct out *o, int depth)
{
	if (in->pos < in->len) {
		uint8_t b = in->p[in->pos];

		if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 ||
		    b == 0xc3) {
			o->p[o->n++] = b;
			in->pos++;
			return 0;
		}
		if ((b & 0xe0) == 0xa0 &&
		    (size_t)(b & 0x1f) < in->len - in->pos) {
			size_t n = 1 + (b & 0x1f);

			memcpy(o->p + o->n, in->p + in->pos, n);
			o->n += n;
			in->pos += n;
			return 0;
		}
	}
	return emit(in, o, depth);
}

static int emit_array(struct in *in, struct out *o, uint64_t n, int depth)
{
	/* Each element takes at least one byte: a count the input cannot
	 * back is refused before anything is built for it. */
	if (depth > CANON_MAX_DEPTH || n > in->len - in->pos)
		return CARMY_EINVALID_ARGS;
	put_head(o, n, 0x90, 15, 0, 0xdc, 0xdd);
	for (uint64_t i = 0; i < n; i++) {
		int ret = emit_one(in, o, depth + 1);

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
static int emit_map(struct in *in, struct out *o, uint64_t n, int depth)
{
	struct kv small_kv[CANON_SMALL_MAP], *kv = small_kv;
	uint8_t small_copy[512], *copy = small_copy;
	bool sorted = true;
	size_t start;
	int ret = 0;

	/* Two objects per entry, at least a byte each: n is bounded by the
	 * input before it sizes the scratch below. */
	if (depth > CANON_MAX_DEPTH || n > (in->len - in->pos) / 2)
		return CARMY_EINVALID_ARGS;
	put_head(o, n, 0x80, 15, 0, 0xde, 0xdf);
	if (n == 0)
		return 0;
	if (n > CANON_SMALL_MAP) {
		kv = malloc(n * sizeof(*kv));
		if (!kv)
			return -ENOMEM;
	}
	start = o->n;
	for (uint64_t i = 0; i < n; i++) {
		kv[i].off = o->n;
		ret = emit_one(in, o, depth + 1);
		if (ret)
			goto out;
		kv[i].klen = o->n - kv[i].off;
		ret = emit_one(in, o, depth + 1);
		if (ret)
			goto out;
		kv[i].len = o->n - kv[i].off;
		if (i > 0 && kv_cmp(o->p, &kv[i - 1], &kv[i]) >= 0)
			sorted = false;
	}
	if (sorted)
		goto out;

	/* Sorted, equal keys end up side by side for the duplicate check.
	 * Maps are small, and insertion sort is quickest there; a big one
	 * (anybody's arguments: 80,000 keys in reverse order took 3 s)
	 * goes to qsort_r(). */
	if (n <= CANON_SMALL_MAP) {
		for (uint64_t i = 1; i < n; i++) {
			struct kv x = kv[i];
			uint64_t j = i;

			for (; j > 0 && kv_cmp(o->p, &kv[j - 1], &x) > 0; j--)
				kv[j] = kv[j - 1];
			kv[j] = x;
		}
	} else {
		qsort_r(kv, n, sizeof(*kv), kv_qcmp, o->p);
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

static int kv_qcmp(const void *a, const void *b, void *base)
{
	return kv_cmp(base, a, b);
}

static int kv_cmp(const uint8_t *base, const struct kv *a, const struct kv *b)
{
	const uint8_t *x = base + a->off, *y = base + b->off;
	size_t m = a->klen < b->klen ? a->klen : b->klen;

	/* Keys are short and usually differ early: a byte loop beats a
	 * call to memcmp here. */
	for (size_t i = 0; i < m; i++)
		if (x[i] != y[i])
			return x[i] < y[i] ? -1 : 1;
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

/* Widths are 1, 2, 4 or 8: one byte-swapped store or load each, not a
 * loop (these run for every header of every begin()). */
static void put_be(struct out *o, uint64_t v, unsigned width)
{
	uint8_t *p = o->p + o->n;

	switch (width) {
	case 1: *p = (uint8_t)v; break;
	case 2: { uint16_t x = htobe16((uint16_t)v); memcpy(p, &x, 2); break; }
	case 4: { uint32_t x = htobe32((uint32_t)v); memcpy(p, &x, 4); break; }
	default: { uint64_t x = htobe64(v); memcpy(p, &x, 8); break; }
	}
	o->n += width;
}

/* One part of a print's preimage: its length, 8 bytes big-endian, then its
 * bytes. Returns where the next part goes. */
static inline uint8_t *put_part(uint8_t *p, const void *bytes, size_t len)
{
	uint64_t be = htobe64((uint64_t)len);

	memcpy(p, &be, 8);
	if (len > 0)
		memcpy(p + 8, bytes, len);
	return p + 8 + len;
}

static uint64_t get_be(const uint8_t *p, unsigned width)
{
	switch (width) {
	case 1: return *p;
	case 2: { uint16_t x; memcpy(&x, p, 2); return be16toh(x); }
	case 4: { uint32_t x; memcpy(&x, p, 4); return be32toh(x); }
	default: { uint64_t x; memcpy(&x, p, 8); return be64toh(x); }
	}
}
