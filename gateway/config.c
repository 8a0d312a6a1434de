/*
 * config.c - the --tools and --tokens files. Both are JSON read with
 * jansson, strictly: an unknown field, a duplicate key or a value of the
 * wrong type stops the gateway before it serves anything, with the file
 * and the field named. So does a file whose owner is neither the
 * gateway's user nor root, or which group or others may write
 * (open_trusted()); the tokens file, which holds secrets, must be closed
 * to group and others altogether.
 *
 *   --tools:  {"tools": {"NAME": {"description": "...",
 *                                 "input_schema": {...},
 *                                 "timeout": SECONDS,
 *                                 "command": ["/path/prog", "arg", ...]
 *                                 | "url": "http://host:port/path",
 *                                 "fingerprint_headers": ["X-Tenant"]}}}
 *   --tokens: {"tokens": {"<token>": "<principal>"}}
 */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/gateway.h"

static void fail(char *err, size_t err_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void fail(char *err, size_t err_len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, err_len, fmt, ap);
	va_end(ap);
}

/* The file's one object, whose only key is top; NULL with err set. */
static json_t *load(int fd, const char *path, const char *top, char *err,
		    size_t err_len)
{
	json_error_t je;
	json_t *root, *v;

	root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je);
	if (root == NULL) {
		fail(err, err_len, "%s: line %d, column %d: %s", path, je.line,
		     je.column, je.text);
		return NULL;
	}
	v = json_object_get(root, top);
	if (!json_is_object(root) || json_object_size(root) != 1 ||
	    !json_is_object(v)) {
		fail(err, err_len, "%s: must be one object {\"%s\": {...}}",
		     path, top);
		json_decref(root);
		return NULL;
	}
	return root;
}

/* "name (uid N)", or "uid N" for a uid without a name. */
static void user_name(uid_t uid, char *buf, size_t size)
{
	struct passwd pw, *found = NULL;
	char pwbuf[1024];

	if (getpwuid_r(uid, &pw, pwbuf, sizeof(pwbuf), &found) == 0 &&
	    found != NULL)
		snprintf(buf, size, "%s (uid %u)", pw.pw_name, (unsigned)uid);
	else
		snprintf(buf, size, "uid %u", (unsigned)uid);
}

/*
 * path, open, as a regular file whose owner is the gateway's user or root
 * and which neither group nor others may write: whoever may write the
 * tools file chooses the commands the gateway runs, as its user, and
 * whoever may write the tokens file whom it serves. what says which file
 * it is, for the error. The descriptor, or -1 with err set.
 */
static int open_trusted(const char *path, const char *what, struct stat *st,
			char *err, size_t err_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	uid_t me = geteuid();
	char owner[300], self[300];

	if (fd < 0) {
		fail(err, err_len, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
		fail(err, err_len, "%s: not a regular file", path);
		close(fd);
		return -1;
	}
	if ((st->st_uid == me || st->st_uid == 0) &&
	    (st->st_mode & (S_IWGRP | S_IWOTH)) == 0)
		return fd;
	user_name(st->st_uid, owner, sizeof(owner));
	user_name(me, self, sizeof(self));
	fail(err, err_len, "%s: owner %s, mode %04o: %s, so it must be owned "
	     "by %s, the gateway's user,%s and writable by its owner only "
	     "(chown it, chmod go-w it)", path, owner,
	     (unsigned)(st->st_mode & 07777), what, self,
	     me == 0 ? "" : " or root,");
	close(fd);
	return -1;
}

/* ------------------------------------------------------------ tools */

static bool name_ok(const char *s, size_t len, size_t max)
{
	if (len == 0 || len > max)
		return false;
	for (size_t i = 0; i < len; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' ||
		      ch == '-'))
			return false;
	}
	return true;
}

static char **strings(json_t *arr, size_t *n, bool lower)
{
	size_t i, count = json_array_size(arr);
	char **v = calloc(count + 1, sizeof(*v));
	json_t *e;

	if (v == NULL)
		return NULL;
	json_array_foreach(arr, i, e) {
		char *s = strdup(json_string_value(e));

		if (s == NULL) {
			for (size_t k = 0; k < i; k++)
				free(v[k]);
			free(v);
			return NULL;
		}
		for (char *p = s; lower && *p != '\0'; p++)
			if (*p >= 'A' && *p <= 'Z')
				*p = (char)(*p - 'A' + 'a');
		v[i] = s;
	}
	if (n != NULL)
		*n = count;
	return v;
}

static bool string_array(json_t *v, bool names)
{
	size_t i;
	json_t *e;

	if (!json_is_array(v))
		return false;
	json_array_foreach(v, i, e) {
		const char *s = json_string_value(e);

		if (s == NULL || s[0] == '\0')
			return false;
		if (names && !name_ok(s, strlen(s), 256))
			return false;
	}
	return true;
}

/*
 * The second of two names of arr equal but for case, or NULL. Each
 * fingerprint header is one key of the call's metadata, a map, which
 * libcarmy refuses with a key twice: a tool listing a header twice could
 * never be called.
 */
static const char *repeated_name(json_t *arr)
{
	size_t n = json_array_size(arr);

	for (size_t i = 1; i < n; i++) {
		const char *s = json_string_value(json_array_get(arr, i));

		for (size_t k = 0; k < i; k++)
			if (strcasecmp(s, json_string_value(
						  json_array_get(arr, k))) == 0)
				return s;
	}
	return NULL;
}

static bool url_ok(const char *u)
{
	size_t n = u != NULL ? strlen(u) : 0;

	if (n > 2048 || !(strncmp(u, "http://", 7) == 0 ||
			  strncmp(u, "https://", 8) == 0))
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)u[i] <= ' ' || u[i] == 0x7f)
			return false;
	return n > 8;
}

/* One tool's entry into t; -1 with err. */
static int tool_load(const char *path, const char *name, json_t *o,
		     struct gw_tool *t, char *err, size_t err_len)
{
	static const char *const known[] = {
		"description", "input_schema", "timeout", "command",
		"fingerprint_headers", "url",
	};
	json_t *desc, *schema, *timeout, *cmd, *fph, *url, *v;
	const char *key, *dup;
	double secs;

	if (!name_ok(name, strlen(name), GW_TOOL_NAME_MAX)) {
		fail(err, err_len, "%s: tool name '%s': 1 to %d of A-Z a-z "
		     "0-9 _ . -", path, name, GW_TOOL_NAME_MAX);
		return -1;
	}
	if (!json_is_object(o)) {
		fail(err, err_len, "%s: tool %s: must be an object", path,
		     name);
		return -1;
	}
	json_object_foreach(o, key, v) {
		size_t k = 0;

		while (k < sizeof(known) / sizeof(*known) &&
		       strcmp(known[k], key) != 0)
			k++;
		if (k == sizeof(known) / sizeof(*known)) {
			fail(err, err_len, "%s: tool %s: unknown field '%s'",
			     path, name, key);
			return -1;
		}
	}
	desc = json_object_get(o, "description");
	schema = json_object_get(o, "input_schema");
	timeout = json_object_get(o, "timeout");
	cmd = json_object_get(o, "command");
	fph = json_object_get(o, "fingerprint_headers");
	url = json_object_get(o, "url");
	if ((cmd == NULL) == (url == NULL)) {
		fail(err, err_len, "%s: tool %s: needs \"command\" or \"url\", "
		     "not both", path, name);
		return -1;
	}
	if (cmd != NULL && (!string_array(cmd, false) ||
			    json_array_size(cmd) == 0)) {
		fail(err, err_len, "%s: tool %s: \"command\" must be a "
		     "non-empty array of non-empty strings", path, name);
		return -1;
	}
	if (url != NULL && !url_ok(json_string_value(url))) {
		fail(err, err_len, "%s: tool %s: \"url\" must be an http:// or "
		     "https:// URL without spaces", path, name);
		return -1;
	}
	if (desc != NULL && !json_is_string(desc)) {
		fail(err, err_len, "%s: tool %s: \"description\" must be a "
		     "string", path, name);
		return -1;
	}
	if (schema != NULL && !json_is_object(schema)) {
		fail(err, err_len, "%s: tool %s: \"input_schema\" must be an "
		     "object", path, name);
		return -1;
	}
	if (fph != NULL && !string_array(fph, true)) {
		fail(err, err_len, "%s: tool %s: \"fingerprint_headers\" must "
		     "be an array of header names", path, name);
		return -1;
	}
	if (fph != NULL && (dup = repeated_name(fph)) != NULL) {
		fail(err, err_len, "%s: tool %s: \"fingerprint_headers\" names "
		     "the header %s twice (header names are case-insensitive)",
		     path, name, dup);
		return -1;
	}
	t->timeout_ms = GW_TIMEOUT_DEFAULT_MS;
	if (timeout != NULL) {
		secs = json_is_number(timeout) ? json_number_value(timeout) : 0;
		if (!(secs > 0 && secs * 1000 <= GW_TIMEOUT_MAX_MS)) {
			fail(err, err_len, "%s: tool %s: \"timeout\" must be a "
			     "number of seconds, more than 0 and at most %u",
			     path, name, GW_TIMEOUT_MAX_MS / 1000);
			return -1;
		}
		t->timeout_ms = (uint32_t)(secs * 1000 + 0.5);
		if (t->timeout_ms == 0)
			t->timeout_ms = 1;
	}
	t->name = strdup(name);
	t->description = desc != NULL ? strdup(json_string_value(desc)) : NULL;
	t->input_schema = json_incref(schema);
	if (cmd != NULL)
		t->argv = strings(cmd, NULL, false);
	else
		t->url = strdup(json_string_value(url));
	if (fph != NULL)
		t->fp_headers = strings(fph, &t->n_fp_headers, true);
	if (t->name == NULL || (desc != NULL && t->description == NULL) ||
	    (t->argv == NULL && t->url == NULL) ||
	    (fph != NULL && t->fp_headers == NULL)) {
		fail(err, err_len, "out of memory");
		return -1;
	}
	return 0;
}

static int tool_cmp(const void *a, const void *b)
{
	return strcmp(((const struct gw_tool *)a)->name,
		      ((const struct gw_tool *)b)->name);
}

int gw_tools_load(const char *path, struct gw_tools *t, char *err,
		  size_t err_len)
{
	json_t *root, *tools, *o;
	struct stat st;
	const char *name;
	int fd, rc = 0;

	memset(t, 0, sizeof(*t));
	fd = open_trusted(path, "it says which commands the gateway runs",
			  &st, err, err_len);
	if (fd < 0)
		return -1;
	root = load(fd, path, "tools", err, err_len);
	close(fd);
	if (root == NULL)
		return -1;
	tools = json_object_get(root, "tools");
	t->v = calloc(json_object_size(tools) + 1, sizeof(*t->v));
	if (t->v == NULL) {
		fail(err, err_len, "out of memory");
		rc = -1;
	}
	json_object_foreach(tools, name, o) {
		if (rc != 0)
			break;
		rc = tool_load(path, name, o, &t->v[t->n++], err, err_len);
	}
	json_decref(root);
	if (rc == 0 && t->n == 0) {
		fail(err, err_len, "%s: no tools", path);
		rc = -1;
	}
	if (rc != 0) {
		gw_tools_free(t);
		return -1;
	}
	qsort(t->v, t->n, sizeof(*t->v), tool_cmp);
	return 0;
}

void gw_tools_free(struct gw_tools *t)
{
	for (size_t i = 0; i < t->n; i++) {
		struct gw_tool *x = &t->v[i];

		free(x->name);
		free(x->description);
		json_decref(x->input_schema);
		for (char **p = x->argv; p != NULL && *p != NULL; p++)
			free(*p);
		free(x->argv);
		free(x->url);
		for (size_t k = 0; k < x->n_fp_headers; k++)
			free(x->fp_headers[k]);
		free(x->fp_headers);
	}
	free(t->v);
	memset(t, 0, sizeof(*t));
}

const struct gw_tool *gw_tool_find(const struct gw_tools *t, const char *name,
				   size_t len)
{
	size_t lo = 0, hi = t->n;

	if (memchr(name, '\0', len) != NULL)
		return NULL;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *m = t->v[mid].name;
		size_t mlen = strlen(m);
		int c = memcmp(m, name, mlen < len ? mlen : len);

		if (c == 0)
			c = mlen < len ? -1 : mlen > len ? 1 : 0;
		if (c == 0)
			return &t->v[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* ------------------------------------------------------------ tokens */

/* RFC 6750's b64token: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" /
 * "/" ) *"=". */
static bool token_ok(const char *s, size_t len)
{
	size_t i = 0;

	while (i < len && (name_ok(s + i, 1, 1) || s[i] == '~' ||
			   s[i] == '+' || s[i] == '/'))
		i++;
	if (i == 0)
		return false;
	while (i < len && s[i] == '=')
		i++;
	return i == len && len <= 4096;
}

int gw_tokens_load(const char *path, struct gw_tokens *t, char *err,
		   size_t err_len)
{
	json_t *root, *tokens, *v;
	struct stat st;
	const char *tok;
	int fd, rc = 0;

	memset(t, 0, sizeof(*t));
	fd = open_trusted(path, "it says whom the gateway serves", &st, err,
			  err_len);
	if (fd < 0)
		return -1;
	if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
		fail(err, err_len, "%s: group or others may read or write it "
		     "(mode %03o): it holds secrets; chmod 600 it", path,
		     (unsigned)(st.st_mode & 0777));
		close(fd);
		return -1;
	}
	root = load(fd, path, "tokens", err, err_len);
	close(fd);
	if (root == NULL)
		return -1;
	tokens = json_object_get(root, "tokens");
	t->v = calloc(json_object_size(tokens) + 1, sizeof(*t->v));
	if (t->v == NULL) {
		fail(err, err_len, "out of memory");
		rc = -1;
	}
	json_object_foreach(tokens, tok, v) {
		const char *p = json_string_value(v);
		struct gw_token *x;

		if (rc != 0)
			break;
		/* The token itself is never printed: it is a secret. */
		if (!token_ok(tok, strlen(tok))) {
			fail(err, err_len, "%s: token number %zu is not a "
			     "bearer token (letters, digits, - . _ ~ + /, "
			     "then = padding)", path, t->n + 1);
			rc = -1;
		} else if (p == NULL || p[strspn(p, " \t")] == '\0' ||
			   strlen(p) > CARMY_ID_MAX) {
			fail(err, err_len, "%s: token number %zu: its "
			     "principal must be a string of 1 to %d bytes, "
			     "not blanks alone", path, t->n + 1, CARMY_ID_MAX);
			rc = -1;
		} else {
			x = &t->v[t->n++];
			x->token = strdup(tok);
			x->len = strlen(tok);
			x->principal = strdup(p);
			if (x->token == NULL || x->principal == NULL) {
				fail(err, err_len, "out of memory");
				rc = -1;
			}
		}
	}
	json_decref(root);
	if (rc == 0 && t->n == 0) {
		fail(err, err_len, "%s: no tokens", path);
		rc = -1;
	}
	if (rc != 0)
		gw_tokens_free(t);
	return rc;
}

void gw_tokens_free(struct gw_tokens *t)
{
	for (size_t i = 0; i < t->n; i++) {
		if (t->v[i].token != NULL)
			explicit_bzero(t->v[i].token, t->v[i].len);
		free(t->v[i].token);
		free(t->v[i].principal);
	}
	free(t->v);
	memset(t, 0, sizeof(*t));
}

/* Equal or not, in time that depends on the stored token's length only:
 * the presented bytes are read cyclically over that length. */
static unsigned differs(const struct gw_token *k, const char *tok, size_t len)
{
	volatile unsigned char d = (unsigned char)(k->len != len);

	if (len == 0)
		return 1;
	for (size_t i = 0; i < k->len; i++)
		d |= (unsigned char)(k->token[i] ^ tok[i % len]);
	return d;
}

const char *gw_token_principal(const struct gw_tokens *t, const char *tok,
			       size_t len)
{
	const char *found = NULL;

	for (size_t i = 0; i < t->n; i++) {
		uintptr_t same = differs(&t->v[i], tok, len) == 0;
		uintptr_t mask = (uintptr_t)0 - same;

		found = (const char *)(((uintptr_t)found & ~mask) |
				       ((uintptr_t)t->v[i].principal & mask));
	}
	return found;
}
