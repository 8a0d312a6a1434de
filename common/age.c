/*
 * age.c - see age.h.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/age.h"

#define MS_NS UINT64_C(1000000)
#define S_NS UINT64_C(1000000000)

static const struct {
	const char *suffix;
	uint64_t ns;
} units[] = {
	{ "d", 86400 * S_NS },
	{ "h", 3600 * S_NS },
	{ "m", 60 * S_NS },
	{ "s", S_NS },
	{ "", S_NS },
	{ "ms", MS_NS },
};

int age_parse(const char *s, uint64_t *ns)
{
	uint64_t n = 0;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (n > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return -EINVAL;
		n = n * 10 + (uint64_t)(*p - '0');
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(p, units[i].suffix) != 0)
			continue;
		if (n > UINT64_MAX / units[i].ns)
			return -EINVAL;
		*ns = n * units[i].ns;
		return 0;
	}
	return -EINVAL;
}

const char *age_format(char *buf, uint64_t ns)
{
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (units[i].suffix[0] == '\0' || ns % units[i].ns != 0 ||
		    ns == 0)
			continue;
		/* A day reads 24h, as people say it; two are 2d. */
		if (i == 0 && ns / units[i].ns < 2)
			continue;
		snprintf(buf, AGE_TEXT_MAX, "%llu%s",
			 (unsigned long long)(ns / units[i].ns),
			 units[i].suffix);
		return buf;
	}
	snprintf(buf, AGE_TEXT_MAX, "%llums", (unsigned long long)(ns / MS_NS));
	return buf;
}
