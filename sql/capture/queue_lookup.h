/*
 * queue_lookup.h - find a PgQ queue's current event table and event sequence.
 */
#ifndef PGSHOVEL2_QUEUE_LOOKUP_H
#define PGSHOVEL2_QUEUE_LOOKUP_H

#include "postgres.h"

#include "storage/itemptr.h"

/* A relation a name of the queue's row resolved to, and that relation's own name and schema then. */
typedef struct ResolvedName
{
	char	   *name;			/* the qualified name, as the row holds it (TopMemoryContext) */
	Oid			oid;
	NameData	relname;
	Oid			nsp;
} ResolvedName;

/*
 * What a lookup found, kept to make the next lookup of the same queue cheap: where its row of
 * pgq.queue was, and what the row's names resolved to.
 */
typedef struct QueueRow
{
	ResolvedName table;			/* queue_data_pfx || '_' || queue_cur_table, e.g. pgq.event_2_1 */
	ResolvedName seq;			/* queue_event_seq, the queue's event id sequence */
	Oid			queue_rel;		/* pgq.queue when the row was read */
	ItemPointerData tid;
} QueueRow;

/*
 * Look queue up as the current statement's snapshot sees pgq.queue and set row->table.oid and
 * row->seq.oid. ERROR when PgQ, the queue or a relation it names does not exist, or the queue's
 * inserts are disabled.
 */
extern void pgshovel2_queue_lookup(const char *queue, QueueRow *row);

#endif
