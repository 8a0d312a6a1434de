/*
 * thread.h - names for carmyd's threads, as ps -L, top -H, perf and gdb
 * show them. The first event loop runs on the main thread, whose name is
 * the process's (carmyd), and keeps it.
 */
#ifndef CARMY_COMMON_THREAD_H
#define CARMY_COMMON_THREAD_H

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

/* Name the calling thread; longer names are cut to the kernel's 15
 * characters. Best effort: a thread without its name runs all the same. */
static inline void thread_name(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static inline void thread_name(const char *fmt, ...)
{
	char name[16];	/* the kernel's TASK_COMM_LEN, the NUL included */
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	(void)pthread_setname_np(pthread_self(), name);
}

#endif
