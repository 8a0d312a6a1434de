/*
 * bench_http_floor.c - the floor of make bench-http: a bare libmicrohttpd
 * server set up as carmy-gateway's listeners are (epoll, a pool of
 * polling threads), that reads each request's body and answers one fixed
 * JSON body. No JSON, no identity, no carmyd: what HTTP alone costs here. It
 * is also the upstream of the url tool the benchmark calls.
 *
 *   bench-http-floor PORT [THREADS]
 *
 * Prints "ready PORT" once it accepts (PORT 0: any free one), and serves
 * until SIGTERM or SIGINT.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

static const char answer[] =
	"{\"execution_id\":\"exec_00000000000000000000000000000000\","
	"\"status\":\"completed\",\"data\":{\"order_id\":1}}\n";

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
				  const char *url, const char *method,
				  const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	static int first;
	struct MHD_Response *r;
	enum MHD_Result ret;

	(void)cls;
	(void)url;
	(void)method;
	(void)version;
	(void)upload;
	if (*con_cls == NULL) {
		*con_cls = &first;
		return MHD_YES;
	}
	if (*upload_size != 0) {
		*upload_size = 0;	/* read, and dropped */
		return MHD_YES;
	}
	r = MHD_create_response_from_buffer(sizeof(answer) - 1,
					    (void *)answer,
					    MHD_RESPMEM_PERSISTENT);
	if (r == NULL)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				"application/json");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

int main(int argc, char **argv)
{
	const union MHD_DaemonInfo *di;
	struct MHD_Daemon *d;
	unsigned threads = argc > 2 ? (unsigned)atoi(argv[2]) : 2;
	sigset_t sigs;
	int sig;

	if (argc < 2 || threads < 1 || threads > 64) {
		fputs("usage: bench-http-floor PORT [THREADS]\n", stderr);
		return 64;
	}
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL,
			     (uint16_t)atoi(argv[1]), NULL, NULL, on_request,
			     NULL, MHD_OPTION_THREAD_POOL_SIZE, threads,
			     MHD_OPTION_CONNECTION_TIMEOUT, 60u, MHD_OPTION_END);
	if (d == NULL) {
		fputs("bench-http-floor: cannot listen\n", stderr);
		return 1;
	}
	di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	printf("ready %u\n", di != NULL ? (unsigned)di->port : 0u);
	fflush(stdout);
	sigdelset(&sigs, SIGPIPE);
	sigwait(&sigs, &sig);
	MHD_stop_daemon(d);
	return 0;
}
