/*
 * snapshot_row.c - pgshovel2_decoder.encode_row(record, int2[]): a row in the
 * plugin's row-image form (the capture trigger's JSON array, encode.c), so the
 * relay's snapshot rows and streamed changes go through the same code.
 */
#include "postgres.h"

#include "fmgr.h"

#include "decoder.h"

PG_FUNCTION_INFO_V1(pgshovel2_decoder_encode_row);

Datum
pgshovel2_decoder_encode_row(PG_FUNCTION_ARGS)
{
	return pgshovel2_encode_row_text(fcinfo);	/* sql/capture/encode_row.c */
}
