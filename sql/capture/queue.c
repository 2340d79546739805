/*
 * queue.c - insert an event into a PgQ queue without going through
 * pgq.insert_event(): the queue's current event table and an INSERT plan for
 * it are looked up once per transaction and queue, not once per event.
 *
 * Reading queue_cur_table once per transaction is what pgq.insert_event()
 * itself gives a REPEATABLE READ transaction; PgQ's rotation only truncates
 * an event table after every transaction that could still insert into it has
 * ended, so the table stays valid for the rest of the transaction.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "queue.h"

typedef struct QueueCache
{
	struct QueueCache *next;
	char	   *queue;
	LocalTransactionId lxid;	/* transaction the lookup below belongs to */
	char	   *table;			/* e.g. pgq.event_2_1 */
	SPIPlanPtr	plan;
} QueueCache;

static QueueCache *queue_caches = NULL;
static SPIPlanPtr queue_info_plan = NULL;

#define QUEUE_INFO_SQL \
	"SELECT queue_data_pfx || '_' || queue_cur_table, queue_event_seq," \
	" queue_disable_insert FROM pgq.queue WHERE queue_name = $1"

static QueueCache *
find_cache(const char *queue)
{
	QueueCache *qc;

	for (qc = queue_caches; qc; qc = qc->next)
		if (strcmp(qc->queue, queue) == 0)
			return qc;
	qc = MemoryContextAllocZero(TopMemoryContext, sizeof(QueueCache));
	qc->queue = MemoryContextStrdup(TopMemoryContext, queue);
	qc->lxid = InvalidLocalTransactionId;
	qc->next = queue_caches;
	queue_caches = qc;
	return qc;
}

static SPIPlanPtr
prepare_insert(const char *table, const char *seq)
{
	Oid			types[4] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID};
	StringInfoData sql;
	SPIPlanPtr	plan;

	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "INSERT INTO %s (ev_id, ev_time, ev_type, ev_data, ev_extra1,"
					 " ev_extra2) VALUES (nextval(%s), now(), $1, $2, $3, $4)",
					 table, quote_literal_cstr(seq));
	plan = SPI_prepare(sql.data, 4, types);
	if (plan == NULL)
		elog(ERROR, "pgshovel2: cannot prepare insert into %s", table);
	SPI_keepplan(plan);
	return plan;
}

static void
refresh_cache(QueueCache *qc)
{
	Oid			types[1] = {TEXTOID};
	Datum		args[1];
	bool		isnull;
	char	   *table;
	char	   *seq;

	if (queue_info_plan == NULL)
	{
		queue_info_plan = SPI_prepare(QUEUE_INFO_SQL, 1, types);
		if (queue_info_plan == NULL)
			elog(ERROR, "pgshovel2: cannot prepare PgQ queue lookup");
		SPI_keepplan(queue_info_plan);
	}
	args[0] = CStringGetTextDatum(qc->queue);
	if (SPI_execute_plan(queue_info_plan, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "pgshovel2: PgQ queue lookup failed");
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("pgshovel2: PgQ queue \"%s\" does not exist", qc->queue),
				 errhint("Drop the capture triggers or recreate the replication set.")));
	if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull)))
		ereport(ERROR,
				(errmsg("pgshovel2: inserts into PgQ queue \"%s\" are disabled", qc->queue)));
	table = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	seq = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);

	if (qc->table == NULL || strcmp(qc->table, table) != 0)
	{
		if (qc->plan)
			SPI_freeplan(qc->plan);
		qc->plan = NULL;
		if (qc->table)
			pfree(qc->table);
		qc->table = MemoryContextStrdup(TopMemoryContext, table);
		qc->plan = prepare_insert(table, seq);
	}
	qc->lxid = MyProc->lxid;
}

void
pgshovel2_queue_insert(const char *queue, const char *ev_type,
					   const char *ev_data, const char *ev_extra1,
					   const char *ev_extra2)
{
	QueueCache *qc = find_cache(queue);
	const char *fields[4] = {ev_type, ev_data, ev_extra1, ev_extra2};
	Datum		values[4];
	char		nulls[4];
	int			i;

	if (qc->lxid != MyProc->lxid || qc->plan == NULL)
		refresh_cache(qc);
	for (i = 0; i < 4; i++)
	{
		nulls[i] = fields[i] ? ' ' : 'n';
		values[i] = fields[i] ? CStringGetTextDatum(fields[i]) : (Datum) 0;
	}
	if (SPI_execute_plan(qc->plan, values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "pgshovel2: insert into PgQ queue \"%s\" failed", queue);
}
