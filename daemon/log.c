/*
 * log.c - timestamped, levelled lines on stderr. One write(2) per line so
 * that lines from a restarted carmyd and its predecessor never interleave.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/log.h"

int log_level = LOG_INFO;

static const char *const names[] = { "error", "warn", "info", "debug" };

int log_parse_level(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -1;
}

void log_msg(int level, const char *fmt, ...)
{
	char line[1024];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int n, m;

	if (level > log_level)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line),
		     "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ carmyd[%d] %s: ",
		     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, (int)getpid(),
		     names[level]);
	va_start(ap, fmt);
	m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	n += m;
	if ((size_t)n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0) {
		/* Nowhere left to report it. */
	}
}
