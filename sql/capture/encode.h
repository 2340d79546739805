/*
 * encode.h - the row encoding shared by the capture trigger and encode_row().
 *
 * A row is a JSON array of the captured columns' values, in the order of the
 * attnum list. See sql/capture/README for the value forms.
 */
#ifndef PGSHOVEL2_ENCODE_H
#define PGSHOVEL2_ENCODE_H

#include "postgres.h"
#include "fmgr.h"
#include "access/htup.h"
#include "access/tupdesc.h"
#include "lib/stringinfo.h"

/* Output functions of a tuple descriptor's columns, looked up once. */
typedef struct ColumnCodec
{
	Oid			base_type;		/* type after stripping domains */
	FmgrInfo	out;			/* the type's output function */
	bool		pin_path;		/* its text depends on search_path (reg* types): written with it pinned */
	/* arrays of session-dependent types are encoded element by element */
	struct ColumnCodec *elem;
	Oid			elem_type;
	int16		elem_len;
	bool		elem_byval;
	char		elem_align;
} ColumnCodec;

/* A tuple's values, deformed once (heap_getattr walks from the first column for each one after a varlena). */
typedef struct PgShovel2Row
{
	Datum	   *values;			/* by attnum - 1 */
	bool	   *nulls;
} PgShovel2Row;

extern PgShovel2Row *pgshovel2_deform(HeapTuple tuple, TupleDesc desc);
extern void pgshovel2_codec_init(ColumnCodec *codec, Oid type_oid,
								 MemoryContext mcxt);
extern void pgshovel2_encode_value(StringInfo buf, ColumnCodec *codec,
								   Datum value, bool isnull);
extern void pgshovel2_encode_tuple(StringInfo buf, HeapTuple tuple,
								 TupleDesc desc, const int16 *attnums,
								 int natts, ColumnCodec *codecs);
extern void pgshovel2_encode_deformed(StringInfo buf, const PgShovel2Row *row,
									  const int16 *attnums, int natts,
									  ColumnCodec *codecs);
extern void pgshovel2_json_string(StringInfo buf, const char *s);

/* encode_row.c: the body of the SQL function encode_row(record, int2[]) -> text. */
extern Datum pgshovel2_encode_row_text(FunctionCallInfo fcinfo);

#endif
