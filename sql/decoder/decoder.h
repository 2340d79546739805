/*
 * decoder.h - pgshovel2_decoder, the output plugin of the `logical` backend.
 *
 * The set's tables are passed as the plugin option "tables" (see options.c);
 * each gets a ShovelTable with its captured attnums and value codecs.
 */
#ifndef PGSHOVEL2_DECODER_H
#define PGSHOVEL2_DECODER_H

#include "postgres.h"
#include "fmgr.h"
#include "access/htup_details.h"
#include "access/tupconvert.h"
#include "nodes/pg_list.h"
#include "lib/stringinfo.h"
#include "replication/logical.h"
#include "utils/rel.h"

#include "encode.h"

/* One table of the set, in the order of the "tables" option (its index). */
typedef struct ShovelTable
{
	Oid			relid;
	bool		all;			/* mode all ("<oid>*:"): every live column is captured */
	int			ncols;
	int			cap;			/* allocated length of attnums, codecs */
	int16	   *attnums;		/* captured columns, attnum order */
	ColumnCodec *codecs;		/* initialised when the layout is written (layout.c) */
	TupleDesc	sent;			/* the descriptor of the last layout record written (NULL: none) */
} ShovelTable;

/* Plugin state, one per decoding session (ctx->output_plugin_private). */
typedef struct DecoderState
{
	MemoryContext context;		/* long-lived: tables, codecs */
	MemoryContext change_cxt;	/* reset after every change */
	int			ntables;
	ShovelTable *tables;
	bool		begun;			/* BEGIN of the current transaction written */
	uint64		full_xid;		/* epoch-qualified xid of the current transaction */
	uint32		nchanges;		/* records written in the current transaction */
	StringInfo	pack_buf;		/* format 4: the pack being filled (NULL: format 3, no packs) */
	StringInfo	pack;			/* pack_buf inside a transaction written in packs, else NULL */
	int			record_at;		/* where the record being written starts in the pack */
} DecoderState;

/* decoder.c: records (a transaction's BEGIN written first, a table's layout before its rows) */
extern StringInfo pgshovel2_start_record(LogicalDecodingContext *ctx);
extern void pgshovel2_end_record(LogicalDecodingContext *ctx);
extern void pgshovel2_ensure_begin(LogicalDecodingContext *ctx, ReorderBufferTXN *txn);
extern void pgshovel2_ensure_layout(LogicalDecodingContext *ctx, ShovelTable *t, int index, Relation rel);

/* options.c */
extern void pgshovel2_parse_tables(DecoderState *state, const char *spec);
extern ShovelTable *pgshovel2_find_table(DecoderState *state, Oid relid, int *index);

/* partitions.c: a leaf partition's changes decoded as changes of its top-most ancestor in the set */
extern void pgshovel2_routes_init(MemoryContext mcxt);
extern void pgshovel2_routes_done(void);
extern void pgshovel2_routes_reset(void);
extern bool pgshovel2_route(DecoderState *state, Relation leaf, int *index, Oid *ancestor,
							TupleConversionMap **map);

/* rows.c: rows a TRUNCATE, ATTACH or DETACH of a partition moved (logical messages), as DELETE/INSERT records */
extern void pgshovel2_rows_message(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
								   XLogRecPtr lsn, Size size, const char *message);

/* layout.c */
extern bool pgshovel2_layout_changed(ShovelTable *t, TupleDesc desc);
extern void pgshovel2_write_layout(StringInfo out, ShovelTable *t, int index, Relation rel,
								   MemoryContext mcxt);

#endif
