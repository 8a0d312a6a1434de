/*
 * wait.c - every wait for the server's answer, bounded.
 *
 * The server's own timeouts (statement_timeout, lock_timeout) bound what
 * it does, and TCP keepalives what a dead network does; none of them fires
 * when the server itself stops answering with its connections open (a
 * stopped or hung postmaster, a machine frozen under it, a Unix socket
 * where keepalives do not exist). libpq would wait for ever. So every
 * answer the store reads is waited for here first: a server that says
 * nothing for pg_answer_ms while it owes an answer is taken for gone, its
 * socket is shut down, and libpq reads the end of the connection as on
 * any connection lost. What the store does then is what it does for a
 * lost connection (worker.c): the batch fails or runs again on a new
 * connection, and a RESERVE that may have committed is withdrawn later.
 */
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include <libpq-fe.h>

#include "common/clock.h"
#include "stores/pg/pg.h"

/* The longest poll() between two looks at what libpq holds. */
#define AWAIT_SLICE_MS 50u

unsigned pg_answer_ms = ANSWER_MS_DEFAULT;

void pg_await(PGconn *c)
{
	const int fd = PQsocket(c);
	uint64_t now = clock_mono_ns() / 1000000u, end = now + pg_answer_ms;

	/*
	 * libpq reads the socket without blocking; asking it first each time
	 * also takes what TLS has already decrypted and holds, which poll()
	 * cannot see (a record bigger than what libpq read of it). Hence the
	 * short slices: such bytes are taken within one.
	 */
	while (fd >= 0) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		uint64_t slice;
		int n;

		if (!PQconsumeInput(c) || !PQisBusy(c))
			return;	/* an answer, or a broken connection */
		if (now >= end) {
			shutdown(fd, SHUT_RDWR);
			return;
		}
		slice = end - now < AWAIT_SLICE_MS ? end - now : AWAIT_SLICE_MS;
		n = poll(&p, 1, (int)slice);
		now = clock_mono_ns() / 1000000u;
		if (n < 0 && errno != EINTR)
			return;		/* PQgetResult() will say */
		if (n > 0)
			end = now + pg_answer_ms;	/* it spoke */
	}
}

PGresult *pg_get_result(PGconn *c)
{
	pg_await(c);
	return PQgetResult(c);
}

PGresult *pg_exec(PGconn *c, const char *sql)
{
	PGresult *last = NULL, *r;

	if (!PQsendQuery(c, sql))
		return NULL;	/* PQerrorMessage() says why */
	/* As PQexec(): the last result, but the first failure stands. */
	while ((r = pg_get_result(c)) != NULL) {
		if (last != NULL && PQresultStatus(last) == PGRES_FATAL_ERROR) {
			PQclear(r);
			continue;
		}
		PQclear(last);
		last = r;
	}
	return last;
}
