/*
 * handle.c - the gateway's connection to carmyd.
 *
 * One libcarmy handle serves every request: carmy_begin() runs on many
 * threads at once, and completions are serialised by libcarmy. The gateway
 * starts without carmyd (it then answers 503 DAEMON_UNAVAILABLE) and
 * connects on the first request that needs it; libcarmy itself reconnects
 * a handle across carmyd restarts. A handle libcarmy gives up on
 * (CARMY_EDISCONNECTED) is retired: requests that hold it finish with it,
 * the next ones get a new one, and it is closed by its last holder, since
 * carmy_close() must not run while another call uses the handle.
 *
 * carmy_connect() runs on a detached thread of its own, one at a time, and
 * never under the lock: the request that starts it waits for it at most
 * GW_CONNECT_WAIT_MS (on its execution's thread, never a polling thread),
 * and requests that come meanwhile are answered DAEMON_UNAVAILABLE at once.
 * So a carmyd that accepts and never answers costs one thread, not the
 * polling threads.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "common/log.h"
#include "gateway/gateway.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void gw_carmyd_init(struct gw_carmyd *d, const char *socket)
{
	pthread_condattr_t ca;

	d->socket = socket;
	pthread_mutex_init(&d->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->done, &ca);
	pthread_condattr_destroy(&ca);
	d->cur = NULL;
	d->last_fail_ns = 0;
	d->conn = (struct gw_connect){ false, 0 };
	d->probe = (struct gw_connect){ false, 0 };
}

struct job {
	struct gw_carmyd *d;
	struct gw_connect *k;
	struct gw_handle *h;	/* NULL: a probe */
};

/* Under d->lock: a connect's result, for the handle. */
static int adopt(struct gw_carmyd *d, struct gw_handle *h, carmy_t *c,
		 int rc)
{
	if (rc != 0) {
		if (d->last_fail_ns == 0)
			log_warn("cannot reach carmyd: %s: %s%s%s",
				 carmy_errname(rc), carmy_strerror(rc),
				 rc == CARMY_EUNTRUSTED ? " " : "",
				 rc == CARMY_EUNTRUSTED ?
					carmy_trust_detail() : "");
		d->last_fail_ns = now_ns();
		free(h);
		return rc;
	}
	log_info("connected to carmyd%s", d->last_fail_ns != 0 ? " again" : "");
	d->last_fail_ns = 0;
	h->c = c;
	d->cur = h;
	return 0;
}

static void *connector(void *arg)
{
	struct job *j = arg;
	struct gw_carmyd *d = j->d;
	carmy_t *c = NULL;
	int rc = carmy_connect(&c, d->socket);

	if (j->h == NULL)
		carmy_close(c);
	pthread_mutex_lock(&d->lock);
	if (j->h != NULL)
		rc = adopt(d, j->h, c, rc);
	j->k->rc = rc;
	j->k->running = false;
	pthread_cond_broadcast(&d->done);
	pthread_mutex_unlock(&d->lock);
	free(j);
	return NULL;
}

/* Under d->lock: start k's connect (h: for the handle, NULL: a probe) and
 * wait for it up to GW_CONNECT_WAIT_MS. Its result, or CARMY_EUNAVAILABLE
 * when it has not answered by then (it goes on, on its own thread). */
static int connect_wait(struct gw_carmyd *d, struct gw_connect *k,
			struct gw_handle *h)
{
	struct job *j = malloc(sizeof(*j));
	uint64_t end = now_ns() + GW_CONNECT_WAIT_MS * 1000000ull;
	struct timespec ts = { (time_t)(end / 1000000000u),
			       (long)(end % 1000000000u) };
	pthread_attr_t at;
	pthread_t t;
	int rc;

	if (j == NULL) {
		free(h);
		return -ENOMEM;
	}
	*j = (struct job){ d, k, h };
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &at, connector, j);
	pthread_attr_destroy(&at);
	if (rc != 0) {
		free(j);
		free(h);
		return -rc;
	}
	k->running = true;
	while (k->running &&
	       pthread_cond_timedwait(&d->done, &d->lock, &ts) != ETIMEDOUT)
		;
	return k->running ? CARMY_EUNAVAILABLE : k->rc;
}

struct gw_handle *gw_handle_get(struct gw_carmyd *d, bool wait, int *code)
{
	struct gw_handle *h = NULL;
	int rc = 0;

	pthread_mutex_lock(&d->lock);
	if (d->cur == NULL) {
		if (d->conn.running || (d->last_fail_ns != 0 &&
		    now_ns() - d->last_fail_ns < GW_RECONNECT_MS * 1000000ull))
			rc = CARMY_EUNAVAILABLE;
		else if (!wait)
			rc = -EAGAIN;
		else if ((h = calloc(1, sizeof(*h))) == NULL)
			rc = -ENOMEM;
		else
			rc = connect_wait(d, &d->conn, h);
		h = NULL;
	}
	if (rc == 0 && d->cur == NULL)
		rc = CARMY_EUNAVAILABLE;	/* retired meanwhile */
	if (rc == 0) {
		h = d->cur;
		h->refs++;
	}
	pthread_mutex_unlock(&d->lock);
	*code = rc;
	return h;
}

int gw_carmyd_probe(struct gw_carmyd *d)
{
	int rc = CARMY_EUNAVAILABLE;

	pthread_mutex_lock(&d->lock);
	if (!d->probe.running)
		rc = connect_wait(d, &d->probe, NULL);
	pthread_mutex_unlock(&d->lock);
	return rc;
}

void gw_handle_put(struct gw_carmyd *d, struct gw_handle *h)
{
	bool last;

	if (h == NULL)
		return;
	pthread_mutex_lock(&d->lock);
	last = --h->refs == 0 && h->retired;
	pthread_mutex_unlock(&d->lock);
	if (last) {
		carmy_close(h->c);
		free(h);
	}
}

void gw_handle_retire(struct gw_carmyd *d, struct gw_handle *h)
{
	pthread_mutex_lock(&d->lock);
	if (!h->retired) {
		h->retired = true;
		if (d->cur == h)
			d->cur = NULL;
		log_warn("this gateway's connection to carmyd is given up "
			 "(lost, or carmyd away): connecting anew");
	}
	pthread_mutex_unlock(&d->lock);
}

void gw_carmyd_close(struct gw_carmyd *d)
{
	pthread_mutex_lock(&d->lock);
	while (d->conn.running || d->probe.running)
		pthread_cond_wait(&d->done, &d->lock);
	if (d->cur != NULL && d->cur->refs == 0) {
		carmy_close(d->cur->c);
		free(d->cur);
	}
	d->cur = NULL;
	pthread_mutex_unlock(&d->lock);
}
