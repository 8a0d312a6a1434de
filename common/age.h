/*
 * age.h - ages as people type them: "90" or "90s", "200ms", "15m", "2h",
 * "7d". carmyd's --retain and carmyctl's --older-than, --newer-than read
 * them with the one parser here.
 */
#ifndef CARMY_COMMON_AGE_H
#define CARMY_COMMON_AGE_H

#include <stddef.h>
#include <stdint.h>

/* The longest text age_format() writes, with its NUL. */
#define AGE_TEXT_MAX 24

/*
 * s into nanoseconds: digits, then nothing or s (seconds), ms, m, h or d.
 * No sign, space, fraction or other suffix. Returns 0, or -EINVAL for any
 * other text or an age past UINT64_MAX ns (*ns untouched).
 */
int age_parse(const char *s, uint64_t *ns);

/*
 * ns as text into buf (AGE_TEXT_MAX bytes): in the largest of d, h, m, s
 * and ms that divides it exactly ("7d", "90s", "200ms"; but one day reads
 * "24h"), else in whole ms. Returns buf.
 */
const char *age_format(char *buf, uint64_t ns);

#endif
