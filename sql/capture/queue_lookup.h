/*
 * queue_lookup.h - find a PgQ queue's current event table and event sequence.
 */
#ifndef PGSHOVEL2_QUEUE_LOOKUP_H
#define PGSHOVEL2_QUEUE_LOOKUP_H

#include "postgres.h"

#include "storage/itemptr.h"

/*
 * What a lookup found, kept (in TopMemoryContext) to make the next lookup of the same queue cheap:
 * its row of pgq.queue, where that row was, and what its names resolved to.
 */
typedef struct QueueRow
{
	Oid			table;			/* the current event table, e.g. pgq.event_2_1 */
	Oid			seq;			/* the queue's event id sequence */
	/* where the row was read, and what it said */
	Oid			queue_rel;		/* pgq.queue then */
	ItemPointerData tid;
	char	   *table_name;		/* queue_data_pfx || '_' || queue_cur_table */
	char	   *seq_name;		/* queue_event_seq */
	/* what the names resolved to: the relations' own names and schemas then */
	NameData	table_relname;
	Oid			table_nsp;
	NameData	seq_relname;
	Oid			seq_nsp;
} QueueRow;

/*
 * Look queue up as the current statement's snapshot sees pgq.queue and set row->table and
 * row->seq. ERROR when PgQ, the queue or a relation it names does not exist, or the queue's
 * inserts are disabled.
 */
extern void pgshovel2_queue_lookup(const char *queue, QueueRow *row);

#endif
