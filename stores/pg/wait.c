/*
 * wait.c - every wait on the server, bounded: for its answers, and for
 * room to send it more.
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
 *
 * Sending is bounded the same way. The connection is non-blocking
 * (conn.c): libpq keeps what the socket will not take, and pg_await()
 * flushes it first, waiting for the socket to take more (or for the
 * server's answers, which libpq reads meanwhile so that neither side
 * waits for the other); a server that takes nothing and says nothing
 * for pg_answer_ms (a stopped one, its socket buffer full under a large
 * batch) is taken for gone as above.
 */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/socket.h>

#include <libpq-fe.h>

#include "common/clock.h"
#include "stores/pg/pg.h"

/* The longest poll() between two looks at what libpq holds. */
#define AWAIT_SLICE_MS 50u

unsigned pg_answer_ms = ANSWER_MS_DEFAULT;

/*
 * A wait the store asks of the server itself, ms at most and within the
 * store's timeout: the server answers that it waited in vain (a sentence
 * the store can act on) before the store takes its silence for a server
 * gone. A statement's (statement_timeout) ends a quarter short of
 * pg_answer_ms, a lock's (lock_timeout) at half, so that a lock waited
 * for in vain is told as such, not as a statement too long. With the
 * default timeout= (40 s) every wait is its own.
 */
unsigned pg_server_wait_ms(unsigned ms, bool lock)
{
	unsigned most = lock ? pg_answer_ms / 2 :
			pg_answer_ms - pg_answer_ms / 4;

	return ms < most ? ms : most;
}

/* Poll fd for events up to end, in slices: -1 (poll failed), 0 or
 * the revents; *now updated, *end pushed back if the server moved. */
static int poll_slice(int fd, short events, uint64_t *now, uint64_t *end)
{
	struct pollfd p = { .fd = fd, .events = events };
	uint64_t slice = *end - *now < AWAIT_SLICE_MS ? *end - *now :
			 AWAIT_SLICE_MS;
	int n = poll(&p, 1, (int)slice);

	*now = clock_mono_ns() / 1000000u;
	if (n < 0)
		return errno == EINTR ? 0 : -1;
	if (n > 0)
		*end = *now + pg_answer_ms;	/* it spoke, or took */
	return n > 0 ? p.revents : 0;
}

/* Send what libpq holds: 0 once all is sent, -1 if the connection broke
 * or the server took nothing and said nothing for pg_answer_ms (then its
 * socket is shut down). */
static int flush(PGconn *c, int fd)
{
	uint64_t now = clock_mono_ns() / 1000000u, end = now + pg_answer_ms;
	int rc;

	while ((rc = PQflush(c)) == 1) {
		int ev;

		if (now >= end) {
			shutdown(fd, SHUT_RDWR);
			return -1;
		}
		ev = poll_slice(fd, POLLIN | POLLOUT, &now, &end);
		if (ev < 0)
			return -1;
		/* The server's answers, read so that it can go on. */
		if ((ev & POLLIN) && !PQconsumeInput(c))
			return -1;
	}
	return rc;
}

void pg_await(PGconn *c)
{
	const int fd = PQsocket(c);
	uint64_t now = clock_mono_ns() / 1000000u, end = now + pg_answer_ms;

	if (fd < 0 || flush(c, fd) != 0)
		return;		/* PQgetResult() will say */

	/*
	 * libpq reads the socket without blocking; asking it first each time
	 * also takes what TLS has already decrypted and holds, which poll()
	 * cannot see (a record bigger than what libpq read of it). Hence the
	 * short slices: such bytes are taken within one.
	 */
	for (;;) {
		if (!PQconsumeInput(c) || !PQisBusy(c))
			return;	/* an answer, or a broken connection */
		if (now >= end) {
			shutdown(fd, SHUT_RDWR);
			return;
		}
		if (poll_slice(fd, POLLIN, &now, &end) < 0)
			return;		/* PQgetResult() will say */
	}
}

PGresult *pg_get_result(PGconn *c)
{
	pg_await(c);
	return PQgetResult(c);
}

/* The results of the command just sent, as PQexec() would give them:
 * the last result, but the first failure stands. */
static PGresult *last_result(PGconn *c)
{
	PGresult *last = NULL, *r;

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

PGresult *pg_exec(PGconn *c, const char *sql)
{
	if (!PQsendQuery(c, sql))
		return NULL;	/* PQerrorMessage() says why */
	return last_result(c);
}

PGresult *pg_prepare(PGconn *c, const char *name, const char *sql,
		     int nparams, const Oid *types)
{
	if (!PQsendPrepare(c, name, sql, nparams, types))
		return NULL;	/* PQerrorMessage() says why */
	return last_result(c);
}
