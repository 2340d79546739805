/*
 * decoder.c - pgshovel2_decoder: logical decoding output plugin of the
 * `logical` backend. Record format: sql/decoder/README.rst.
 *
 * Only changes of the set's tables (plugin option "tables") are written; a
 * transaction without any is not written at all (BEGIN is written lazily at
 * its first change). Row images are JSON arrays of the captured columns in
 * the capture trigger's value forms (sql/capture/encode.c), so the relay
 * decodes both backends with the same code. Memory: everything allocated
 * for a change lives in a context reset after that change.
 */
#include "postgres.h"

#include "catalog/pg_class.h"

#include "access/detoast.h"
#include "access/htup_details.h"
#include "access/transam.h"
#include "libpq/pqformat.h"
#include "replication/logical.h"
#include "replication/output_plugin.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "decoder.h"

PG_MODULE_MAGIC;

#define HEARTBEAT_PREFIX "pgshovel2.heartbeat"
#define VERSION_PREFIX "pgshovel2.version"
#define ROWS_PREFIX "pgshovel2.rows"
#define RECORD_FORMAT "5"		/* sql/decoder/README.rst; 5: 4 + partitions, TRUNCATE of a partition */
#define PACKED_FORMAT "4"		/* a transaction's records in packs (P) */
#define UNPACKED_FORMAT "3"		/* format 4 without packs: every record its own message */
#define PACK_BYTES (128 * 1024)	/* a pack is written once it holds this much, and at COMMIT */
#define FLAG_OLD 1				/* an old image follows the new one */
#define FLAG_NO_ROW 2			/* DELETE without any old image (replica identity NOTHING) */
#define FLAG_UNCHANGED 4		/* the new row's unchanged, unlogged values are listed after it */

extern void _PG_output_plugin_init(OutputPluginCallbacks *cb);

/*
 * The "format" option names the record format the reader expects; only the
 * ones this plugin writes are accepted (4, and 3: the same records without
 * packs, for a relay one version older), so a relay and a plugin of different
 * versions stop with a clear error instead of misreading records. Returns
 * whether the reader takes packs.
 */
static bool
check_format(const char *format)
{
	if (strcmp(format, RECORD_FORMAT) == 0 || strcmp(format, PACKED_FORMAT) == 0)
		return true;
	if (strcmp(format, UNPACKED_FORMAT) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pgshovel2_decoder: the reader expects record format \"%s\", this plugin writes "
						"format %s (or %s, %s)", format, RECORD_FORMAT, PACKED_FORMAT, UNPACKED_FORMAT),
				 errhint("Install the same pgshovel2 version as sql/decoder on the database server.")));
	return false;
}

/*
 * Start a record: in a pack (format 4, inside a transaction) its length is
 * reserved in the pack, else it is a message of its own. Returns the buffer
 * to write the record into; end_record finishes it.
 */
StringInfo
pgshovel2_start_record(LogicalDecodingContext *ctx)
{
	DecoderState *state = ctx->output_plugin_private;

	if (state->pack != NULL)
	{
		pq_sendint32(state->pack, 0);
		state->record_at = state->pack->len;
		return state->pack;
	}
	OutputPluginPrepareWrite(ctx, true);
	return ctx->out;
}

/* Write the pack's records as one message 'P' (nothing when it holds none). */
static void
write_pack(LogicalDecodingContext *ctx)
{
	DecoderState *state = ctx->output_plugin_private;

	if (state->pack->len == 0)
		return;
	OutputPluginPrepareWrite(ctx, true);
	pq_sendbyte(ctx->out, 'P');
	appendBinaryStringInfo(ctx->out, state->pack->data, state->pack->len);
	OutputPluginWrite(ctx, true);
	resetStringInfo(state->pack);
	if (state->pack->maxlen > 2 * PACK_BYTES)
	{
		/* a huge row grew it: give the memory back */
		MemoryContext old = MemoryContextSwitchTo(state->context);

		pfree(state->pack->data);
		initStringInfo(state->pack);
		MemoryContextSwitchTo(old);
	}
}

/*
 * Finish a record start_record began: its length goes in front of it in the
 * pack, which is written once it holds PACK_BYTES (so a big transaction
 * streams on with bounded memory); a record of its own is written now.
 */
void
pgshovel2_end_record(LogicalDecodingContext *ctx)
{
	DecoderState *state = ctx->output_plugin_private;
	StringInfo	pack = state->pack;
	uint32		len;

	if (pack == NULL)
	{
		OutputPluginWrite(ctx, true);
		return;
	}
	len = pg_hton32((uint32) (pack->len - state->record_at));
	memcpy(pack->data + state->record_at - sizeof(uint32), &len, sizeof(uint32));
	if (pack->len >= PACK_BYTES)
		write_pack(ctx);
}

static void
decoder_startup(LogicalDecodingContext *ctx, OutputPluginOptions *opt, bool is_init)
{
	DecoderState *state = palloc0(sizeof(DecoderState));
	ListCell   *option;
	bool		have_tables = false;
	bool		have_format = false;
	bool		packs = false;

	state->context = AllocSetContextCreate(ctx->context, "pgshovel2_decoder",
										   ALLOCSET_DEFAULT_SIZES);
	state->change_cxt = AllocSetContextCreate(ctx->context, "pgshovel2_decoder change",
											  ALLOCSET_DEFAULT_SIZES);
	opt->output_type = OUTPUT_PLUGIN_BINARY_OUTPUT;
	opt->receive_rewrites = false;
	foreach(option, ctx->output_plugin_options)
	{
		DefElem    *elem = lfirst(option);
		MemoryContext old;

		if (strcmp(elem->defname, "format") == 0)
		{
			packs = check_format(elem->arg ? strVal(elem->arg) : "");
			have_format = true;
			continue;
		}
		if (strcmp(elem->defname, "tables") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("pgshovel2_decoder: unknown option \"%s\"", elem->defname),
					 errhint("The options are \"format\" and \"tables\".")));
		old = MemoryContextSwitchTo(state->context);
		pgshovel2_parse_tables(state, elem->arg ? strVal(elem->arg) : "");
		MemoryContextSwitchTo(old);
		have_tables = true;
	}
	if (!have_tables && !is_init)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pgshovel2_decoder: option \"tables\" is required")));
	if (!have_format && !is_init)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pgshovel2_decoder: option \"format\" is required (this plugin writes record "
						"format %s)", RECORD_FORMAT),
				 errhint("The reader is older than this plugin: install the same pgshovel2 version "
						 "as sql/decoder.")));
	if (packs)
	{
		MemoryContext old = MemoryContextSwitchTo(state->context);

		state->pack_buf = makeStringInfo();
		MemoryContextSwitchTo(old);
	}
	pgshovel2_routes_init(state->context);
	ctx->output_plugin_private = state;
}

static void
decoder_shutdown(LogicalDecodingContext *ctx)
{
	DecoderState *state = ctx->output_plugin_private;

	pgshovel2_routes_done();
	MemoryContextDelete(state->change_cxt);
	MemoryContextDelete(state->context);
}

/* The 64-bit xid of a transaction being decoded, epoch-qualified like txid_current(). */
static uint64
full_xid(TransactionId xid)
{
	FullTransactionId next = ReadNextFullTransactionId();
	uint32		epoch = EpochFromFullTransactionId(next);

	/* xid is in the past: if it is above next's low half, it is from the previous epoch */
	if (xid > XidFromFullTransactionId(next))
		epoch--;
	return ((uint64) epoch << 32) | xid;
}

static void
decoder_begin(LogicalDecodingContext *ctx, ReorderBufferTXN *txn)
{
	DecoderState *state = ctx->output_plugin_private;

	state->begun = false;
	state->nchanges = 0;
	state->full_xid = full_xid(txn->xid);
}

/* Write the transaction's BEGIN record if it is not written yet. */
void
pgshovel2_ensure_begin(LogicalDecodingContext *ctx, ReorderBufferTXN *txn)
{
	DecoderState *state = ctx->output_plugin_private;
	StringInfo	out;

	if (state->begun)
		return;
	state->pack = state->pack_buf;	/* NULL without packs */
	out = pgshovel2_start_record(ctx);
	pq_sendbyte(out, 'B');
	pq_sendint64(out, txn->final_lsn);
	pq_sendint64(out, state->full_xid);
	pq_sendint64(out, txn->xact_time.commit_time);
	pgshovel2_end_record(ctx);
	state->begun = true;
}

static void
decoder_commit(LogicalDecodingContext *ctx, ReorderBufferTXN *txn, XLogRecPtr commit_lsn)
{
	DecoderState *state = ctx->output_plugin_private;
	StringInfo	out;

	if (!state->begun)
	{
		OutputPluginUpdateProgress(ctx, true);
		return;
	}
	out = pgshovel2_start_record(ctx);
	pq_sendbyte(out, 'C');
	pq_sendint64(out, commit_lsn);
	pq_sendint64(out, txn->end_lsn);
	pq_sendint32(out, state->nchanges);
	pgshovel2_end_record(ctx);
	if (state->pack != NULL)
		write_pack(ctx);
	state->pack = NULL;
	state->begun = false;
}

/*
 * Before a table's first change in the session and its first change after an
 * ALTER TABLE, write its layout record (layout.c); the captured columns and
 * their codecs follow the new descriptor from here on.
 */
void
pgshovel2_ensure_layout(LogicalDecodingContext *ctx, ShovelTable *t, int index, Relation rel)
{
	DecoderState *state = ctx->output_plugin_private;

	if (!pgshovel2_layout_changed(t, RelationGetDescr(rel)))
		return;
	pgshovel2_write_layout(pgshovel2_start_record(ctx), t, index, rel, state->context);
	pgshovel2_end_record(ctx);
}

/*
 * The value of a captured column. An unchanged TOASTed value (a pointer to
 * the TOAST table, not in the WAL record) is taken from the old image when
 * that has it: REPLICA IDENTITY FULL logs every value inlined, and the old
 * key of DEFAULT or USING INDEX has the identity's columns (PostgreSQL logs
 * it, flattened, whenever one of them is stored out of line). Otherwise
 * *unchanged is set and the value is written as null: the record lists it
 * (flag 4) and a wrong value is never written. unchanged NULL (old rows,
 * which PostgreSQL always flattens): such a value is an error. rel: the
 * relation whose descriptor the rows have (the set's table); replident: the
 * replica identity of the relation the WAL record is of (a partition's own).
 */
static Datum
column_value(ShovelTable *t, int i, Relation rel, char replident, PgShovel2Row *row, PgShovel2Row *old,
			 bool *isnull, bool *unchanged)
{
	int			at = t->attnums[i] - 1;
	Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), at);
	Datum		value = row->values[at];

	*isnull = row->nulls[at];
	if (*isnull || att->attlen != -1 || !VARATT_IS_EXTERNAL_ONDISK(DatumGetPointer(value)))
		return value;
	if (old != NULL)
	{
		value = old->values[at];
		*isnull = old->nulls[at];
		if (!*isnull && !VARATT_IS_EXTERNAL_ONDISK(DatumGetPointer(value)))
			return value;
		/* a NULL is the column's value only in a FULL old image; a key-only one just omits it */
		if (*isnull && replident == REPLICA_IDENTITY_FULL)
			return value;
	}
	if (unchanged == NULL)
		ereport(ERROR,
				(errmsg("pgshovel2_decoder: value of column \"%s\" of table \"%s\" is not in the WAL's "
						"old row", NameStr(att->attname), RelationGetRelationName(rel))));
	*unchanged = true;
	*isnull = true;
	return (Datum) 0;
}

/*
 * Append a row image: JSON array of the captured columns. unchanged: where
 * to list the positions of unchanged values not in the WAL (sized ncols;
 * *nunchanged counts them), NULL for an old row.
 */
static void
write_row(StringInfo out, ShovelTable *t, Relation rel, char replident, PgShovel2Row *row, PgShovel2Row *old,
		  uint16 *unchanged, int *nunchanged)
{
	int			i;

	appendStringInfoCharMacro(out, '[');
	for (i = 0; i < t->ncols; i++)
	{
		bool		isnull;
		bool		missing = false;
		Datum		value = column_value(t, i, rel, replident, row, old, &isnull,
											unchanged ? &missing : NULL);

		if (i > 0)
			appendStringInfoCharMacro(out, ',');
		if (missing)
			unchanged[(*nunchanged)++] = (uint16) i;
		pgshovel2_encode_value(out, &t->codecs[i], value, isnull);
	}
	appendStringInfoCharMacro(out, ']');
}

/* Append a row image preceded by its length (uint32). */
static void
write_sized_row(StringInfo out, ShovelTable *t, Relation rel, char replident, PgShovel2Row *row,
				PgShovel2Row *old, uint16 *unchanged, int *nunchanged)
{
	int			at = out->len;
	uint32		len;

	pq_sendint32(out, 0);
	write_row(out, t, rel, replident, row, old, unchanged, nunchanged);
	len = pg_hton32((uint32) (out->len - at - 4));
	memcpy(out->data + at, &len, 4);
}

/* Append an INSERT's or UPDATE's flags, new row, unchanged list and old row. */
static void
write_new_row(StringInfo out, ShovelTable *t, Relation rel, char replident, PgShovel2Row *row,
			  PgShovel2Row *old)
{
	int			flags_at = out->len;
	uint16	   *unchanged = palloc(sizeof(uint16) * Max(t->ncols, 1));
	int			nunchanged = 0;
	int			i;

	pq_sendbyte(out, old ? FLAG_OLD : 0);
	write_sized_row(out, t, rel, replident, row, old, unchanged, &nunchanged);
	if (nunchanged > 0)
	{
		out->data[flags_at] |= FLAG_UNCHANGED;
		pq_sendint16(out, (uint16) nunchanged);
		for (i = 0; i < nunchanged; i++)
			pq_sendint16(out, unchanged[i]);
	}
	if (old)
		write_row(out, t, rel, replident, old, NULL, NULL, NULL);
}

/*
 * The set's table a change of rel is decoded as (NULL: none): rel itself, or for a leaf
 * partition its top-most ancestor in the set (partitions.c), opened into *target (closed by the
 * caller) with the map converting rel's tuples into its descriptor (NULL: none needed).
 */
static ShovelTable *
change_table(DecoderState *state, Relation rel, int *index, Relation *target, TupleConversionMap **map)
{
	ShovelTable *t = pgshovel2_find_table(state, RelationGetRelid(rel), index);
	Oid			ancestor;

	*target = rel;
	*map = NULL;
	if (t != NULL || !pgshovel2_route(state, rel, index, &ancestor, map))
		return t;
	*target = RelationIdGetRelation(ancestor);
	if (!RelationIsValid(*target))
		elog(ERROR, "pgshovel2_decoder: could not open relation %u (an ancestor of \"%s\")", ancestor,
			 RelationGetRelationName(rel));
	return &state->tables[*index];
}

/* tuple in the set table's descriptor (map: change_table's); NULL stays NULL. */
static HeapTuple
converted(HeapTuple tuple, TupleConversionMap *map)
{
	return tuple == NULL || map == NULL ? tuple : execute_attr_map_tuple(tuple, map);
}

static void
decoder_change(LogicalDecodingContext *ctx, ReorderBufferTXN *txn, Relation rel,
			   ReorderBufferChange *change)
{
	DecoderState *state = ctx->output_plugin_private;
	ShovelTable *t;
	int			index;
	Relation	target;
	TupleConversionMap *map;
	char		replident = rel->rd_rel->relreplident;
	HeapTuple	new_tuple = NULL;
	HeapTuple	old_tuple = NULL;
	PgShovel2Row *old_row;
	TupleDesc	desc;
	char		op;
	MemoryContext old_cxt;
	StringInfo	out;

	switch (change->action)
	{
		case REORDER_BUFFER_CHANGE_INSERT:
			op = 'I';
			break;
		case REORDER_BUFFER_CHANGE_UPDATE:
			op = 'U';
			break;
		case REORDER_BUFFER_CHANGE_DELETE:
			op = 'D';
			break;
		default:
			return;
	}
	t = change_table(state, rel, &index, &target, &map);
	if (t == NULL)
		return;
	desc = RelationGetDescr(target);
	pgshovel2_ensure_begin(ctx, txn);
	pgshovel2_ensure_layout(ctx, t, index, target);
	old_cxt = MemoryContextSwitchTo(state->change_cxt);
	if (change->data.tp.newtuple)
		new_tuple = converted(&change->data.tp.newtuple->tuple, map);
	if (change->data.tp.oldtuple)
		old_tuple = converted(&change->data.tp.oldtuple->tuple, map);
	out = pgshovel2_start_record(ctx);
	pq_sendbyte(out, op);
	pq_sendint64(out, change->lsn);
	pq_sendint16(out, (uint16) index);
	old_row = pgshovel2_deform(old_tuple, desc);
	if (op == 'D')
	{
		pq_sendbyte(out, old_row ? 0 : FLAG_NO_ROW);
		if (old_row)
			write_sized_row(out, t, target, replident, old_row, NULL, NULL, NULL);
		else
			pq_sendint32(out, 0);
	}
	else
		write_new_row(out, t, target, replident, pgshovel2_deform(new_tuple, desc), old_row);
	pgshovel2_end_record(ctx);
	MemoryContextSwitchTo(old_cxt);
	MemoryContextReset(state->change_cxt);
	if (target != rel)
		RelationClose(target);
	state->nchanges++;
}

static void
decoder_truncate(LogicalDecodingContext *ctx, ReorderBufferTXN *txn, int nrelations,
				 Relation relations[], ReorderBufferChange *change)
{
	DecoderState *state = ctx->output_plugin_private;
	int			i;

	for (i = 0; i < nrelations; i++)
	{
		int			index;
		StringInfo	out;

		if (pgshovel2_find_table(state, RelationGetRelid(relations[i]), &index) == NULL)
			continue;
		pgshovel2_ensure_begin(ctx, txn);
		out = pgshovel2_start_record(ctx);
		pq_sendbyte(out, 'T');
		pq_sendint64(out, change->lsn);
		pq_sendint16(out, (uint16) index);
		pgshovel2_end_record(ctx);
		state->nchanges++;
	}
}

/*
 * The "tables" spec of a set-version message, {"version": N, "tables": "<spec>"}
 * (the spec holds no quote or backslash), copied into mcxt; NULL when absent.
 */
static char *
version_tables(const char *message, Size size, MemoryContext mcxt)
{
	char	   *text = pnstrdup(message, size);
	char	   *at = strstr(text, "\"tables\"");
	char	   *end;

	if (at == NULL || (at = strchr(at + 8, '"')) == NULL || (end = strchr(at + 1, '"')) == NULL)
		return NULL;
	*end = '\0';
	return MemoryContextStrdup(mcxt, at + 1);
}

/*
 * A set-version marker (transactional message "pgshovel2.version", written by
 * pgshovel set upgrade in its transaction) is written as 'V' at its place: LSN (8),
 * the message (JSON) to the end of the record. Its "tables" replace the option's
 * from here on, so changes after it follow the new version's tables exactly.
 */
static void
version_message(LogicalDecodingContext *ctx, ReorderBufferTXN *txn, XLogRecPtr lsn, Size size,
				const char *message)
{
	DecoderState *state = ctx->output_plugin_private;
	char	   *spec = version_tables(message, size, state->context);
	MemoryContext old;
	StringInfo	out;

	pgshovel2_ensure_begin(ctx, txn);
	out = pgshovel2_start_record(ctx);
	pq_sendbyte(out, 'V');
	pq_sendint64(out, lsn);
	pq_sendbytes(out, message, size);
	pgshovel2_end_record(ctx);
	if (spec != NULL)
	{
		old = MemoryContextSwitchTo(state->context);
		pgshovel2_parse_tables(state, spec);
		MemoryContextSwitchTo(old);
		pgshovel2_routes_reset();
	}
}

/*
 * Heartbeats (non-transactional messages with prefix "pgshovel2.heartbeat",
 * pgshovel2_decoder.heartbeat()) are written as 'H' with their LSN, so an idle
 * relay can confirm the slot up to there and the slot does not pin WAL.
 */
static void
decoder_message(LogicalDecodingContext *ctx, ReorderBufferTXN *txn, XLogRecPtr lsn,
				bool transactional, const char *prefix, Size size, const char *message)
{
	if (transactional && strcmp(prefix, VERSION_PREFIX) == 0)
	{
		version_message(ctx, txn, lsn, size, message);
		return;
	}
	if (transactional && strcmp(prefix, ROWS_PREFIX) == 0)
	{
		pgshovel2_rows_message(ctx, txn, lsn, size, message);
		return;
	}
	if (transactional || strcmp(prefix, HEARTBEAT_PREFIX) != 0)
		return;
	OutputPluginPrepareWrite(ctx, true);
	pq_sendbyte(ctx->out, 'H');
	pq_sendint64(ctx->out, lsn);
	OutputPluginWrite(ctx, true);
}

void
_PG_output_plugin_init(OutputPluginCallbacks *cb)
{
	cb->startup_cb = decoder_startup;
	cb->begin_cb = decoder_begin;
	cb->change_cb = decoder_change;
	cb->truncate_cb = decoder_truncate;
	cb->commit_cb = decoder_commit;
	cb->message_cb = decoder_message;
	cb->shutdown_cb = decoder_shutdown;
}
