/*
 * json.c - JSON strings from arbitrary bytes.
 *
 * A command's standard output is bytes, not text, yet JSON strings are
 * Unicode. Valid UTF-8 is kept as is; anything else is replaced byte by
 * byte with U+FFFD rather than guessed at, so a reader can tell the output
 * was not text instead of receiving a silently re-encoded version of it.
 */
#include <stdint.h>

#include "tools/json.h"

void json_put_bytes(FILE *f, const void *buf, size_t len)
{
	putc('"', f);
	json_put_chars(f, buf, len);
	putc('"', f);
}

void json_put_chars(FILE *f, const void *buf, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const uint8_t *p = buf;
	size_t i = 0;

	while (i < len) {
		uint8_t b = p[i];
		size_t n;

		if (b == '"' || b == '\\') {
			putc('\\', f);
			putc(b, f);
			i++;
		} else if (b < 0x20) {
			fputs("\\u00", f);
			putc(hex[b >> 4], f);
			putc(hex[b & 15], f);
			i++;
		} else if (b < 0x80) {
			putc(b, f);
			i++;
		} else if ((n = json_utf8_len(p + i, len - i)) > 0) {
			fwrite(p + i, 1, n, f);
			i += n;
		} else {
			fputs("\\ufffd", f);
			i++;
		}
	}
}

void json_put_str(FILE *f, const char *s)
{
	size_t len = 0;

	while (s[len] != '\0')
		len++;
	json_put_bytes(f, s, len);
}

/*
 * The second byte's range is narrowed
 * per lead byte as in Unicode's table of well-formed sequences, which is
 * what rules out overlong forms, UTF-16 surrogates and code points above
 * U+10FFFF.
 */
size_t json_utf8_len(const void *buf, size_t n)
{
	const uint8_t *p = buf;
	uint8_t lo = 0x80, hi = 0xbf;
	size_t need;

	if (p[0] >= 0xc2 && p[0] <= 0xdf) {
		need = 2;
	} else if (p[0] >= 0xe0 && p[0] <= 0xef) {
		need = 3;
		if (p[0] == 0xe0)
			lo = 0xa0;
		else if (p[0] == 0xed)
			hi = 0x9f;
	} else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
		need = 4;
		if (p[0] == 0xf0)
			lo = 0x90;
		else if (p[0] == 0xf4)
			hi = 0x8f;
	} else {
		return 0;
	}
	if (n < need || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < need; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return need;
}
