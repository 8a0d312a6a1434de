/*
 * upstream.c - a url tool: one POST to its upstream, with libcurl.
 *
 * The arguments are the JSON body, with "Idempotency-Key: <execution_id>"
 * so that an upstream that keeps its own keys can tell a retry too. A 2xx
 * answer that is one JSON value: completed, with it as data. Any other
 * answer: failed, with the upstream's status in the message. No answer
 * within the tool's timeout: timed_out. A call that provably never reached
 * the upstream (its name did not resolve, the connection was refused)
 * ran nothing: the reservation is released and a retry tries again.
 *
 * This runs on the execution's own thread, in one blocking
 * curl_easy_perform(); libcurl's global state is set up in main() before
 * any thread starts. libcurl opens its connections without close-on-exec:
 * they are opened here with it, so that a program the gateway starts
 * meanwhile (carmyctl for /metrics) does not get one. A command tool gets
 * no descriptor but 0, 1 and 2 whatever (command.c), which also covers the
 * socket pairs libcurl makes for itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <curl/curl.h>

#include "gateway/gateway.h"

/* The upstream's answer: at most keep bytes, the rest counted as over. */
struct body {
	char *buf;
	size_t len, cap, keep;
	bool over;
};

static size_t on_data(char *p, size_t size, size_t n, void *cls)
{
	struct body *b = cls;
	size_t len = size * n;

	if (b->over || len > b->keep - b->len) {
		b->over = true;
		return len;	/* read on, dropped */
	}
	if (gw_append(&b->buf, &b->len, &b->cap, p, len) != 0)
		return 0;	/* libcurl fails the transfer */
	return len;
}

static curl_socket_t open_socket(void *cls, curlsocktype purpose,
				 struct curl_sockaddr *a)
{
	(void)cls;
	(void)purpose;
	return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

static CURLcode post(const struct gw_exec *x, struct body *b, long *status,
		     char *errbuf)
{
	const struct gw_tool *t = x->call.tool;
	/* No "Expect: 100-continue" round trip before the body. */
	const char *fields[] = { "Content-Type: application/json", "Expect:",
				 NULL };
	struct curl_slist *h = NULL, *n = NULL;
	char key[64];
	CURLcode cc = CURLE_OUT_OF_MEMORY;
	CURL *e = curl_easy_init();

	snprintf(key, sizeof(key), "Idempotency-Key: %s", x->execution_id);
	fields[2] = key;
	for (size_t i = 0; i < 3; i++) {
		n = curl_slist_append(h, fields[i]);
		if (n == NULL)
			break;
		h = n;
	}
	if (e != NULL && n != NULL) {
		curl_easy_setopt(e, CURLOPT_URL, t->url);
		curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(e, CURLOPT_POST, 1L);
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->call.args_json);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE,
				 (long)x->call.args_json_len);
		curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)t->timeout_ms);
		curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_socket);
		curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
		curl_easy_setopt(e, CURLOPT_WRITEDATA, b);
		curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
		curl_easy_setopt(e, CURLOPT_USERAGENT,
				 "carmy-gateway/" PACKAGE_VERSION);
		cc = curl_easy_perform(e);
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
	}
	curl_slist_free_all(h);
	curl_easy_cleanup(e);
	return cc;
}

void gw_url_run(struct gw_exec *x)
{
	struct body b = { .keep = 16u * 1024 * 1024 };
	char errbuf[CURL_ERROR_SIZE] = "", msg[CURL_ERROR_SIZE + 128];
	const char *code = "TOOL_FAILED";
	long http = 0;
	int status = CARMY_STATUS_FAILED, rc;
	CURLcode cc;

	if (x->h != NULL)
		b.keep = carmy_max_result(x->h->c) + 1;
	cc = post(x, &b, &http, errbuf);
	switch (cc) {
	case CURLE_OK:
		if (http >= 200 && http <= 299 && b.over) {
			gw_answer_too_large(x->answer, x->execution_id);
			rc = 0;
			break;
		}
		if (http >= 200 && http <= 299) {
			rc = gw_answer_output(x->answer, x->execution_id, b.buf,
					      b.len, "The upstream's answer",
					      &status);
			break;
		}
		snprintf(msg, sizeof(msg), "The upstream answered HTTP %ld.",
			 http);
		rc = gw_answer_execution(x->answer, x->execution_id, status,
					 NULL, code, msg);
		break;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_COULDNT_CONNECT:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
		/* Nothing reached the upstream: no connection, or no TLS
		 * session to send the request through. */
		snprintf(msg, sizeof(msg), "the upstream: %s",
			 errbuf[0] != '\0' ? errbuf : curl_easy_strerror(cc));
		gw_exec_not_started(x, msg);
		free(b.buf);
		return;
	case CURLE_OPERATION_TIMEDOUT:
		status = CARMY_STATUS_TIMED_OUT;
		snprintf(msg, sizeof(msg), "The upstream did not answer within "
			 "%.3f s. Its effect may or may not have happened.",
			 x->call.tool->timeout_ms / 1000.0);
		rc = gw_answer_execution(x->answer, x->execution_id, status,
					 NULL, "TOOL_TIMEOUT", msg);
		break;
	default:
		/* The request went, or may have (sent in part, an answer cut
		 * short, empty, malformed or too large, no memory for it):
		 * the upstream may have done it. */
		snprintf(msg, sizeof(msg), "the upstream: %s",
			 errbuf[0] != '\0' ? errbuf : curl_easy_strerror(cc));
		gw_exec_lost(x, msg);
		free(b.buf);
		return;
	}
	free(b.buf);
	if (rc != 0)
		gw_exec_lost(x, "no memory for its answer");
	else
		gw_exec_record(x, status);
}
