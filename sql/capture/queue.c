/*
 * queue.c - insert an event into a PgQ queue without going through
 * pgq.insert_event() or an INSERT statement.
 *
 * The queue's current event table and event sequence are looked up once per
 * transaction and queue, by reading its row of pgq.queue (queue_lookup.c, no
 * SPI); each event is then one heap insert plus its index entries,
 * with no executor run or plan check (what each saved: sql/capture/README.rst,
 * "Cost").
 *
 * Reading queue_cur_table once per transaction is what pgq.insert_event()
 * itself gives a REPEATABLE READ transaction; PgQ's rotation only truncates
 * an event table after every transaction that could still insert into it has
 * ended, so the table stays valid for the rest of the transaction.
 *
 * The row is what PgQ's INSERT would write: ev_id from the queue's sequence,
 * ev_time now(), ev_txid txid_current(), ev_owner and ev_retry NULL, and the
 * caller's ev_type, ev_data, ev_extra1, ev_extra2 (ev_extra3/4 NULL).
 *
 * Who may add events: any role whose change fires the capture trigger. The
 * trigger was created for the set by a role allowed to (the table's owner, or
 * TRIGGER on it), which is the decision that every change of the table is
 * captured; a writer needs no right on the queue, and should not have one
 * (pgq_writer would let it call pgq.insert_event and append an event no change
 * made).
 */
#include "postgres.h"

#include "access/table.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "nodes/makefuncs.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "queue.h"
#include "queue_lookup.h"

/* Columns of pgq.event_template, in order. */
enum
{
	EV_ID, EV_TIME, EV_TXID, EV_OWNER, EV_RETRY, EV_TYPE, EV_DATA,
	EV_EXTRA1, EV_EXTRA2, EV_EXTRA3, EV_EXTRA4, EV_NATTS
};

typedef struct QueueCache
{
	struct QueueCache *next;
	char	   *queue;
	LocalTransactionId lxid;	/* transaction the lookup below belongs to */
	QueueRow	row;			/* row.table.oid, row.seq.oid: the queue's event table and sequence */
} QueueCache;

static QueueCache *queue_caches = NULL;

static QueueCache *
find_cache(const char *queue)
{
	QueueCache *qc;

	for (qc = queue_caches; qc; qc = qc->next)
		if (strcmp(qc->queue, queue) == 0)
			return qc;
	qc = MemoryContextAllocZero(TopMemoryContext, sizeof(QueueCache));
	qc->queue = MemoryContextStrdup(TopMemoryContext, queue);
	qc->lxid = InvalidLocalTransactionId;
	ItemPointerSetInvalid(&qc->row.tid);
	qc->next = queue_caches;
	queue_caches = qc;
	return qc;
}

static void
refresh_cache(QueueCache *qc)
{
	pgshovel2_queue_lookup(qc->queue, &qc->row);
	qc->lxid = MyProc->lxid;
}

/* The event table has pgq.event_template's columns (else ERROR naming it): the row is formed from them. */
static void
check_layout(Relation rel)
{
	static const Oid types[EV_NATTS] = {INT8OID, TIMESTAMPTZOID, INT8OID, INT4OID, INT4OID, TEXTOID,
										TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
	TupleDesc	desc = RelationGetDescr(rel);
	int			i;

	for (i = 0; i < EV_NATTS && desc->natts == EV_NATTS; i++)
		if (TupleDescAttr(desc, i)->attisdropped || TupleDescAttr(desc, i)->atttypid != types[i])
			break;
	if (i < EV_NATTS || desc->natts != EV_NATTS)
		ereport(ERROR,
				(errmsg("pgshovel2: PgQ event table \"%s\" does not have the columns of pgq.event_template",
						RelationGetRelationName(rel)),
				 errhint("The capture trigger supports PgQ 3's event tables only.")));
}

/* Insert the row into rel and its indexes, as an INSERT statement would. */
static void
insert_row(Relation rel, Datum *values, bool *nulls)
{
	EState	   *estate = CreateExecutorState();
	ResultRelInfo *rri = makeNode(ResultRelInfo);
	TupleTableSlot *slot;

	InitResultRelInfo(rri, rel, 0, NULL, 0);
	ExecOpenIndices(rri, false);
	slot = MakeSingleTupleTableSlot(RelationGetDescr(rel), &TTSOpsHeapTuple);
	ExecStoreHeapTuple(heap_form_tuple(RelationGetDescr(rel), values, nulls), slot, true);
	ExecSimpleRelationInsert(rri, estate, slot);
	ExecDropSingleTupleTableSlot(slot);
	ExecCloseIndices(rri);
	FreeExecutorState(estate);
}

void
pgshovel2_queue_insert(const char *queue, const char *ev_type,
					   const char *ev_data, const char *ev_extra1,
					   const char *ev_extra2)
{
	QueueCache *qc = find_cache(queue);
	const char *fields[4] = {ev_type, ev_data, ev_extra1, ev_extra2};
	Datum		values[EV_NATTS];
	bool		nulls[EV_NATTS];
	Relation	rel;
	int			i;

	if (qc->lxid != MyProc->lxid)
		refresh_cache(qc);
	rel = table_open(qc->row.table.oid, RowExclusiveLock);
	check_layout(rel);			/* every time: a column added since would be read past values[] */
	memset(nulls, true, sizeof(nulls));
	values[EV_ID] = Int64GetDatum(nextval_internal(qc->row.seq.oid, false));
	values[EV_TIME] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	values[EV_TXID] = Int64GetDatum((int64) U64FromFullTransactionId(GetTopFullTransactionId()));
	nulls[EV_ID] = nulls[EV_TIME] = nulls[EV_TXID] = false;
	for (i = 0; i < 4; i++)
	{
		nulls[EV_TYPE + i] = fields[i] == NULL;
		values[EV_TYPE + i] = fields[i] ? CStringGetTextDatum(fields[i]) : (Datum) 0;
	}
	insert_row(rel, values, nulls);
	table_close(rel, NoLock);
}
