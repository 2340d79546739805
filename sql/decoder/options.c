/*
 * options.c - the "tables" plugin option.
 *
 * Form: "<oid>:<attnum>,<attnum>,...;<oid>*:..." (a table with no captured
 * column: "<oid>:"; "*" after the oid: mode all, every live column is
 * captured whatever the list says, following ADD/DROP COLUMN). The position of a table in the list is its index in the
 * output records. The relay builds it from the set record (table oid from
 * to_regclass, captured attnums from the set's columns).
 */
#include "postgres.h"

#include <stdlib.h>

#include "decoder.h"

static int
count_char(const char *s, char c)
{
	int			n = 0;

	for (; *s; s++)
		n += (*s == c);
	return n;
}

static const char *
parse_one(ShovelTable *t, const char *p, const char *spec)
{
	char	   *end;
	unsigned long oid = strtoul(p, &end, 10);
	int			cap;

	if (end == p || (*end != ':' && *end != '*') || oid == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pgshovel2_decoder: bad \"tables\" option \"%s\": expected <oid>:<attnums>", spec)));
	t->relid = (Oid) oid;
	t->all = (*end == '*');
	if (t->all)
		end++;
	if (*end != ':')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pgshovel2_decoder: bad \"tables\" option \"%s\": expected <oid>[*]:<attnums>", spec)));
	p = end + 1;
	cap = count_char(p, ',') + 1;
	t->attnums = palloc(cap * sizeof(int16));
	t->cap = cap;
	t->ncols = 0;
	while (*p && *p != ';')
	{
		long		attnum = strtol(p, &end, 10);

		if (end == p || attnum < 1 || attnum > MaxHeapAttributeNumber || t->ncols == cap)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("pgshovel2_decoder: bad attnum list in \"tables\" option \"%s\"", spec)));
		t->attnums[t->ncols++] = (int16) attnum;
		p = (*end == ',') ? end + 1 : end;
	}
	t->codecs = palloc0(Max(cap, 1) * sizeof(ColumnCodec));
	t->sent = NULL;
	return *p == ';' ? p + 1 : p;
}

/* Parse spec into state->tables (allocated in the current memory context). */
void
pgshovel2_parse_tables(DecoderState *state, const char *spec)
{
	const char *p = spec;
	int			cap = count_char(spec, ';') + 1;

	state->tables = palloc0(cap * sizeof(ShovelTable));
	state->ntables = 0;
	while (*p)
	{
		if (state->ntables == cap || state->ntables >= PG_UINT16_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("pgshovel2_decoder: too many tables in \"tables\" option")));
		p = parse_one(&state->tables[state->ntables++], p, spec);
	}
}

/* The set's table with relid (its index in *index), or NULL when it is not in the set. */
ShovelTable *
pgshovel2_find_table(DecoderState *state, Oid relid, int *index)
{
	int			i;

	for (i = 0; i < state->ntables; i++)
	{
		if (state->tables[i].relid == relid)
		{
			*index = i;
			return &state->tables[i];
		}
	}
	return NULL;
}
