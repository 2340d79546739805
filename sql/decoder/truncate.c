/*
 * truncate.c - TRUNCATE of a partition of a set's table, as the DELETEs of the rows it removed.
 *
 * PostgreSQL logs a TRUNCATE of a partition as a truncate of that partition only, and a
 * TRUNCATE record cannot say which rows went. The set's BEFORE TRUNCATE trigger on every leaf
 * partition (pgshovel2_pl.truncate_message, installed by set create) writes the rows into the
 * WAL first, as transactional logical messages with prefix "pgshovel2.truncate" (at most 1,000
 * rows each), in the truncating transaction:
 *
 *     <slot name> '\n' <leaf oid> '\n' <attnum>,<attnum>,... '\n' <row> ['\n' <row> ...]
 *
 * a row being pgshovel2_decoder.encode_row(<leaf row>, '{<the attnums>}'): the leaf's live
 * columns in the capture trigger's forms. The plugin of that slot writes each row as the DELETE
 * record ('D', flags 0, the whole old row) of the leaf's top-most ancestor in the set
 * (partitions.c), its captured columns picked by name, at the message's LSN: what a DELETE of
 * the row would have given, so the relay and every consumer take it as one.
 */
#include "postgres.h"

#include "libpq/pqformat.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "decoder.h"

/* One line of the message: [start, start + len). */
typedef struct Line
{
	const char *start;
	int			len;
} Line;

/* The next line of [*at, end), *at moved past its newline; false at the end. */
static bool
next_line(const char **at, const char *end, Line *line)
{
	const char *p = *at;

	if (p >= end)
		return false;
	line->start = p;
	while (p < end && *p != '\n')
		p++;
	line->len = (int) (p - line->start);
	*at = p < end ? p + 1 : p;
	return true;
}

static void
bad_message(const char *why)
{
	ereport(ERROR,
			(errmsg("pgshovel2_decoder: malformed \"pgshovel2.truncate\" message: %s", why),
			 errhint("The message is written by the set's truncate trigger of the same pgshovel2 version.")));
}

/* The attnum list of the message: *n of them. */
static int16 *
parse_attnums(Line line, int *n)
{
	int16	   *out = palloc(sizeof(int16) * (line.len / 2 + 1));
	const char *p = line.start;
	const char *end = line.start + line.len;

	*n = 0;
	while (p < end)
	{
		int			v = 0;

		if (*p < '0' || *p > '9')
			bad_message("bad attnum list");
		while (p < end && *p >= '0' && *p <= '9')
			v = v * 10 + (*p++ - '0');
		if (v < 1 || v > MaxHeapAttributeNumber)
			bad_message("attnum out of range");
		out[(*n)++] = (int16) v;
		if (p < end && *p++ != ',')
			bad_message("bad attnum list");
	}
	return out;
}

/*
 * Split a JSON array (encode.c's row form) into its n top-level elements. Raises an error when it
 * does not have exactly n.
 */
static void
split_row(Line row, Line *elements, int n)
{
	const char *p = row.start;
	const char *end = row.start + row.len;
	int			depth = 0;
	bool		in_string = false;
	int			count = 0;
	const char *start = NULL;

	if (row.len < 2 || p[0] != '[' || end[-1] != ']')
		bad_message("a row is not a JSON array");
	for (p = row.start + 1; p < end - 1; p++)
	{
		if (start == NULL)
			start = p;
		if (in_string)
		{
			if (*p == '\\')
				p++;
			else if (*p == '"')
				in_string = false;
			continue;
		}
		if (*p == '"')
			in_string = true;
		else if (*p == '[' || *p == '{')
			depth++;
		else if (*p == ']' || *p == '}')
			depth--;
		else if (*p == ',' && depth == 0)
		{
			if (count == n)
				bad_message("a row has more values than attnums");
			elements[count].start = start;
			elements[count++].len = (int) (p - start);
			start = NULL;
		}
	}
	if (start != NULL)
	{
		if (count == n)
			bad_message("a row has more values than attnums");
		elements[count].start = start;
		elements[count++].len = (int) (end - 1 - start);
	}
	if (count != n || in_string || depth != 0)
		bad_message("a row does not have one value per attnum");
}

/*
 * For each captured column of t (in the descriptor of ancestor), its position among the message's
 * leaf attnums (map: leaf -> ancestor conversion, NULL when the descriptors match).
 */
static int *
picks(ShovelTable *t, Relation ancestor, TupleConversionMap *map, const int16 *attnums, int n)
{
	int		   *out = palloc(sizeof(int) * Max(t->ncols, 1));
	int			i;

	for (i = 0; i < t->ncols; i++)
	{
		AttrNumber	leaf_attnum = map ? map->attrMap->attnums[t->attnums[i] - 1] : t->attnums[i];
		int			j;

		out[i] = -1;
		for (j = 0; j < n; j++)
			if (attnums[j] == leaf_attnum)
				out[i] = j;
		if (out[i] < 0)
			ereport(ERROR,
					(errmsg("pgshovel2_decoder: the rows of a TRUNCATE of a partition of table \"%s\" lack "
							"its column \"%s\"", RelationGetRelationName(ancestor),
							NameStr(TupleDescAttr(RelationGetDescr(ancestor), t->attnums[i] - 1)->attname))));
	}
	return out;
}

/* Write one row of the message as the DELETE record of table index. */
static void
write_delete(LogicalDecodingContext *ctx, XLogRecPtr lsn, int index, ShovelTable *t, const int *pick,
			 Line *elements)
{
	StringInfo	out = pgshovel2_start_record(ctx);
	int			at;
	uint32		len;
	int			i;

	pq_sendbyte(out, 'D');
	pq_sendint64(out, lsn);
	pq_sendint16(out, (uint16) index);
	pq_sendbyte(out, 0);
	at = out->len;
	pq_sendint32(out, 0);
	appendStringInfoCharMacro(out, '[');
	for (i = 0; i < t->ncols; i++)
	{
		if (i > 0)
			appendStringInfoCharMacro(out, ',');
		appendBinaryStringInfo(out, elements[pick[i]].start, elements[pick[i]].len);
	}
	appendStringInfoCharMacro(out, ']');
	len = pg_hton32((uint32) (out->len - at - 4));
	memcpy(out->data + at, &len, 4);
	pgshovel2_end_record(ctx);
}

void
pgshovel2_truncate_message(LogicalDecodingContext *ctx, ReorderBufferTXN *txn, XLogRecPtr lsn, Size size,
						   const char *message)
{
	DecoderState *state = ctx->output_plugin_private;
	const char *at = message;
	const char *end = message + size;
	Line		line;
	Oid			leaf_oid;
	Relation	leaf;
	Relation	ancestor;
	Oid			ancestor_oid;
	TupleConversionMap *map;
	int			index;
	int16	   *attnums;
	int			n;
	int		   *pick;
	Line	   *elements;
	MemoryContext old;
	char	   *slot = NameStr(ctx->slot->data.name);

	if (!next_line(&at, end, &line) || line.len != (int) strlen(slot) || memcmp(line.start, slot, line.len) != 0)
		return;					/* another set's */
	old = MemoryContextSwitchTo(state->change_cxt);
	if (!next_line(&at, end, &line))
		bad_message("no partition");
	leaf_oid = (Oid) strtoul(pnstrdup(line.start, line.len), NULL, 10);
	leaf = RelationIdGetRelation(leaf_oid);
	if (!RelationIsValid(leaf))
		elog(ERROR, "pgshovel2_decoder: could not open relation %u (a truncated partition)", leaf_oid);
	if (!pgshovel2_route(state, leaf, &index, &ancestor_oid, &map))
	{
		RelationClose(leaf);	/* no ancestor in the set (any more) */
		MemoryContextSwitchTo(old);
		MemoryContextReset(state->change_cxt);
		return;
	}
	if (!next_line(&at, end, &line))
		bad_message("no attnum list");
	attnums = parse_attnums(line, &n);
	ancestor = RelationIdGetRelation(ancestor_oid);
	if (!RelationIsValid(ancestor))
		elog(ERROR, "pgshovel2_decoder: could not open relation %u (an ancestor of \"%s\")", ancestor_oid,
			 RelationGetRelationName(leaf));
	MemoryContextSwitchTo(old);
	pgshovel2_ensure_begin(ctx, txn);
	pgshovel2_ensure_layout(ctx, &state->tables[index], index, ancestor);
	old = MemoryContextSwitchTo(state->change_cxt);
	pick = picks(&state->tables[index], ancestor, map, attnums, n);
	elements = palloc(sizeof(Line) * Max(n, 1));
	while (next_line(&at, end, &line))
	{
		split_row(line, elements, n);
		write_delete(ctx, lsn, index, &state->tables[index], pick, elements);
		state->nchanges++;
	}
	RelationClose(ancestor);
	RelationClose(leaf);
	MemoryContextSwitchTo(old);
	MemoryContextReset(state->change_cxt);
}
