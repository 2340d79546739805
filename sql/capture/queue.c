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
 * Who may add events: a role that may call pgq.insert_event (PgQ's writers,
 * pgq_writer; the PL/pgSQL capture's rule too) or may INSERT into the event
 * table. Checked once per transaction and queue.
 */
#include "postgres.h"

#include "access/table.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "nodes/makefuncs.h"
#include "parser/parse_func.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/acl.h"
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

/* Whether the current role may call pgq.insert_event(text, text, text). */
static bool
is_pgq_writer(void)
{
	Oid			argtypes[3] = {TEXTOID, TEXTOID, TEXTOID};
	Oid			fn = LookupFuncName(list_make2(makeString("pgq"), makeString("insert_event")),
									3, argtypes, true);

	return OidIsValid(fn) && pg_proc_aclcheck(fn, GetUserId(), ACL_EXECUTE) == ACLCHECK_OK;
}

static void
check_writer(QueueCache *qc)
{
	if (pg_class_aclcheck(qc->row.table.oid, GetUserId(), ACL_INSERT) == ACLCHECK_OK ||
		is_pgq_writer())
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("pgshovel2: role \"%s\" may not add events to PgQ queue \"%s\"",
					GetUserNameFromId(GetUserId(), false), qc->queue),
			 errdetail("A change to a table of a trigger set is captured into that queue in the same transaction."),
			 errhint("GRANT pgq_writer TO the role, as for pgq.insert_event.")));
}

static void
refresh_cache(QueueCache *qc)
{
	pgshovel2_queue_lookup(qc->queue, &qc->row);
	check_writer(qc);
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
