/*
 * execid.h - execution ids as text: "exec_" and 32 lowercase hex digits,
 * the 16 bytes of an entry's execution id (SHM_EXEC_LEN).
 */
#ifndef CARMY_COMMON_EXECID_H
#define CARMY_COMMON_EXECID_H

#include <stdint.h>
#include <string.h>

#define EXECID_LEN 16			/* bytes; shm.h's SHM_EXEC_LEN */
#define EXECID_TEXT_LEN (5 + 2 * EXECID_LEN)	/* without the NUL */

/* Every byte as two lowercase hex digits, "000102...feff". */
extern const char execid_hex_pairs[512];

/*
 * id as text into out (room for EXECID_TEXT_LEN + 1), NUL-terminated.
 * Inline: a replay formats one on the client's fast path, and a copy of
 * two bytes per byte from a table is all it takes.
 */
static inline void execid_format(char *out, const uint8_t id[EXECID_LEN])
{
	char *p = out + 5;

	memcpy(out, "exec_", 5);
	for (int i = 0; i < EXECID_LEN; i++, p += 2)
		memcpy(p, execid_hex_pairs + 2 * id[i], 2);
	*p = '\0';
}

/*
 * text back into 16 bytes: exactly as execid_format writes it, so "exec_"
 * and 32 digits of 0-9a-f (no sign, space or upper case). Returns 0, or -1
 * (out untouched).
 */
int execid_parse(const char *text, uint8_t out[EXECID_LEN]);

#endif
