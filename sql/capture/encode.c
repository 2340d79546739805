/*
 * encode.c - JSON array encoding of captured column values.
 *
 * Value forms are independent of session settings (DateStyle, IntervalStyle,
 * bytea_output, extra_float_digits), so the relay decodes every event the same
 * way whichever session wrote it.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "common/shortest_dec.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include <math.h>

#include "encode.h"

/*
 * Append s[0..len) as a JSON string: runs of characters that need no escape
 * are copied whole.
 */
static void
append_json_text(StringInfo buf, const char *s, int len)
{
	const unsigned char *p = (const unsigned char *) s;
	const unsigned char *end = p + len;
	const unsigned char *run = p;

	enlargeStringInfo(buf, len + 2);
	buf->data[buf->len++] = '"';
	for (; p < end; p++)
	{
		const char *escaped;

		if (*p >= 0x20 && *p != '"' && *p != '\\')
			continue;
		appendBinaryStringInfo(buf, (const char *) run, p - run);
		run = p + 1;
		switch (*p)
		{
			case '"':
				escaped = "\\\"";
				break;
			case '\\':
				escaped = "\\\\";
				break;
			case '\n':
				escaped = "\\n";
				break;
			case '\t':
				escaped = "\\t";
				break;
			case '\r':
				escaped = "\\r";
				break;
			default:
				appendStringInfo(buf, "\\u%04x", *p);
				continue;
		}
		appendBinaryStringInfo(buf, escaped, 2);
	}
	appendBinaryStringInfo(buf, (const char *) run, p - run);
	appendStringInfoCharMacro(buf, '"');
}

void
pgshovel2_json_string(StringInfo buf, const char *s)
{
	append_json_text(buf, s, strlen(s));
}

/* Append an integer's decimal digits (what "%lld" would print, without a format). */
static inline void
append_int64(StringInfo buf, int64 value)
{
	enlargeStringInfo(buf, MAXINT8LEN);
	buf->len += pg_lltoa(value, buf->data + buf->len);
}

/* A uuid's text form (uuid_out's: lowercase hex, 8-4-4-4-12), which needs no escape. */
static void
encode_uuid(StringInfo buf, pg_uuid_t *uuid)
{
	static const char hex[] = "0123456789abcdef";
	int			i;

	enlargeStringInfo(buf, 2 * UUID_LEN + 6);
	buf->data[buf->len++] = '"';
	for (i = 0; i < UUID_LEN; i++)
	{
		if (i == 4 || i == 6 || i == 8 || i == 10)
			buf->data[buf->len++] = '-';
		buf->data[buf->len++] = hex[uuid->data[i] >> 4];
		buf->data[buf->len++] = hex[uuid->data[i] & 0xf];
	}
	buf->data[buf->len++] = '"';
	buf->data[buf->len] = '\0';
}

/* Types whose output text depends on session settings (or is costly to parse). */
static bool
has_own_form(Oid base_type)
{
	switch (base_type)
	{
		case BOOLOID:
		case FLOAT4OID:
		case FLOAT8OID:
		case DATEOID:
		case TIMEOID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
		case INTERVALOID:
		case BYTEAOID:
			return true;
		default:
			return false;
	}
}

/*
 * Types whose output names an object as visible through search_path (reg*):
 * their text depends on the writer's session unless search_path is pinned.
 */
static bool
names_objects(Oid base_type)
{
	switch (base_type)
	{
		case REGPROCOID:
		case REGPROCEDUREOID:
		case REGOPEROID:
		case REGOPERATOROID:
		case REGCLASSOID:
		case REGCOLLATIONOID:
		case REGTYPEOID:
		case REGCONFIGOID:
		case REGDICTIONARYOID:
			return true;
		default:
			return false;
	}
}

/*
 * A reg* value's text with search_path pinned to pg_catalog, as the PL/pgSQL
 * capture (whose functions pin it) and the relay's sessions (pgoutput, snapshot
 * reads: pgshovel2.codec.textforms.SESSION_SETTINGS) write it: qualified unless
 * in pg_catalog, whatever the writer's search_path.
 */
static char *
pinned_output(ColumnCodec *codec, Datum value)
{
	int			nest = NewGUCNestLevel();
	char	   *text;

	(void) set_config_option("search_path", "pg_catalog", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	text = OutputFunctionCall(&codec->out, value);
	AtEOXact_GUC(true, nest);
	return text;
}

void
pgshovel2_codec_init(ColumnCodec *codec, Oid type_oid, MemoryContext mcxt)
{
	Oid			out_func;
	bool		is_varlena;
	Oid			elem_type;

	codec->base_type = getBaseType(type_oid);
	codec->elem = NULL;
	getTypeOutputInfo(type_oid, &out_func, &is_varlena);
	fmgr_info_cxt(out_func, &codec->out, mcxt);
	elem_type = get_element_type(codec->base_type);
	codec->pin_path = names_objects(codec->base_type) || (OidIsValid(elem_type) && names_objects(getBaseType(elem_type)));

	/*
	 * Arrays of a domain keep the text form: the relay maps their elements to
	 * strings (the catalog does not resolve an element's domain).
	 */
	if (OidIsValid(elem_type) && has_own_form(elem_type))
	{
		codec->elem = MemoryContextAlloc(mcxt, sizeof(ColumnCodec));
		pgshovel2_codec_init(codec->elem, elem_type, mcxt);
		codec->elem_type = elem_type;
		get_typlenbyvalalign(elem_type, &codec->elem_len, &codec->elem_byval, &codec->elem_align);
	}
}

/*
 * An array of element forms: a JSON array when it has one dimension with lower
 * bound 1 (or none: empty), else {"dims": [..], "lower_bounds": [..],
 * "elements": [..]} with the elements flat in storage (row-major) order.
 */
static void
encode_array(StringInfo buf, ColumnCodec *codec, Datum value)
{
	ArrayType  *arr = DatumGetArrayTypeP(value);
	int			ndim = ARR_NDIM(arr);
	bool		plain = ndim == 0 || (ndim == 1 && ARR_LBOUND(arr)[0] == 1);
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int			i;

	deconstruct_array(arr, codec->elem_type, codec->elem_len, codec->elem_byval,
					  codec->elem_align, &elems, &nulls, &n);
	if (!plain)
	{
		appendStringInfoString(buf, "{\"dims\":[");
		for (i = 0; i < ndim; i++)
			appendStringInfo(buf, i > 0 ? ",%d" : "%d", ARR_DIMS(arr)[i]);
		appendStringInfoString(buf, "],\"lower_bounds\":[");
		for (i = 0; i < ndim; i++)
			appendStringInfo(buf, i > 0 ? ",%d" : "%d", ARR_LBOUND(arr)[i]);
		appendStringInfoString(buf, "],\"elements\":");
	}
	appendStringInfoCharMacro(buf, '[');
	for (i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoCharMacro(buf, ',');
		pgshovel2_encode_value(buf, codec->elem, elems[i], nulls[i]);
	}
	appendStringInfoCharMacro(buf, ']');
	if (!plain)
		appendStringInfoCharMacro(buf, '}');
}

static void
encode_float(StringInfo buf, double value, bool is_float4)
{
	char		digits[64];

	if (isnan(value))
		appendStringInfoString(buf, "\"NaN\"");
	else if (isinf(value))
		appendStringInfoString(buf, value > 0 ? "\"Infinity\"" : "\"-Infinity\"");
	else if (value == 0 && signbit(value))
		appendStringInfoString(buf, "-0.0");	/* JSON readers take "-0" for the integer 0 */
	else
	{
		if (is_float4)
			float_to_shortest_decimal_buf((float) value, digits);
		else
			double_to_shortest_decimal_buf(value, digits);
		appendStringInfoString(buf, digits);
	}
}

static void
encode_bytea(StringInfo buf, Datum value)
{
	static const char hex[] = "0123456789abcdef";
	bytea	   *data = DatumGetByteaPP(value);
	const unsigned char *p = (const unsigned char *) VARDATA_ANY(data);
	int			len = VARSIZE_ANY_EXHDR(data);
	int			i;

	enlargeStringInfo(buf, len * 2 + 2);
	buf->data[buf->len++] = '"';
	for (i = 0; i < len; i++)
	{
		buf->data[buf->len++] = hex[p[i] >> 4];
		buf->data[buf->len++] = hex[p[i] & 0xf];
	}
	buf->data[buf->len++] = '"';
	buf->data[buf->len] = '\0';
}

void
pgshovel2_encode_value(StringInfo buf, ColumnCodec *codec, Datum value,
					   bool isnull)
{
	if (isnull)
	{
		appendBinaryStringInfo(buf, "null", 4);
		return;
	}
	switch (codec->base_type)
	{
		case BOOLOID:
			appendStringInfoString(buf, DatumGetBool(value) ? "true" : "false");
			break;
		case INT2OID:
			append_int64(buf, DatumGetInt16(value));
			break;
		case INT4OID:
			append_int64(buf, DatumGetInt32(value));
			break;
		case INT8OID:
			append_int64(buf, DatumGetInt64(value));
			break;
		case OIDOID:
			append_int64(buf, DatumGetObjectId(value));
			break;
		case FLOAT4OID:
			encode_float(buf, DatumGetFloat4(value), true);
			break;
		case FLOAT8OID:
			encode_float(buf, DatumGetFloat8(value), false);
			break;
		case DATEOID:			/* days since 2000-01-01 */
			append_int64(buf, DatumGetDateADT(value));
			break;
		case TIMEOID:			/* microseconds since midnight */
			append_int64(buf, DatumGetTimeADT(value));
			break;
		case TIMESTAMPOID:		/* microseconds since 2000-01-01 00:00 */
		case TIMESTAMPTZOID:
			append_int64(buf, DatumGetInt64(value));
			break;
		case INTERVALOID:
			{
				Interval   *iv = DatumGetIntervalP(value);

				appendStringInfoCharMacro(buf, '[');
				append_int64(buf, iv->month);
				appendStringInfoCharMacro(buf, ',');
				append_int64(buf, iv->day);
				appendStringInfoCharMacro(buf, ',');
				append_int64(buf, iv->time);
				appendStringInfoCharMacro(buf, ']');
				break;
			}
		case BYTEAOID:
			encode_bytea(buf, value);
			break;
		case TEXTOID:			/* their output functions copy the value as it is */
		case VARCHAROID:
		case BPCHAROID:
			{
				text	   *t = DatumGetTextPP(value);

				append_json_text(buf, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
				break;
			}
		case UUIDOID:
			encode_uuid(buf, DatumGetUUIDP(value));
			break;
		default:
			if (codec->elem)
				encode_array(buf, codec, value);
			else
				pgshovel2_json_string(buf, codec->pin_path ? pinned_output(codec, value)
									  : OutputFunctionCall(&codec->out, value));
	}
}

/* The values of tuple (NULL: none), in the current memory context. */
PgShovel2Row *
pgshovel2_deform(HeapTuple tuple, TupleDesc desc)
{
	PgShovel2Row *row;

	if (tuple == NULL)
		return NULL;
	row = palloc(sizeof(PgShovel2Row));
	row->values = palloc(Max(desc->natts, 1) * sizeof(Datum));
	row->nulls = palloc(Max(desc->natts, 1) * sizeof(bool));
	heap_deform_tuple(tuple, desc, row->values, row->nulls);
	return row;
}

/* The JSON array of row's columns attnums (natts of them), with their codecs, appended to buf. */
void
pgshovel2_encode_deformed(StringInfo buf, const PgShovel2Row *row, const int16 *attnums, int natts,
						  ColumnCodec *codecs)
{
	int			i;

	appendStringInfoCharMacro(buf, '[');
	for (i = 0; i < natts; i++)
	{
		if (i > 0)
			appendStringInfoCharMacro(buf, ',');
		pgshovel2_encode_value(buf, &codecs[i], row->values[attnums[i] - 1], row->nulls[attnums[i] - 1]);
	}
	appendStringInfoCharMacro(buf, ']');
}

void
pgshovel2_encode_tuple(StringInfo buf, HeapTuple tuple, TupleDesc desc,
					 const int16 *attnums, int natts, ColumnCodec *codecs)
{
	PgShovel2Row *row = pgshovel2_deform(tuple, desc);

	pgshovel2_encode_deformed(buf, row, attnums, natts, codecs);
	pfree(row->values);
	pfree(row->nulls);
	pfree(row);
}
