/*
 * text.c - arbitrary bytes shown to a person on a terminal.
 *
 * An identity is bytes chosen by whoever calls a tool, and carmyctl prints
 * it to an operator. Printed raw, an escape sequence would drive the
 * operator's terminal and a newline would draw a row of its own; a NUL
 * would hide what follows it. So what is not plainly text is written as
 * \xNN, which also makes two identities that differ only there look
 * different. A call's arguments, shown as JSON, keep JSON's own escapes
 * (\uXXXX) for the code points that would hide or turn text around, and
 * so do a tool's output and result, in JSON strings.
 */
#include <stdbool.h>
#include <stdint.h>

#include "tools/json.h"
#include "tools/text.h"

#define ELLIPSIS "\u2026"

static size_t put(FILE *f, const uint8_t *p, size_t len, size_t max,
		  bool json);
static size_t one(const uint8_t *p, size_t len, bool json, char *out,
		  size_t *cols);
static bool invisible(const uint8_t *p, size_t n);

size_t text_put_bytes(FILE *f, const void *buf, size_t len, size_t width)
{
	size_t cols = put(f, buf, len, 0, false);

	for (size_t c = cols; c < width; c++)
		putc(' ', f);
	return cols;
}

size_t text_put_clipped(FILE *f, const void *buf, size_t len, size_t max)
{
	return put(f, buf, len, max, false);
}

size_t text_put_json(FILE *f, const void *buf, size_t len, size_t max)
{
	return put(f, buf, len, max, true);
}

void text_put_json_bytes(FILE *f, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	size_t i = 0;

	putc('"', f);
	while (i < len) {
		char out[64];
		size_t c;

		/* one() takes JSON text, where these start or end
		 * something: in bytes they are escaped. */
		if (p[i] == '"' || p[i] == '\\') {
			putc('\\', f);
			putc(p[i++], f);
			continue;
		}
		i += one(p + i, len - i, true, out, &c);
		fputs(out, f);
	}
	putc('"', f);
}

/* Write the n bytes at p as text_put_bytes() (json: text_put_json())
 * does, in at most max columns (0: no bound): what does not fit is left
 * out, and "…" ends what does. Returns the columns written. */
static size_t put(FILE *f, const uint8_t *p, size_t len, size_t max,
		  bool json)
{
	size_t i = 0, cols = 0;

	while (i < len) {
		char out[64];
		size_t c, n = one(p + i, len - i, json, out, &c);

		/* Room for it, and for the mark if more follows. */
		if (max != 0 && cols + c + (i + n < len ? 1 : 0) > max) {
			fputs(ELLIPSIS, f);
			return cols + 1;
		}
		fputs(out, f);
		cols += c;
		i += n;
	}
	return cols;
}

/*
 * The text of the sequence at p (len bytes left) into out, NUL-terminated,
 * and its width in columns into *cols. Returns how many bytes it took:
 * printable ASCII and valid, visible UTF-8 as they are; '\\' doubled (not
 * in json, where it starts an escape already); anything else as \xNN for
 * each byte (json: \uXXXX, \ufffd for bytes of no valid sequence).
 */
static size_t one(const uint8_t *p, size_t len, bool json, char *out,
		  size_t *cols)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 1, o = 0;
	uint8_t b = p[0];

	if (b == '\\' && !json) {
		out[o++] = '\\';
		out[o++] = '\\';
	} else if (b >= 0x20 && b < 0x7f) {
		out[o++] = (char)b;
	} else if (b >= 0x80 && (n = json_utf8_len(p, len)) > 0 &&
		   !invisible(p, n)) {
		for (size_t k = 0; k < n; k++)
			out[o++] = (char)p[k];
		out[o] = '\0';
		*cols = 1;
		return n;
	} else if (json) {
		/* A code point of n bytes (n = 0: a stray byte). */
		uint32_t cp = n == 0 ? 0xfffd : n == 1 ? b :
			      n == 2 ? (uint32_t)(b & 0x1f) << 6 |
					       (p[1] & 0x3f) :
			      (uint32_t)(b & 0x0f) << 12 |
				      (uint32_t)(p[1] & 0x3f) << 6 |
				      (p[2] & 0x3f);

		n = n == 0 ? 1 : n;
		out[o++] = '\\';
		out[o++] = 'u';
		for (int s = 12; s >= 0; s -= 4)
			out[o++] = hex[(cp >> s) & 15];
	} else {
		n = n == 0 ? 1 : n;
		for (size_t k = 0; k < n; k++) {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[p[k] >> 4];
			out[o++] = hex[p[k] & 15];
		}
	}
	out[o] = '\0';
	*cols = o;
	return n;
}

/* Is the UTF-8 sequence p (n bytes, well formed) a C1 control (U+0080 to
 * U+009F), or a code point that shows nothing or turns the text around:
 * zero-width and direction marks U+200B..U+200F, line and paragraph
 * separators and embeddings U+2028..U+202E, U+2060..U+206F, U+FEFF? */
static bool invisible(const uint8_t *p, size_t n)
{
	if (n == 2)
		return p[0] == 0xc2 && p[1] <= 0x9f;
	if (n != 3)
		return false;
	if (p[0] == 0xe2 && p[1] == 0x80)
		return (p[2] >= 0x8b && p[2] <= 0x8f) ||
		       (p[2] >= 0xa8 && p[2] <= 0xae);
	if (p[0] == 0xe2 && p[1] == 0x81)
		return p[2] >= 0xa0 && p[2] <= 0xaf;
	return p[0] == 0xef && p[1] == 0xbb && p[2] == 0xbf;
}
