/*
 * capture_args.h - the capture trigger's arguments, parsed once per trigger and backend.
 */
#ifndef PGSHOVEL2_CAPTURE_ARGS_H
#define PGSHOVEL2_CAPTURE_ARGS_H

#include "postgres.h"

#include "commands/trigger.h"

#include "encode.h"

/* pgshovel2.capture(queue, table_tag, captured_attnums, key_attnums, mode), parsed. */
typedef struct CaptureArgs
{
	const char *queue;
	const char *table_tag;
	int			ncols;
	int16	   *attnums;
	ColumnCodec *codecs;
	int			nkeys;
	int16	   *keys;
	bool		subset;
	bool		before_always;
} CaptureArgs;

/*
 * The arguments of the trigger tg fires, parsed against its table's columns; kept until the
 * table's relcache entry is invalidated (DDL on the table, its triggers changed). ERROR when they
 * do not fit the table.
 */
extern CaptureArgs *pgshovel2_capture_args(TriggerData *tg);

#endif
