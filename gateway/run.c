/*
 * run.c - what the gateway has running, and whether it is stopping: the
 * requests routed and not yet answered, the calls given a thread, the
 * --max-running slots, and the stop that the threads sleeping between
 * tries of a result wake for. Below every other part that runs calls
 * (execute.c, record.c, flight.c, http.c, main.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "common/clock.h"
#include "gateway/gateway.h"

void gw_run_init(struct gateway *gw)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&gw->run_lock, NULL);
	pthread_cond_init(&gw->run_idle, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&gw->stop_wake, &ca);
	pthread_condattr_destroy(&ca);
	gw->running = gw->executions = gw->requests = 0;
	gw->stopping = false;
}

/* Under run_lock: wake gw_wait_idle() if nothing is left. */
static void idle_check(struct gateway *gw)
{
	if (gw->running == 0 && gw->requests == 0)
		pthread_cond_broadcast(&gw->run_idle);
}

void gw_running_add(struct gateway *gw, int d, bool execution)
{
	pthread_mutex_lock(&gw->run_lock);
	gw->running = (unsigned)((int)gw->running + d);
	if (execution)
		gw->executions = (unsigned)((int)gw->executions + d);
	idle_check(gw);
	pthread_mutex_unlock(&gw->run_lock);
}

/*
 * The request is counted and stopping read under one lock: a request
 * that finds the gateway not stopping is counted before gw_stop() can
 * return, so gw_wait_idle() waits for its answer, and every request
 * routed after gw_stop() is refused without being suspended.
 * libmicrohttpd's daemons must not be stopped with a connection
 * suspended, nor before an answer queued is sent.
 */
bool gw_request_begin(struct gateway *gw)
{
	bool serve;

	pthread_mutex_lock(&gw->run_lock);
	gw->requests++;
	serve = !gw->stopping;
	pthread_mutex_unlock(&gw->run_lock);
	return serve;
}

void gw_request_end(struct gateway *gw)
{
	pthread_mutex_lock(&gw->run_lock);
	gw->requests--;
	idle_check(gw);
	pthread_mutex_unlock(&gw->run_lock);
}

void gw_stop(struct gateway *gw)
{
	pthread_mutex_lock(&gw->run_lock);
	gw->stopping = true;
	pthread_cond_broadcast(&gw->stop_wake);
	pthread_mutex_unlock(&gw->run_lock);
}

void gw_wait_idle(struct gateway *gw)
{
	pthread_mutex_lock(&gw->run_lock);
	while (gw->running > 0 || gw->requests > 0)
		pthread_cond_wait(&gw->run_idle, &gw->run_lock);
	pthread_mutex_unlock(&gw->run_lock);
}

bool gw_stop_sleep(struct gateway *gw, unsigned ms)
{
	uint64_t until = clock_mono_ns() + (uint64_t)ms * 1000000u;
	struct timespec ts = {
		.tv_sec = (time_t)(until / 1000000000u),
		.tv_nsec = (long)(until % 1000000000u),
	};
	bool stopping;
	int rc = 0;

	pthread_mutex_lock(&gw->run_lock);
	while (!gw->stopping && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&gw->stop_wake, &gw->run_lock,
					    &ts);
	stopping = gw->stopping;
	pthread_mutex_unlock(&gw->run_lock);
	return stopping;
}

bool gw_slot_take(struct gateway *gw, bool force)
{
	unsigned n = __atomic_load_n(&gw->slots, __ATOMIC_RELAXED);

	do {
		if (n >= gw->max_running && !force)
			return false;
	} while (!__atomic_compare_exchange_n(&gw->slots, &n, n + 1, true,
					      __ATOMIC_ACQUIRE,
					      __ATOMIC_RELAXED));
	return true;
}

void gw_slot_put(struct gateway *gw)
{
	__atomic_sub_fetch(&gw->slots, 1, __ATOMIC_RELEASE);
}

