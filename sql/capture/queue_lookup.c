/*
 * queue_lookup.c - a PgQ queue's current event table and event sequence, for the capture trigger.
 *
 * What "SELECT (queue_data_pfx || '_' || queue_cur_table)::regclass, queue_event_seq::regclass,
 * queue_disable_insert FROM pgq.queue WHERE queue_name = $1" returns, without SPI, a plan or an
 * executor: that query, run once per transaction, was half of the trigger's cost in a transaction
 * that changes one row (sql/capture/README.rst, "Cost").
 *
 * The row is read as the current statement's snapshot sees it. PgQ updates a queue's row only to
 * rotate its tables or change its settings, and an update puts a new version elsewhere, so the
 * row is first looked for where the last lookup found it (a fetch of that version, which an
 * update makes invisible), and through the queue_name_uq index only when it is not there. Names
 * the row holds are resolved again only when they changed, or when the relation found for them
 * then is no longer the one of that name and schema.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "executor/tuptable.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "storage/bufmgr.h"
#include "utils/syscache.h"

#include "queue_lookup.h"

/* Columns of pgq.queue the lookup reads, by name. */
enum
{
	Q_NAME, Q_DATA_PFX, Q_CUR_TABLE, Q_EVENT_SEQ, Q_DISABLE_INSERT, Q_NCOLS
};
static const char *const queue_columns[Q_NCOLS] = {
	"queue_name", "queue_data_pfx", "queue_cur_table", "queue_event_seq", "queue_disable_insert"
};

/* Their numbers in pgq.queue's descriptor, as last found (checked by name at every lookup). */
static AttrNumber queue_attnums[Q_NCOLS];

static bool
attnum_is(TupleDesc desc, AttrNumber attnum, const char *name)
{
	Form_pg_attribute att;

	if (attnum < 1 || attnum > desc->natts)
		return false;
	att = TupleDescAttr(desc, attnum - 1);
	return !att->attisdropped && strcmp(NameStr(att->attname), name) == 0;
}

/* Set queue_attnums for pgq.queue's descriptor (ERROR naming a missing column). */
static void
find_attnums(TupleDesc desc)
{
	int			c;
	AttrNumber	i;

	for (c = 0; c < Q_NCOLS; c++)
	{
		if (attnum_is(desc, queue_attnums[c], queue_columns[c]))
			continue;
		queue_attnums[c] = InvalidAttrNumber;
		for (i = 1; i <= desc->natts && queue_attnums[c] == InvalidAttrNumber; i++)
			if (attnum_is(desc, i, queue_columns[c]))
				queue_attnums[c] = i;
		if (queue_attnums[c] == InvalidAttrNumber)
			ereport(ERROR,
					(errmsg("pgshovel2: pgq.queue has no column \"%s\"", queue_columns[c]),
					 errhint("The capture trigger supports PgQ 3's queue table only.")));
	}
}

/* The queue's row version at row->tid when the snapshot sees it there, else NULL. */
static HeapTuple
fetch_known(Relation rel, Snapshot snapshot, const char *queue, QueueRow *row, TupleTableSlot *slot)
{
	HeapTuple	tuple;
	bool		isnull;
	Datum		name;

	if (row->queue_rel != RelationGetRelid(rel) || !ItemPointerIsValid(&row->tid) ||
		ItemPointerGetBlockNumber(&row->tid) >= RelationGetNumberOfBlocks(rel) ||	/* vacuum truncated it */
		!table_tuple_fetch_row_version(rel, &row->tid, snapshot, slot))
		return NULL;
	tuple = ExecFetchSlotHeapTuple(slot, false, NULL);
	name = heap_getattr(tuple, queue_attnums[Q_NAME], RelationGetDescr(rel), &isnull);
	if (isnull || strcmp(TextDatumGetCString(name), queue) != 0)
		return NULL;		/* the slot was vacuumed and taken by another queue's row */
	return tuple;
}

/* The queue's row through the queue_name_uq index (a copy), or NULL when there is none. */
static HeapTuple
fetch_by_name(Relation rel, Oid nsp, Snapshot snapshot, const char *queue)
{
	Oid			index = get_relname_relid("queue_name_uq", nsp);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;

	ScanKeyInit(&key, queue_attnums[Q_NAME], BTEqualStrategyNumber, F_TEXTEQ, CStringGetTextDatum(queue));
	scan = systable_beginscan(rel, index, OidIsValid(index), snapshot, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
		tuple = heap_copytuple(tuple);
	systable_endscan(scan);
	return tuple;
}

/* Whether oid is still the relation named relname in schema nsp. */
static bool
still_named(Oid oid, const NameData *relname, Oid nsp)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(oid));
	bool		same;

	if (!HeapTupleIsValid(tuple))
		return false;
	same = ((Form_pg_class) GETSTRUCT(tuple))->relnamespace == nsp &&
		strcmp(NameStr(((Form_pg_class) GETSTRUCT(tuple))->relname), NameStr(*relname)) == 0;
	ReleaseSysCache(tuple);
	return same;
}

/*
 * Set r to the relation name (a qualified name, as ::regclass reads it) names: what r holds
 * already, unless the name is new or r's relation no longer has the name and schema it had.
 */
static void
resolve(ResolvedName *r, const char *name)
{
	if (r->name && strcmp(r->name, name) == 0 && OidIsValid(r->oid) && still_named(r->oid, &r->relname, r->nsp))
		return;
	r->oid = RangeVarGetRelid(makeRangeVarFromNameList(stringToQualifiedNameList(name)), NoLock, false);
	namestrcpy(&r->relname, get_rel_name(r->oid));
	r->nsp = get_rel_namespace(r->oid);
	if (r->name)
		pfree(r->name);
	r->name = MemoryContextStrdup(TopMemoryContext, name);
}

void
pgshovel2_queue_lookup(const char *queue, QueueRow *row)
{
	Oid			nsp = get_namespace_oid("pgq", false);
	Oid			queue_rel = get_relname_relid("queue", nsp);
	Snapshot	snapshot = ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
	Relation	rel;
	TupleDesc	desc;
	TupleTableSlot *slot;
	HeapTuple	tuple;
	Datum		values[Q_NCOLS];
	bool		isnull;
	int			c;
	char	   *table;

	if (!OidIsValid(queue_rel))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("pgshovel2: PgQ's table pgq.queue does not exist")));
	rel = table_open(queue_rel, AccessShareLock);
	desc = RelationGetDescr(rel);
	find_attnums(desc);
	slot = table_slot_create(rel, NULL);
	tuple = fetch_known(rel, snapshot, queue, row, slot);
	if (tuple == NULL)
		tuple = fetch_by_name(rel, nsp, snapshot, queue);
	if (tuple == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("pgshovel2: PgQ queue \"%s\" does not exist", queue),
				 errhint("Drop the capture triggers or recreate the replication set.")));
	for (c = 0; c < Q_NCOLS; c++)
	{
		values[c] = heap_getattr(tuple, queue_attnums[c], desc, &isnull);
		if (isnull)
			ereport(ERROR,
					(errmsg("pgshovel2: PgQ queue \"%s\" has no %s", queue, queue_columns[c])));
	}
	if (DatumGetBool(values[Q_DISABLE_INSERT]))
		ereport(ERROR,
				(errmsg("pgshovel2: inserts into PgQ queue \"%s\" are disabled", queue)));
	row->queue_rel = queue_rel;
	row->tid = tuple->t_self;
	table = psprintf("%s_%d", TextDatumGetCString(values[Q_DATA_PFX]), DatumGetInt32(values[Q_CUR_TABLE]));
	resolve(&row->table, table);
	resolve(&row->seq, TextDatumGetCString(values[Q_EVENT_SEQ]));
	ExecDropSingleTupleTableSlot(slot);
	table_close(rel, AccessShareLock);
}
