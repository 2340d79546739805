/*
 * rows.c - rows that joined or left a set's table without a change record: as the INSERTs and
 * DELETEs they are.
 *
 * PostgreSQL logs a TRUNCATE of a partition as a truncate of that partition only (which cannot
 * say which rows went), and ATTACH / DETACH PARTITION as catalog changes. The set's triggers
 * (sql/capture_pl 4_partitions.sql; the C extension's event trigger for ATTACH and DETACH) write
 * the rows into the WAL first, in the same transaction, as transactional logical messages with
 * prefix "pgshovel2.rows" (at most 1,000 rows each):
 *
 *     <slot name> '\n' <op: D or I> '\n' <table OID> '\n' <partition OID> '\n' <attnum>,<attnum>,...
 *     '\n' <row> ['\n' <row> ...]
 *
 * a row being pgshovel2_decoder.encode_row(<partition row>, '{<the attnums>}'): the partition's
 * live columns in the capture trigger's forms. The plugin of that slot writes each row as the
 * DELETE ('D', flags 0, the whole old row) or INSERT ('I', flags 0) record of the table, when it
 * is in the set, with its captured columns picked by name, at the message's LSN: what a DELETE
 * or INSERT of the row would have given, so the relay and every consumer take it as one.
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
			(errmsg("pgshovel2_decoder: malformed \"pgshovel2.rows\" message: %s", why),
			 errhint("The message is written by pgshovel2_pl.emit_messages of the same pgshovel2 version.")));
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
 * For each captured column of t (in root's descriptor), its position among the message's attnums
 * of leaf: the leaf's column of the same name.
 */
static int *
picks(ShovelTable *t, Relation root, Relation leaf, const int16 *attnums, int n)
{
	int		   *out = palloc(sizeof(int) * Max(t->ncols, 1));
	TupleDesc	leaf_desc = RelationGetDescr(leaf);
	int			i;

	for (i = 0; i < t->ncols; i++)
	{
		const char *name = NameStr(TupleDescAttr(RelationGetDescr(root), t->attnums[i] - 1)->attname);
		int			j;

		out[i] = -1;
		for (j = 0; j < n; j++)
		{
			Form_pg_attribute att;

			if (attnums[j] > leaf_desc->natts)
				bad_message("an attnum is not a column of the partition");
			att = TupleDescAttr(leaf_desc, attnums[j] - 1);
			if (!att->attisdropped && strcmp(NameStr(att->attname), name) == 0)
				out[i] = j;
		}
		if (out[i] < 0)
			ereport(ERROR,
					(errmsg("pgshovel2_decoder: the rows of \"%s\" (a \"pgshovel2.rows\" message) lack column "
							"\"%s\" of table \"%s\"", RelationGetRelationName(leaf), name,
							RelationGetRelationName(root))));
	}
	return out;
}

/* Write one row of the message as the op record (D, I) of table index. */
static void
write_row(LogicalDecodingContext *ctx, char op, XLogRecPtr lsn, int index, ShovelTable *t, const int *pick,
		  Line *elements)
{
	StringInfo	out = pgshovel2_start_record(ctx);
	int			at;
	uint32		len;
	int			i;

	pq_sendbyte(out, op);
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

/* The OID on the next line. */
static Oid
next_oid(const char **at, const char *end, const char *missing)
{
	Line		line;
	char	   *text;
	char	   *stop;
	unsigned long oid;

	if (!next_line(at, end, &line))
		bad_message(missing);
	text = pnstrdup(line.start, line.len);
	oid = strtoul(text, &stop, 10);
	if (*text == '\0' || *stop != '\0' || oid == 0 || oid > PG_UINT32_MAX)
		bad_message(missing);
	return (Oid) oid;
}

static Relation
open_relation(Oid relid, const char *what)
{
	Relation	rel = RelationIdGetRelation(relid);

	if (!RelationIsValid(rel))
		elog(ERROR, "pgshovel2_decoder: could not open relation %u (%s in a \"pgshovel2.rows\" message)", relid,
			 what);
	return rel;
}

void
pgshovel2_rows_message(LogicalDecodingContext *ctx, ReorderBufferTXN *txn, XLogRecPtr lsn, Size size,
					   const char *message)
{
	DecoderState *state = ctx->output_plugin_private;
	const char *at = message;
	const char *end = message + size;
	Line		line;
	char		op;
	Oid			root_oid;
	Oid			leaf_oid;
	Relation	root;
	Relation	leaf;
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
	if (!next_line(&at, end, &line) || line.len != 1 || (line.start[0] != 'D' && line.start[0] != 'I'))
		bad_message("no op (D or I)");
	op = line.start[0];
	root_oid = next_oid(&at, end, "no table");
	leaf_oid = next_oid(&at, end, "no partition");
	if (!next_line(&at, end, &line))
		bad_message("no attnum list");
	attnums = parse_attnums(line, &n);
	if (pgshovel2_find_table(state, root_oid, &index) == NULL)
	{
		MemoryContextSwitchTo(old);	/* the table is not in the set (any more) */
		MemoryContextReset(state->change_cxt);
		return;
	}
	root = open_relation(root_oid, "a set's table");
	leaf = open_relation(leaf_oid, "a partition");
	MemoryContextSwitchTo(old);
	pgshovel2_ensure_begin(ctx, txn);
	pgshovel2_ensure_layout(ctx, &state->tables[index], index, root);
	old = MemoryContextSwitchTo(state->change_cxt);
	pick = picks(&state->tables[index], root, leaf, attnums, n);
	elements = palloc(sizeof(Line) * Max(n, 1));
	while (next_line(&at, end, &line))
	{
		split_row(line, elements, n);
		write_row(ctx, op, lsn, index, &state->tables[index], pick, elements);
		state->nchanges++;
	}
	RelationClose(root);
	RelationClose(leaf);
	MemoryContextSwitchTo(old);
	MemoryContextReset(state->change_cxt);
}
