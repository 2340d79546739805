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

#include "capture_args.h"
#include "encode.h"
#include "queue.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(pgshovel2_capture);
PG_FUNCTION_INFO_V1(pgshovel2_encode_row);

/* True when any of the given columns differs (binary) between the rows. */
static bool
columns_differ(const PgShovel2Row *a, const PgShovel2Row *b, TupleDesc desc, const int16 *attnums, int n)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		int			at = attnums[i] - 1;
		Form_pg_attribute att = TupleDescAttr(desc, at);

		if (a->nulls[at] != b->nulls[at])
			return true;
		if (!a->nulls[at] && !datumIsEqual(a->values[at], b->values[at], att->attbyval, att->attlen))
			return true;
	}
	return false;
}

static char *
encode(CaptureArgs *args, const PgShovel2Row *row)
{
	StringInfoData buf;

	initStringInfo(&buf);
	pgshovel2_encode_deformed(&buf, row, args->attnums, args->ncols, args->codecs);
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
	args = pgshovel2_capture_args(tg);
	desc = RelationGetDescr(tg->tg_relation);

	if (TRIGGER_FIRED_BY_TRUNCATE(tg->tg_event))
		op = "T";
	else if (!TRIGGER_FIRED_FOR_ROW(tg->tg_event))
		elog(ERROR, "pgshovel2.capture() must fire FOR EACH ROW for INSERT/UPDATE/DELETE");
	else if (TRIGGER_FIRED_BY_INSERT(tg->tg_event))
	{
		op = "I";
		data = encode(args, pgshovel2_deform(tg->tg_trigtuple, desc));
	}
	else if (TRIGGER_FIRED_BY_DELETE(tg->tg_event))
	{
		op = "D";
		data = encode(args, pgshovel2_deform(tg->tg_trigtuple, desc));
	}
	else
	{
		PgShovel2Row *old = pgshovel2_deform(tg->tg_trigtuple, desc);
		PgShovel2Row *new = pgshovel2_deform(tg->tg_newtuple, desc);

		if (args->subset &&
			!columns_differ(old, new, desc, args->attnums, args->ncols))
			return PointerGetDatum(NULL);
		op = "U";
		data = encode(args, new);
		if (args->before_always ||
			columns_differ(old, new, desc, args->keys, args->nkeys))
			before = encode(args, old);
	}

	pgshovel2_queue_insert(args->queue, op, data, args->table_tag, before);
	return PointerGetDatum(NULL);
}

Datum
pgshovel2_encode_row(PG_FUNCTION_ARGS)
{
	return pgshovel2_encode_row_text(fcinfo);
}
