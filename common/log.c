/*
 * log.c - timestamped, levelled lines on stderr. One write(2) per line so
 * that lines from a restarted carmyd and its predecessor never interleave.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

int log_level = LOG_INFO;
const char *log_ident = "carmyd";

static const char *const names[] = { "error", "warn", "info", "debug" };
/* syslog(3)'s LOG_ERR, LOG_WARNING, LOG_INFO and LOG_DEBUG. */
static const int syslog_levels[] = { 3, 4, 6, 7 };
/* Set by log_detect_journal(): lines start with <N>. */
static bool to_journal;

int log_parse_level(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -1;
}

bool log_is_journal(const char *env, int fd)
{
	unsigned long long dev, ino;
	struct stat st;
	char *end;

	if (env == NULL || env[0] < '0' || env[0] > '9')
		return false;
	errno = 0;
	dev = strtoull(env, &end, 10);
	if (errno != 0 || *end != ':' || end[1] < '0' || end[1] > '9')
		return false;
	ino = strtoull(end + 1, &end, 10);
	if (errno != 0 || *end != '\0' || fstat(fd, &st) != 0)
		return false;
	return (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

void log_detect_journal(void)
{
	to_journal = log_is_journal(getenv("JOURNAL_STREAM"), STDERR_FILENO);
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
	n = to_journal ? snprintf(line, sizeof(line), "<%d>",
				  syslog_levels[level]) : 0;
	n += snprintf(line + n, sizeof(line) - (size_t)n,
		     "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] %s: ",
		     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, log_ident,
		     (int)getpid(), names[level]);
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

const char *log_bytes(char *out, size_t room, const void *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *b = p;
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		char e[4];
		size_t k = 0;

		if (b[i] == '\\') {
			e[k++] = '\\';
			e[k++] = '\\';
		} else if (b[i] >= 0x20 && b[i] < 0x7f) {
			e[k++] = (char)b[i];
		} else {
			e[k++] = '\\';
			e[k++] = 'x';
			e[k++] = hex[b[i] >> 4];
			e[k++] = hex[b[i] & 15];
		}
		/* Room for this, and for "..." should more follow. */
		if (o + k + (i + 1 < n ? 3 : 0) + 1 > room) {
			if (o + 4 <= room) {
				memcpy(out + o, "...", 3);
				o += 3;
			}
			break;
		}
		memcpy(out + o, e, k);
		o += k;
	}
	out[o] = '\0';
	return out;
}
