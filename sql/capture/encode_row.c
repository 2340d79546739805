/*
 * encode_row.c - encode_row(record, int2[]): a row value in the capture
 * trigger's form (encode.c), for snapshot reads. Shared by the capture
 * extension (pgshovel2.encode_row) and the output plugin's extension
 * (pgshovel2_decoder.encode_row), so snapshot rows and changes are encoded by
 * the same code in both backends.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/typcache.h"

#include "encode.h"

/* Per-call-site cache for encode_row(). */
typedef struct RowCodec
{
	Oid			type_id;
	int			ncols;
	int16	   *attnums;
	ColumnCodec *codecs;
} RowCodec;

static RowCodec *
row_codec(FunctionCallInfo fcinfo, Oid type_id, TupleDesc desc, ArrayType *arr)
{
	RowCodec   *rc = fcinfo->flinfo->fn_extra;
	MemoryContext mcxt = fcinfo->flinfo->fn_mcxt;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int			i;

	if (rc && rc->type_id == type_id)
		return rc;
	deconstruct_array(arr, INT2OID, 2, true, TYPALIGN_SHORT, &elems, &nulls, &n);
	rc = MemoryContextAllocZero(mcxt, sizeof(RowCodec));
	rc->type_id = type_id;
	rc->ncols = n;
	rc->attnums = MemoryContextAlloc(mcxt, Max(n, 1) * sizeof(int16));
	rc->codecs = MemoryContextAlloc(mcxt, Max(n, 1) * sizeof(ColumnCodec));
	for (i = 0; i < n; i++)
	{
		int16		attnum = DatumGetInt16(elems[i]);

		if (nulls[i] || attnum < 1 || attnum > desc->natts ||
			TupleDescAttr(desc, attnum - 1)->attisdropped)
			elog(ERROR, "encode_row(): no column with attnum %d", attnum);
		rc->attnums[i] = attnum;
		pgshovel2_codec_init(&rc->codecs[i], TupleDescAttr(desc, attnum - 1)->atttypid, mcxt);
	}
	fcinfo->flinfo->fn_extra = rc;
	return rc;
}

Datum
pgshovel2_encode_row_text(FunctionCallInfo fcinfo)
{
	HeapTupleHeader th = PG_GETARG_HEAPTUPLEHEADER(0);
	ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(1);
	Oid			type_id = HeapTupleHeaderGetTypeId(th);
	TupleDesc	desc = lookup_rowtype_tupdesc(type_id, HeapTupleHeaderGetTypMod(th));
	HeapTupleData tuple;
	RowCodec   *rc;
	StringInfoData buf;

	tuple.t_len = HeapTupleHeaderGetDatumLength(th);
	ItemPointerSetInvalid(&tuple.t_self);
	tuple.t_tableOid = InvalidOid;
	tuple.t_data = th;
	rc = row_codec(fcinfo, type_id, desc, arr);
	initStringInfo(&buf);
	pgshovel2_encode_tuple(&buf, &tuple, desc, rc->attnums, rc->ncols, rc->codecs);
	ReleaseTupleDesc(desc);
	PG_RETURN_TEXT_P(cstring_to_text_with_len(buf.data, buf.len));
}
