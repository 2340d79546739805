/*
 * capture_args.c - the capture trigger's arguments, parsed once per trigger and backend.
 *
 * A trigger's FmgrInfo lives as long as the statement's executor state, so arguments cached in
 * its fn_extra were parsed again by every statement, with an output function lookup per captured
 * column: a sixth of the trigger's instructions in a pgbench transaction (sql/capture/README.rst,
 * "Cost"). They are kept per trigger OID instead, in a memory context of their own under
 * CacheMemoryContext, until a relcache invalidation of the trigger's table: every DDL that could
 * change them (a column's type, a dropped column, CREATE OR REPLACE TRIGGER) sends one.
 *
 * A row trigger on a partitioned table is cloned onto its partitions with the same arguments:
 * column lists of the table the set captures (its root), whose attnums a partition need not
 * share (the root had a dropped column when the partition was created, or a table of another
 * column order was attached). A clone's lists are mapped to the partition's attnums by column
 * name, so its rows are encoded as rows of the root; they are kept until a relcache
 * invalidation of the partition or of the root.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_trigger.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "capture_args.h"

typedef struct CachedArgs
{
	Oid			tgoid;			/* hash key */
	Oid			relid;			/* the trigger's table */
	Oid			root;			/* the table of the trigger a clone was cloned from (else relid) */
	bool		valid;			/* false once the table's relcache entry was invalidated */
	MemoryContext mcxt;			/* holds args; NULL before the first parse succeeded */
	CaptureArgs *args;
} CachedArgs;

static HTAB *cached_args = NULL;

/* Relcache invalidation of relid (InvalidOid: of every relation): its triggers' arguments go stale. */
static void
invalidate(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	CachedArgs *entry;

	hash_seq_init(&status, cached_args);
	while ((entry = hash_seq_search(&status)) != NULL)
		if (!OidIsValid(relid) || entry->relid == relid || entry->root == relid)
			entry->valid = false;
}

/*
 * The attnum in desc (relid's descriptor) of the root's live column attnum; the attnum itself when
 * relid is the root. 0 when there is none.
 */
static int
mapped_attnum(long attnum, Oid root, Oid relid, TupleDesc desc)
{
	HeapTuple	tuple;
	Form_pg_attribute att;
	AttrNumber	mapped;

	if (root == relid)
		return (attnum >= 1 && attnum <= desc->natts && !TupleDescAttr(desc, attnum - 1)->attisdropped)
			? (int) attnum : 0;
	if (attnum < 1 || attnum > MaxHeapAttributeNumber)
		return 0;
	tuple = SearchSysCache2(ATTNUM, ObjectIdGetDatum(root), Int16GetDatum((int16) attnum));
	if (!HeapTupleIsValid(tuple))
		return 0;
	att = (Form_pg_attribute) GETSTRUCT(tuple);
	mapped = att->attisdropped ? InvalidAttrNumber : get_attnum(relid, NameStr(att->attname));
	ReleaseSysCache(tuple);
	if (mapped < 1 || mapped > desc->natts || TupleDescAttr(desc, mapped - 1)->attisdropped)
		return 0;
	return mapped;
}

/* The attnums of list (the root's), mapped to relid's columns by name (mapped_attnum). */
static int
parse_attnums(const char *list, int16 **out, Oid root, Oid relid, TupleDesc desc)
{
	int			n = 0;
	int			cap = 8;
	const char *p = list;

	*out = palloc(cap * sizeof(int16));
	while (*p)
	{
		char	   *end;
		long		attnum = strtol(p, &end, 10);
		int			mapped = end == p ? 0 : mapped_attnum(attnum, root, relid, desc);

		if (mapped == 0)
			ereport(ERROR,
					(errmsg("pgshovel2: bad column list \"%s\" in capture trigger", list),
					 errhint("Recreate the trigger with \"pgshovel set upgrade\".")));
		if (n == cap)
		{
			cap *= 2;
			*out = repalloc(*out, cap * sizeof(int16));
		}
		(*out)[n++] = (int16) mapped;
		p = (*end == ',') ? end + 1 : end;
	}
	return n;
}

/*
 * The table of the trigger a cloned trigger was cloned from, through every level (pg_trigger's
 * tgparentid); relid, the trigger's own table, when it is no clone.
 */
static Oid
root_relid(Trigger *trigger, Oid relid)
{
	Relation	triggers;
	Oid			tgoid = trigger->tgoid;

	if (!trigger->tgisclone)
		return relid;
	triggers = table_open(TriggerRelationId, AccessShareLock);
	for (;;)
	{
		ScanKeyData key;
		SysScanDesc scan;
		HeapTuple	tuple;
		Form_pg_trigger form;
		Oid			parent;

		ScanKeyInit(&key, Anum_pg_trigger_oid, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(tgoid));
		scan = systable_beginscan(triggers, TriggerOidIndexId, true, NULL, 1, &key);
		tuple = systable_getnext(scan);
		if (!HeapTupleIsValid(tuple))
			elog(ERROR, "pgshovel2: trigger %u (a parent of capture trigger \"%s\") not found", tgoid,
				 trigger->tgname);
		form = (Form_pg_trigger) GETSTRUCT(tuple);
		relid = form->tgrelid;
		parent = form->tgparentid;
		systable_endscan(scan);
		if (!OidIsValid(parent))
			break;
		tgoid = parent;
	}
	table_close(triggers, AccessShareLock);
	return relid;
}

/* The trigger's arguments parsed in the current memory context (root: root_relid). */
static CaptureArgs *
parse(Trigger *trigger, Oid root, Oid relid, TupleDesc desc)
{
	CaptureArgs *args = palloc0(sizeof(CaptureArgs));
	int			i;

	if (trigger->tgnargs != 5)
		elog(ERROR, "pgshovel2.capture() takes 5 trigger arguments, got %d", trigger->tgnargs);
	args->queue = pstrdup(trigger->tgargs[0]);
	args->table_tag = pstrdup(trigger->tgargs[1]);
	args->ncols = parse_attnums(trigger->tgargs[2], &args->attnums, root, relid, desc);
	args->nkeys = parse_attnums(trigger->tgargs[3], &args->keys, root, relid, desc);
	args->subset = strncmp(trigger->tgargs[4], "subset", 6) == 0;
	args->before_always = strstr(trigger->tgargs[4], ",before") != NULL;
	args->codecs = palloc(args->ncols * sizeof(ColumnCodec));
	for (i = 0; i < args->ncols; i++)
		pgshovel2_codec_init(&args->codecs[i], TupleDescAttr(desc, args->attnums[i] - 1)->atttypid,
							 CurrentMemoryContext);
	return args;
}

CaptureArgs *
pgshovel2_capture_args(TriggerData *tg)
{
	Trigger    *trigger = tg->tg_trigger;
	CachedArgs *entry;
	MemoryContext mcxt;
	MemoryContext old;
	Oid			relid = RelationGetRelid(tg->tg_relation);
	Oid			root;
	bool		found;

	if (cached_args == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(CachedArgs);
		cached_args = hash_create("pgshovel2 capture trigger arguments", 16, &ctl, HASH_ELEM | HASH_BLOBS);
		CacheRegisterRelcacheCallback(invalidate, (Datum) 0);
	}
	entry = hash_search(cached_args, &trigger->tgoid, HASH_ENTER, &found);
	if (!found)
	{
		entry->valid = false;
		entry->relid = entry->root = InvalidOid;
		entry->mcxt = NULL;
	}
	if (entry->valid)
		return entry->args;
	/* parsed under the caller's context, so an ERROR leaves nothing behind; kept once it is whole */
	mcxt = AllocSetContextCreate(CurrentMemoryContext, "pgshovel2 capture trigger", ALLOCSET_SMALL_SIZES);
	root = root_relid(trigger, relid);
	old = MemoryContextSwitchTo(mcxt);
	entry->args = parse(trigger, root, relid, RelationGetDescr(tg->tg_relation));
	MemoryContextSwitchTo(old);
	MemoryContextSetParent(mcxt, CacheMemoryContext);
	if (entry->mcxt != NULL)
		MemoryContextDelete(entry->mcxt);	/* the stale arguments: no capture call is using them */
	entry->mcxt = mcxt;
	entry->relid = relid;
	entry->root = root;
	entry->valid = true;
	return entry->args;
}
