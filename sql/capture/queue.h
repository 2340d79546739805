/*
 * queue.h - append events to a PgQ queue's current event table.
 */
#ifndef PGSHOVEL2_QUEUE_H
#define PGSHOVEL2_QUEUE_H

#include "postgres.h"

/* One event; NULL strings become NULL fields. ERROR when the queue is gone, disabled or not writable. */
extern void pgshovel2_queue_insert(const char *queue, const char *ev_type,
								   const char *ev_data, const char *ev_extra1,
								   const char *ev_extra2);

#endif
