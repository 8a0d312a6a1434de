/*
 * owners.c - which owner ids are alive: one per client connection that said
 * HELLO. The dead-owner sweeps ask this registry about every held ticket.
 *
 * It is a liburcu lock-free hash table (cds_lfht) with the memb flavour:
 * lookups run under rcu_read_lock() and removed nodes are freed after a
 * grace period with call_rcu(), so a reader (the sweep, stats) never sees a
 * freed node. Process-local by design: nothing here is in the segment.
 */
#include <errno.h>
#include <stdlib.h>

#include <urcu.h>
#include <urcu/rculfhash.h>

#include "daemon/carmyd.h"

struct owner_node {
	struct cds_lfht_node node;
	uint32_t id;
	void *conn;
	struct rcu_head rcu;
};

static struct cds_lfht *table;

static unsigned long hash_id(uint32_t id)
{
	uint64_t x = id * UINT64_C(0x9e3779b97f4a7c15);

	return (unsigned long)(x ^ (x >> 29));
}

static int match_id(struct cds_lfht_node *node, const void *key)
{
	return caa_container_of(node, struct owner_node, node)->id ==
	       *(const uint32_t *)key;
}

static void free_node(struct rcu_head *head)
{
	free(caa_container_of(head, struct owner_node, rcu));
}

int owners_init(void)
{
	table = cds_lfht_new(64, 64, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
			     NULL);
	return table == NULL ? -ENOMEM : 0;
}

void owners_fini(void)
{
	struct cds_lfht_iter it;
	struct owner_node *o;

	if (table == NULL)
		return;
	rcu_read_lock();
	cds_lfht_for_each_entry(table, &it, o, node) {
		if (cds_lfht_del(table, &o->node) == 0)
			call_rcu(&o->rcu, free_node);
	}
	rcu_read_unlock();
	rcu_barrier();
	cds_lfht_destroy(table, NULL);
	table = NULL;
}

int owners_add(uint32_t id, void *conn)
{
	struct owner_node *o = calloc(1, sizeof(*o));
	struct cds_lfht_node *n;

	if (o == NULL)
		return -ENOMEM;
	o->id = id;
	o->conn = conn;
	cds_lfht_node_init(&o->node);
	rcu_read_lock();
	n = cds_lfht_add_unique(table, hash_id(id), match_id, &id, &o->node);
	rcu_read_unlock();
	if (n != &o->node) {
		free(o);
		return -EEXIST;
	}
	return 0;
}

void owners_del(uint32_t id)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *n;

	rcu_read_lock();
	cds_lfht_lookup(table, hash_id(id), match_id, &id, &it);
	n = cds_lfht_iter_get_node(&it);
	if (n != NULL && cds_lfht_del(table, n) == 0)
		call_rcu(&caa_container_of(n, struct owner_node, node)->rcu,
			 free_node);
	rcu_read_unlock();
}

bool owners_alive(uint32_t id)
{
	struct cds_lfht_iter it;
	bool found;

	rcu_read_lock();
	cds_lfht_lookup(table, hash_id(id), match_id, &id, &it);
	found = cds_lfht_iter_get_node(&it) != NULL;
	rcu_read_unlock();
	return found;
}

unsigned long owners_count(void)
{
	unsigned long n;
	long before, after;

	rcu_read_lock();
	cds_lfht_count_nodes(table, &before, &n, &after);
	rcu_read_unlock();
	return n;
}
