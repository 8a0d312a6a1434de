/*
 * log.h - carmyd's log: one line per event on stderr (or --log-file).
 */
#ifndef CARMY_COMMON_LOG_H
#define CARMY_COMMON_LOG_H

#include <stddef.h>

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

extern int log_level;
/* The program named on every line: "carmyd" unless a program sets it. */
extern const char *log_ident;

int log_parse_level(const char *s);
void log_msg(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * n bytes at p as text for a log line, into out (room >= 4 bytes, always
 * NUL-terminated): printable ASCII as is, '\\' doubled, every other byte
 * \xNN, and "..." where room ends. For bytes a client chose (identities):
 * raw, a newline in them would forge a line of the log, a NUL cut it.
 */
const char *log_bytes(char *out, size_t room, const void *p, size_t n);

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) \
	do { if (log_level >= LOG_DEBUG) log_msg(LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
