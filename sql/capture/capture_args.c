/*
 * capture_args.c - the capture trigger's arguments, parsed once per trigger and backend.
 *
 * A trigger's FmgrInfo lives as long as the statement's executor state, so arguments cached in
 * its fn_extra were parsed again by every statement, with an output function lookup per captured
 * column: a sixth of the trigger's instructions in a pgbench transaction (sql/capture/README.rst,
 * "Cost"). They are kept per trigger OID instead, in a memory context of their own under
 * CacheMemoryContext, until a relcache invalidation of the trigger's table: every DDL that could
 * change them (a column's type, a dropped column, CREATE OR REPLACE TRIGGER) sends one.
 */
#include "postgres.h"

#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "capture_args.h"

typedef struct CachedArgs
{
	Oid			tgoid;			/* hash key */
	Oid			relid;			/* the trigger's table */
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
		if (!OidIsValid(relid) || entry->relid == relid)
			entry->valid = false;
}

static int
parse_attnums(const char *list, int16 **out, TupleDesc desc)
{
	int			n = 0;
	int			cap = 8;
	const char *p = list;

	*out = palloc(cap * sizeof(int16));
	while (*p)
	{
		char	   *end;
		long		attnum = strtol(p, &end, 10);

		if (end == p || attnum < 1 || attnum > desc->natts ||
			TupleDescAttr(desc, attnum - 1)->attisdropped)
			ereport(ERROR,
					(errmsg("pgshovel2: bad column list \"%s\" in capture trigger", list),
					 errhint("Recreate the trigger with \"pgshovel set upgrade\".")));
		if (n == cap)
		{
			cap *= 2;
			*out = repalloc(*out, cap * sizeof(int16));
		}
		(*out)[n++] = (int16) attnum;
		p = (*end == ',') ? end + 1 : end;
	}
	return n;
}

/* The trigger's arguments parsed in the current memory context. */
static CaptureArgs *
parse(Trigger *trigger, TupleDesc desc)
{
	CaptureArgs *args = palloc0(sizeof(CaptureArgs));
	int			i;

	if (trigger->tgnargs != 5)
		elog(ERROR, "pgshovel2.capture() takes 5 trigger arguments, got %d", trigger->tgnargs);
	args->queue = pstrdup(trigger->tgargs[0]);
	args->table_tag = pstrdup(trigger->tgargs[1]);
	args->ncols = parse_attnums(trigger->tgargs[2], &args->attnums, desc);
	args->nkeys = parse_attnums(trigger->tgargs[3], &args->keys, desc);
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
		entry->mcxt = NULL;
	}
	if (entry->valid)
		return entry->args;
	/* parsed under the caller's context, so an ERROR leaves nothing behind; kept once it is whole */
	mcxt = AllocSetContextCreate(CurrentMemoryContext, "pgshovel2 capture trigger", ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(mcxt);
	entry->args = parse(trigger, RelationGetDescr(tg->tg_relation));
	MemoryContextSwitchTo(old);
	MemoryContextSetParent(mcxt, CacheMemoryContext);
	if (entry->mcxt != NULL)
		MemoryContextDelete(entry->mcxt);	/* the stale arguments: no capture call is using them */
	entry->mcxt = mcxt;
	entry->relid = RelationGetRelid(tg->tg_relation);
	entry->valid = true;
	return entry->args;
}
