/*
 * layout.c - layout records ('R'): a table's captured columns, written before the
 * first change of the table in a session and before the first change after its
 * descriptor changed (ALTER TABLE), like pgoutput's Relation message. The captured
 * columns follow the table: mode all ("<oid>*:") every live column, a subset the
 * listed columns still alive. Record form: sql/decoder/README.rst.
 */
#include "postgres.h"

#include "access/tupdesc.h"
#include "access/tupdesc_details.h"
#include "libpq/pqformat.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "decoder.h"

/* True when desc differs from the one the last layout record of t was written for. */
bool
pgshovel2_layout_changed(ShovelTable *t, TupleDesc desc)
{
	int			i;

	if (t->sent == NULL || t->sent->natts != desc->natts)
		return true;
	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute a = TupleDescAttr(desc, i);
		Form_pg_attribute b = TupleDescAttr(t->sent, i);

		if (a->atttypid != b->atttypid || a->atttypmod != b->atttypmod ||
			a->attisdropped != b->attisdropped || a->attnotnull != b->attnotnull ||
			a->atthasmissing != b->atthasmissing || strcmp(NameStr(a->attname), NameStr(b->attname)) != 0)
			return true;
	}
	return false;
}

static bool
live(TupleDesc desc, int attnum)
{
	return attnum >= 1 && attnum <= desc->natts && !TupleDescAttr(desc, attnum - 1)->attisdropped;
}

/* Recompute t's captured attnums for desc (arrays grown in mcxt). */
static void
recapture(ShovelTable *t, TupleDesc desc, MemoryContext mcxt)
{
	int			n = 0;
	int			i;

	if (t->cap < desc->natts)
	{
		int16	   *attnums = MemoryContextAlloc(mcxt, desc->natts * sizeof(int16));

		memcpy(attnums, t->attnums, t->ncols * sizeof(int16));
		t->attnums = attnums;
		t->codecs = MemoryContextAllocZero(mcxt, desc->natts * sizeof(ColumnCodec));
		t->cap = desc->natts;
	}
	if (t->all)
	{
		for (i = 1; i <= desc->natts; i++)
			if (live(desc, i))
				t->attnums[n++] = (int16) i;
	}
	else
	{
		for (i = 0; i < t->ncols; i++)
			if (live(desc, t->attnums[i]))
				t->attnums[n++] = t->attnums[i];
	}
	t->ncols = n;
}

/* The text of the value rows that existed before an ADD COLUMN get (attmissingval), or NULL. */
static char *
missing_text(TupleDesc desc, Form_pg_attribute att)
{
	Oid			out;
	bool		varlena;
	struct AttrMissing *missing;

	if (!att->atthasmissing || desc->constr == NULL || desc->constr->missing == NULL)
		return NULL;
	missing = &desc->constr->missing[att->attnum - 1];
	if (!missing->am_present)
		return NULL;
	getTypeOutputInfo(att->atttypid, &out, &varlena);
	return OidOutputFunctionCall(out, missing->am_value);
}

/*
 * Recompute t's captured columns and codecs for rel's descriptor and append the
 * layout record: 'R', table index (2), schema, table name (C strings), column count
 * (2), per captured column: attnum (2), type OID (4), typmod (4), NOT NULL (1), has
 * missing value (1), name (C string), missing value text (C string, when present).
 */
void
pgshovel2_write_layout(StringInfo out, ShovelTable *t, int index, Relation rel, MemoryContext mcxt)
{
	TupleDesc	desc = RelationGetDescr(rel);
	MemoryContext old;
	int			i;

	recapture(t, desc, mcxt);
	pq_sendbyte(out, 'R');
	pq_sendint16(out, (uint16) index);
	pq_sendstring(out, get_namespace_name(RelationGetNamespace(rel)));
	pq_sendstring(out, RelationGetRelationName(rel));
	pq_sendint16(out, (uint16) t->ncols);
	for (i = 0; i < t->ncols; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, t->attnums[i] - 1);
		char	   *missing = missing_text(desc, att);

		pgshovel2_codec_init(&t->codecs[i], att->atttypid, mcxt);
		pq_sendint16(out, (uint16) att->attnum);
		pq_sendint32(out, att->atttypid);
		pq_sendint32(out, att->atttypmod);
		pq_sendbyte(out, att->attnotnull ? 1 : 0);
		pq_sendbyte(out, missing != NULL ? 1 : 0);
		pq_sendstring(out, NameStr(att->attname));
		if (missing != NULL)
			pq_sendstring(out, missing);
	}
	old = MemoryContextSwitchTo(mcxt);
	if (t->sent != NULL)
		FreeTupleDesc(t->sent);
	/* ...Constr: CreateTupleDescCopy clears attnotnull and atthasmissing, which are compared */
	t->sent = CreateTupleDescCopyConstr(desc);
	MemoryContextSwitchTo(old);
}
