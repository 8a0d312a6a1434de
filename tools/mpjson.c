/*
 * mpjson.c - msgpack as JSON, for an operator looking at a call's
 * arguments (carmyctl list and show).
 *
 * The bytes come from the segment, a client's or a store's: a walk over
 * them, bounded by their length and a depth, never trusts a count or a
 * length in them beyond the bytes that are there. A segment keeps only
 * the first bytes of a call's arguments, so running out is expected: what
 * parsed is shown, and marked as cut.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tools/json.h"
#include "tools/mpjson.h"

#define DEPTH_MAX 64

enum walk { W_OK, W_CUT, W_BAD };

struct mp {
	const uint8_t *p;
	size_t len;
	size_t pos;
	bool in_key;	/* walking a key that is not a string */
};

static enum walk value(struct mp *m, FILE *f, int depth);
static size_t whole_utf8(const uint8_t *p, size_t n);

int mpjson_put(FILE *f, const void *buf, size_t len, uint64_t whole)
{
	struct mp m = { buf, len, 0, false };
	char *text = NULL;
	size_t n = 0;
	enum walk w;
	FILE *mem;

	mem = open_memstream(&text, &n);
	if (mem == NULL)
		return MPJSON_NOT;
	w = value(&m, mem, 0);
	if (fclose(mem) != 0)
		w = W_BAD;
	/* Whole, it must be one object and nothing more; cut, it must
	 * have run out inside the object (or at its very end, of a
	 * whole that says more came). */
	if ((w == W_OK && m.pos != len) || (w == W_CUT && len >= whole))
		w = W_BAD;
	if (w == W_BAD) {
		free(text);
		return MPJSON_NOT;
	}
	if (n > MPJSON_BUDGET) {
		/* Too long to show: its first bytes, marked as cut. */
		n = whole_utf8((const uint8_t *)text, MPJSON_BUDGET);
		w = W_CUT;
	}
	fwrite(text, 1, n, f);
	free(text);
	if (w == W_OK && len >= whole)
		return MPJSON_WHOLE;
	fputs("\u2026", f);
	return MPJSON_PREFIX;
}

/* ------------------------------------------------------------ reading */

/* n more bytes there? */
static bool have(const struct mp *m, size_t n)
{
	return m->len - m->pos >= n;
}

/* A big-endian number of n bytes (have() said they are there). */
static uint64_t be(struct mp *m, size_t n)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n; i++)
		v = v << 8 | m->p[m->pos++];
	return v;
}

/* ------------------------------------------------------------ writing */

/* Bytes as lowercase hex, within a string. */
static void put_hex(FILE *f, const uint8_t *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		putc(hex[p[i] >> 4], f);
		putc(hex[p[i] & 15], f);
	}
}

/* How many of the n bytes at p end before a UTF-8 sequence that the cut
 * left unfinished: shown, its lead byte alone would read as U+FFFD. */
static size_t whole_utf8(const uint8_t *p, size_t n)
{
	for (size_t back = 1; back <= 3 && back <= n; back++) {
		uint8_t b = p[n - back];
		size_t need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 0;

		if (b < 0x80)
			return n;
		if (need != 0)
			return need > back ? n - back : n;
	}
	return n;
}

/* A string (str or, with hex, bin's digits) of n bytes: all of it, or
 * what is there, unclosed, and W_CUT. */
static enum walk put_string(struct mp *m, FILE *f, uint64_t n, bool hex)
{
	size_t there = have(m, n) ? (size_t)n : m->len - m->pos;
	const uint8_t *p = m->p + m->pos;

	putc('"', f);
	if (hex)
		put_hex(f, p, there);
	else
		json_put_chars(f, p, there < n ? whole_utf8(p, there) : there);
	m->pos += there;
	if (there < n)
		return W_CUT;
	putc('"', f);
	return W_OK;
}

static enum walk put_bin(struct mp *m, FILE *f, uint64_t n)
{
	enum walk w;

	fputs("{\"bin\":", f);
	w = put_string(m, f, n, true);
	if (w == W_OK)
		putc('}', f);
	return w;
}

static enum walk put_ext(struct mp *m, FILE *f, uint64_t n)
{
	enum walk w;

	if (!have(m, 1))
		return W_CUT;
	fprintf(f, "{\"ext\":%d,\"hex\":", (int8_t)m->p[m->pos++]);
	w = put_string(m, f, n, true);
	if (w == W_OK)
		putc('}', f);
	return w;
}

static void put_double(FILE *f, double d, int digits)
{
	if (isnan(d))
		fputs("\"NaN\"", f);
	else if (isinf(d))
		fputs(d > 0 ? "\"Infinity\"" : "\"-Infinity\"", f);
	else
		fprintf(f, "%.*g", digits, d);
}

/* A key that is not a string, within another such key: its msgpack bytes
 * as one string of hex, so that no key's JSON is escaped twice. */
static enum walk put_key_hex(struct mp *m, FILE *f, int depth)
{
	size_t start = m->pos;
	char *text = NULL;
	size_t n = 0;
	enum walk w;
	FILE *skip;

	skip = open_memstream(&text, &n);
	if (skip == NULL)
		return W_BAD;
	w = value(m, skip, depth);
	if (fclose(skip) != 0)
		w = W_BAD;
	free(text);
	if (w == W_BAD)
		return W_BAD;
	putc('"', f);
	put_hex(f, m->p + start, m->pos - start);
	if (w == W_OK)
		putc('"', f);
	return w;
}

/* A map's key: a string as itself, anything else as a string of its
 * JSON (JSON keys are strings), in which keys that are not strings are
 * hex (put_key_hex()): the text grows with the bytes, never faster. */
static enum walk put_key(struct mp *m, FILE *f, int depth)
{
	uint8_t b;
	char *text = NULL;
	size_t n = 0;
	enum walk w;
	FILE *mem;

	if (!have(m, 1))
		return W_CUT;
	b = m->p[m->pos];
	if ((b >= 0xa0 && b <= 0xbf) || (b >= 0xd9 && b <= 0xdb))
		return value(m, f, depth);
	if (m->in_key)
		return put_key_hex(m, f, depth);
	mem = open_memstream(&text, &n);
	if (mem == NULL)
		return W_BAD;
	m->in_key = true;
	w = value(m, mem, depth);
	m->in_key = false;
	if (fclose(mem) != 0)
		w = W_BAD;
	if (w != W_BAD) {
		putc('"', f);
		json_put_chars(f, text, n);
		if (w == W_OK)
			putc('"', f);
	}
	free(text);
	return w;
}

/* n elements of an array, or n pairs of a map. Each takes a byte at
 * least, so a count larger than the bytes left runs out (W_CUT). */
static enum walk put_container(struct mp *m, FILE *f, uint64_t n, bool map,
			       int depth)
{
	if (depth >= DEPTH_MAX)
		return W_BAD;
	putc(map ? '{' : '[', f);
	for (uint64_t i = 0; i < n; i++) {
		enum walk w;

		if (i > 0)
			putc(',', f);
		if (map) {
			w = put_key(m, f, depth + 1);
			if (w != W_OK)
				return w;
			putc(':', f);
		}
		w = value(m, f, depth + 1);
		if (w != W_OK)
			return w;
	}
	putc(map ? '}' : ']', f);
	return W_OK;
}

/* Lengths and counts after a type byte: 1, 2 or 4 bytes. */
static enum walk sized(struct mp *m, size_t nbytes, uint64_t *n)
{
	if (!have(m, nbytes))
		return W_CUT;
	*n = be(m, nbytes);
	return W_OK;
}

/* One object at m->pos, written to f. */
static enum walk value(struct mp *m, FILE *f, int depth)
{
	static const uint8_t fixext[5] = { 1, 2, 4, 8, 16 };
	uint64_t n;
	uint8_t b;

	if (!have(m, 1))
		return W_CUT;
	b = m->p[m->pos++];
	if (b <= 0x7f) {
		fprintf(f, "%u", b);
		return W_OK;
	}
	if (b >= 0xe0) {
		fprintf(f, "%d", (int8_t)b);
		return W_OK;
	}
	if (b <= 0x8f)
		return put_container(m, f, b & 0x0f, true, depth);
	if (b <= 0x9f)
		return put_container(m, f, b & 0x0f, false, depth);
	if (b <= 0xbf)
		return put_string(m, f, b & 0x1f, false);
	switch (b) {
	case 0xc0:
		fputs("null", f);
		return W_OK;
	case 0xc2:
	case 0xc3:
		fputs(b == 0xc3 ? "true" : "false", f);
		return W_OK;
	case 0xc4: case 0xc5: case 0xc6:
		if (sized(m, (size_t)1 << (b - 0xc4), &n) != W_OK)
			return W_CUT;
		return put_bin(m, f, n);
	case 0xc7: case 0xc8: case 0xc9:
		if (sized(m, (size_t)1 << (b - 0xc7), &n) != W_OK)
			return W_CUT;
		return put_ext(m, f, n);
	case 0xca: {
		uint32_t u;
		float x;

		if (!have(m, 4))
			return W_CUT;
		u = (uint32_t)be(m, 4);
		memcpy(&x, &u, sizeof(x));
		put_double(f, x, 9);
		return W_OK;
	}
	case 0xcb: {
		uint64_t u;
		double x;

		if (!have(m, 8))
			return W_CUT;
		u = be(m, 8);
		memcpy(&x, &u, sizeof(x));
		put_double(f, x, 17);
		return W_OK;
	}
	case 0xcc: case 0xcd: case 0xce: case 0xcf:
		if (sized(m, (size_t)1 << (b - 0xcc), &n) != W_OK)
			return W_CUT;
		fprintf(f, "%llu", (unsigned long long)n);
		return W_OK;
	case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
		size_t k = (size_t)1 << (b - 0xd0);
		int64_t v;

		if (sized(m, k, &n) != W_OK)
			return W_CUT;
		/* Sign-extend from k bytes. */
		v = k == 8 ? (int64_t)n :
		    (int64_t)(n ^ (UINT64_C(1) << (8 * k - 1))) -
			    (INT64_C(1) << (8 * k - 1));
		fprintf(f, "%lld", (long long)v);
		return W_OK;
	}
	case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
		return put_ext(m, f, fixext[b - 0xd4]);
	case 0xd9: case 0xda: case 0xdb:
		if (sized(m, (size_t)1 << (b - 0xd9), &n) != W_OK)
			return W_CUT;
		return put_string(m, f, n, false);
	case 0xdc: case 0xdd:
		if (sized(m, b == 0xdc ? 2 : 4, &n) != W_OK)
			return W_CUT;
		return put_container(m, f, n, false, depth);
	case 0xde: case 0xdf:
		if (sized(m, b == 0xde ? 2 : 4, &n) != W_OK)
			return W_CUT;
		return put_container(m, f, n, true, depth);
	default:	/* 0xc1: never used */
		return W_BAD;
	}
}
