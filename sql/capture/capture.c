/*
 * capture.c - the pgshovel2 capture trigger and the snapshot row encoder.
 *
 * pgshovel2.capture(queue, table_tag, captured_attnums, key_attnums, mode)
 * appends one PgQ event per row change:
 *   ev_type   'I' | 'U' | 'D' | 'T' (TRUNCATE, statement level)
 *   ev_data   JSON array of the captured columns (after-image; before-image
 *             for 'D'; NULL for 'T')
 *   ev_extra1 table tag (the quoted, qualified table name)
 *   ev_extra2 on 'U' when a key column changed, or always when mode has
 *             'before': the before-image
 * mode: 'all' or 'subset', optionally followed by ',before'. With 'subset',
 * an UPDATE that changes no captured column is skipped; with 'before', every
 * UPDATE carries its before-image (the Debezium envelope needs it).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/typcache.h"

#include "encode.h"
#include "queue.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(pgshovel2_capture);
PG_FUNCTION_INFO_V1(pgshovel2_encode_row);

/* Parsed trigger arguments, cached for the life of the trigger's FmgrInfo. */
typedef struct CaptureArgs
{
	Oid			tgoid;
	const char *queue;
	const char *table_tag;
	int			ncols;
	int16	   *attnums;
	ColumnCodec *codecs;
	int			nkeys;
	int16	   *keys;
	bool		subset;
	bool		before_always;
} CaptureArgs;

static int
parse_attnums(const char *list, int16 **out, TupleDesc desc, MemoryContext mcxt)
{
	int			n = 0;
	int			cap = 8;
	const char *p = list;

	*out = MemoryContextAlloc(mcxt, cap * sizeof(int16));
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

static CaptureArgs *
capture_args(FunctionCallInfo fcinfo, TriggerData *tg)
{
	CaptureArgs *args = fcinfo->flinfo->fn_extra;
	Trigger    *trigger = tg->tg_trigger;
	TupleDesc	desc = RelationGetDescr(tg->tg_relation);
	MemoryContext mcxt = fcinfo->flinfo->fn_mcxt;
	int			i;

	if (args && args->tgoid == trigger->tgoid)
		return args;
	if (trigger->tgnargs != 5)
		elog(ERROR, "pgshovel2.capture() takes 5 trigger arguments, got %d",
			 trigger->tgnargs);
	args = MemoryContextAllocZero(mcxt, sizeof(CaptureArgs));
	args->tgoid = trigger->tgoid;
	args->queue = MemoryContextStrdup(mcxt, trigger->tgargs[0]);
	args->table_tag = MemoryContextStrdup(mcxt, trigger->tgargs[1]);
	args->ncols = parse_attnums(trigger->tgargs[2], &args->attnums, desc, mcxt);
	args->nkeys = parse_attnums(trigger->tgargs[3], &args->keys, desc, mcxt);
	args->subset = strncmp(trigger->tgargs[4], "subset", 6) == 0;
	args->before_always = strstr(trigger->tgargs[4], ",before") != NULL;
	args->codecs = MemoryContextAlloc(mcxt, args->ncols * sizeof(ColumnCodec));
	for (i = 0; i < args->ncols; i++)
		pgshovel2_codec_init(&args->codecs[i],
							 TupleDescAttr(desc, args->attnums[i] - 1)->atttypid,
							 mcxt);
	fcinfo->flinfo->fn_extra = args;
	return args;
}

/* True when any of the given columns differs (binary) between the tuples. */
static bool
columns_differ(HeapTuple a, HeapTuple b, TupleDesc desc, const int16 *attnums, int n)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, attnums[i] - 1);
		bool		null_a;
		bool		null_b;
		Datum		va = heap_getattr(a, attnums[i], desc, &null_a);
		Datum		vb = heap_getattr(b, attnums[i], desc, &null_b);

		if (null_a != null_b)
			return true;
		if (!null_a && !datumIsEqual(va, vb, att->attbyval, att->attlen))
			return true;
	}
	return false;
}

static char *
encode(CaptureArgs *args, HeapTuple tuple, TupleDesc desc)
{
	StringInfoData buf;

	initStringInfo(&buf);
	pgshovel2_encode_tuple(&buf, tuple, desc, args->attnums, args->ncols, args->codecs);
	return buf.data;
}

Datum
pgshovel2_capture(PG_FUNCTION_ARGS)
{
	TriggerData *tg;
	CaptureArgs *args;
	TupleDesc	desc;
	const char *op;
	char	   *data = NULL;
	char	   *before = NULL;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "pgshovel2.capture() must be called as a trigger");
	tg = (TriggerData *) fcinfo->context;
	if (!TRIGGER_FIRED_AFTER(tg->tg_event))
		elog(ERROR, "pgshovel2.capture() must be an AFTER trigger");
	args = capture_args(fcinfo, tg);
	desc = RelationGetDescr(tg->tg_relation);

	if (TRIGGER_FIRED_BY_TRUNCATE(tg->tg_event))
		op = "T";
	else if (!TRIGGER_FIRED_FOR_ROW(tg->tg_event))
		elog(ERROR, "pgshovel2.capture() must fire FOR EACH ROW for INSERT/UPDATE/DELETE");
	else if (TRIGGER_FIRED_BY_INSERT(tg->tg_event))
	{
		op = "I";
		data = encode(args, tg->tg_trigtuple, desc);
	}
	else if (TRIGGER_FIRED_BY_DELETE(tg->tg_event))
	{
		op = "D";
		data = encode(args, tg->tg_trigtuple, desc);
	}
	else
	{
		HeapTuple	old = tg->tg_trigtuple;
		HeapTuple	new = tg->tg_newtuple;

		if (args->subset &&
			!columns_differ(old, new, desc, args->attnums, args->ncols))
			return PointerGetDatum(NULL);
		op = "U";
		data = encode(args, new, desc);
		if (args->before_always ||
			columns_differ(old, new, desc, args->keys, args->nkeys))
			before = encode(args, old, desc);
	}

	pgshovel2_queue_insert(args->queue, op, data, args->table_tag, before);
	return PointerGetDatum(NULL);
}

Datum
pgshovel2_encode_row(PG_FUNCTION_ARGS)
{
	return pgshovel2_encode_row_text(fcinfo);
}
