/*
 * flight.c - answers made once for every request that waits for them
 * (GET /healthz, GET /metrics).
 *
 * Such a request may wait (for carmyd's HELLO, for carmyctl), so a polling
 * thread does not make its answer; but neither does a thread of its own:
 * an unauthenticated client could then start as many threads as it has
 * connections. A flight has at most one thread. It takes every request
 * waiting, makes one answer with fill(), hands each a copy and resumes it,
 * and looks again; once nobody has come for GW_FLIGHT_LINGER_MS it ends
 * (so a steady scraper does not start a thread each time). A request that
 * comes while fill() runs waits for the next fill, so no answer predates
 * its request.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "gateway/gateway.h"

void gw_flight_init(struct gw_flight *f, struct gateway *gw,
		    void (*fill)(struct gateway *gw, struct gw_answer *a))
{
	pthread_condattr_t ca;

	f->gw = gw;
	f->fill = fill;
	pthread_mutex_init(&f->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->more, &ca);
	pthread_condattr_destroy(&ca);
	f->running = false;
	f->stopping = false;
	f->head = NULL;
	f->tail = &f->head;
}

/* A copy of src into dst; an empty 500 when out of memory. */
static void copy_answer(struct gw_answer *dst, const struct gw_answer *src)
{
	gw_answer_free(dst);
	*dst = *src;
	dst->body = NULL;
	dst->len = 0;
	if (src->body == NULL)
		return;
	dst->body = malloc(src->len + 1);
	if (dst->body == NULL) {
		dst->status = 500;
		dst->type = NULL;
		dst->retry_after = false;
		return;
	}
	memcpy(dst->body, src->body, src->len + 1);
	dst->len = src->len;
}

/* The waiting requests, taken, once there are any; NULL (and the thread
 * is to end) when none came for GW_FLIGHT_LINGER_MS, or the gateway
 * stops. */
static struct gw_waiter *take(struct gw_flight *f)
{
	struct gw_waiter *w;
	struct timespec ts;
	int rc = 0;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += GW_FLIGHT_LINGER_MS / 1000;
	ts.tv_nsec += (long)(GW_FLIGHT_LINGER_MS % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&f->lock);
	while (f->head == NULL && !f->stopping && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&f->more, &f->lock, &ts);
	w = f->head;
	f->head = NULL;
	f->tail = &f->head;
	if (w == NULL)
		f->running = false;
	pthread_mutex_unlock(&f->lock);
	return w;
}

static void *flight_thread(void *arg)
{
	struct gw_flight *f = arg;
	struct gateway *gw = f->gw;
	struct gw_waiter *w, *next;

	while ((w = take(f)) != NULL) {
		struct gw_answer a = { 0 };

		f->fill(gw, &a);
		for (; w != NULL; w = next) {
			next = w->next;	/* w is not ours after done() */
			copy_answer(w->answer, &a);
			w->done(w->arg);
		}
		gw_answer_free(&a);
	}
	gw_running_add(gw, -1, false);
	return NULL;
}

int gw_flight_join(struct gw_flight *f, struct gw_waiter *w)
{
	pthread_attr_t at;
	pthread_t t;
	bool start;
	int rc = 0;

	w->next = NULL;
	pthread_mutex_lock(&f->lock);
	*f->tail = w;
	f->tail = &w->next;
	start = !f->running;
	if (!start)
		pthread_cond_signal(&f->more);
	if (start) {
		/* Counted before it exists: the gateway stops only once it
		 * has ended. */
		gw_running_add(f->gw, 1, false);
		rc = pthread_attr_init(&at);
		if (rc == 0) {
			pthread_attr_setdetachstate(&at,
						    PTHREAD_CREATE_DETACHED);
			rc = pthread_create(&t, &at, flight_thread, f);
			pthread_attr_destroy(&at);
		}
		if (rc == 0) {
			f->running = true;
		} else {
			/* Nobody else waits: the thread runs while any does. */
			f->head = NULL;
			f->tail = &f->head;
			gw_running_add(f->gw, -1, false);
		}
	}
	pthread_mutex_unlock(&f->lock);
	if (rc != 0)
		log_error("cannot start a thread to answer: %s", strerror(rc));
	return rc == 0 ? 0 : -1;
}

void gw_flight_stop(struct gw_flight *f)
{
	pthread_mutex_lock(&f->lock);
	f->stopping = true;
	pthread_cond_broadcast(&f->more);
	pthread_mutex_unlock(&f->lock);
}
