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
	d->socket = socket;
	pthread_mutex_init(&d->lock, NULL);
	d->cur = NULL;
	d->last_fail_ns = 0;
}

/* Under d->lock: connect, unless the last try failed only just now. */
static int connect_locked(struct gw_carmyd *d)
{
	struct gw_handle *h;
	uint64_t now = now_ns();
	carmy_t *c;
	int rc;

	if (d->last_fail_ns != 0 &&
	    now - d->last_fail_ns < GW_RECONNECT_MS * 1000000ull)
		return CARMY_EUNAVAILABLE;
	h = calloc(1, sizeof(*h));
	if (h == NULL)
		return -ENOMEM;
	rc = carmy_connect(&c, d->socket);
	if (rc != 0) {
		free(h);
		if (d->last_fail_ns == 0)
			log_warn("cannot reach carmyd: %s: %s%s%s",
				 carmy_errname(rc), carmy_strerror(rc),
				 rc == CARMY_EUNTRUSTED ? " " : "",
				 rc == CARMY_EUNTRUSTED ?
					carmy_trust_detail() : "");
		d->last_fail_ns = now;
		return rc;
	}
	if (d->last_fail_ns != 0)
		log_info("connected to carmyd again");
	d->last_fail_ns = 0;
	h->c = c;
	d->cur = h;
	return 0;
}

struct gw_handle *gw_handle_get(struct gw_carmyd *d, int *code)
{
	struct gw_handle *h = NULL;
	int rc = 0;

	pthread_mutex_lock(&d->lock);
	if (d->cur == NULL)
		rc = connect_locked(d);
	if (rc == 0) {
		h = d->cur;
		h->refs++;
	}
	pthread_mutex_unlock(&d->lock);
	*code = rc;
	return h;
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
		log_warn("carmyd gave up this gateway's connection: "
			 "connecting anew");
	}
	pthread_mutex_unlock(&d->lock);
}

void gw_carmyd_close(struct gw_carmyd *d)
{
	pthread_mutex_lock(&d->lock);
	if (d->cur != NULL && d->cur->refs == 0) {
		carmy_close(d->cur->c);
		free(d->cur);
	}
	d->cur = NULL;
	pthread_mutex_unlock(&d->lock);
}
