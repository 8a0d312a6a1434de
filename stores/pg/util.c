/*
 * util.c - the PostgreSQL store's small helpers: its lines on stderr,
 * libpq's messages on one line, ids in hex.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "stores/pg/pg.h"

/* One line on stderr, one write(2), like carmyd's own. */
void pg_say(const char *fmt, ...)
{
	char line[768];
	va_list ap;
	int n = snprintf(line, sizeof(line), "carmy_store_pg: ");

	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;	/* nowhere else to say it */
}

/* libpq's message on one line: each run of blanks and newlines becomes
 * one space, none at the end. */
const char *pg_pq_error(const char *msg, char *buf, size_t len)
{
	size_t n = 0;

	if (msg == NULL || msg[0] == '\0')
		msg = "unknown error";
	for (const char *p = msg; *p != '\0' && n + 1 < len; p++) {
		bool blank = *p == ' ' || *p == '\n' || *p == '\t';

		if (!blank)
			buf[n++] = *p;
		else if (n > 0 && buf[n - 1] != ' ')
			buf[n++] = ' ';
	}
	while (n > 0 && buf[n - 1] == ' ')
		n--;
	buf[n] = '\0';
	return buf;
}
