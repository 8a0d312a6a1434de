/*
 * text.c - arbitrary bytes shown to a person on a terminal.
 *
 * An identity is bytes chosen by whoever calls a tool, and carmyctl prints
 * it to an operator. Printed raw, an escape sequence would drive the
 * operator's terminal and a newline would draw a row of its own; a NUL
 * would hide what follows it. So what is not plainly text is written as
 * \xNN, which also makes two identities that differ only there look
 * different.
 */
#include <stdbool.h>
#include <stdint.h>

#include "tools/json.h"
#include "tools/text.h"

static bool invisible(const uint8_t *p, size_t n);

size_t text_put_bytes(FILE *f, const void *buf, size_t len, size_t width)
{
	static const char hex[] = "0123456789abcdef";
	const uint8_t *p = buf;
	size_t i = 0, cols = 0;

	while (i < len) {
		uint8_t b = p[i];
		size_t n = 1;

		if (b == '\\') {
			fputs("\\\\", f);
			cols += 2;
		} else if (b >= 0x20 && b < 0x7f) {
			putc(b, f);
			cols++;
		} else if (b >= 0x80 && (n = json_utf8_len(p + i, len - i)) > 0 &&
			   !invisible(p + i, n)) {
			fwrite(p + i, 1, n, f);
			cols++;
		} else {
			n = n == 0 ? 1 : n;
			for (size_t k = 0; k < n; k++) {
				fputs("\\x", f);
				putc(hex[p[i + k] >> 4], f);
				putc(hex[p[i + k] & 15], f);
			}
			cols += 4 * n;
		}
		i += n;
	}
	for (size_t c = cols; c < width; c++)
		putc(' ', f);
	return cols;
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
