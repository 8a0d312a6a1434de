/*
 * log.h - carmyd's log: one line per event on stderr (or --log-file).
 */
#ifndef CARMY_COMMON_LOG_H
#define CARMY_COMMON_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

extern int log_level;
/* The program named on every line: "carmyd" unless a program sets it. */
extern const char *log_ident;

int log_parse_level(const char *s);

/*
 * Is fd the stream $JOURNAL_STREAM names? systemd sets it to "DEV:INO",
 * the device and inode of the stream it connected to journald, for a
 * service whose standard error goes there; a descendant whose stderr was
 * redirected elsewhere has another. env NULL or malformed: false.
 */
bool log_is_journal(const char *env, int fd);

/*
 * Look whether stderr is the journal (log_is_journal()): if it is, every
 * line begins with its syslog level, <3> error, <4> warn, <6> info,
 * <7> debug, which journald takes as the entry's priority (journalctl -p)
 * and strips; otherwise lines are left as they are. Call it from main()
 * once stderr is what it will be (after --log-file), before any thread
 * logs.
 */
void log_detect_journal(void);
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
