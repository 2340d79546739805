/*
 * partitions.c - changes of a partition go to the set's table it belongs to, as pgoutput's
 * publish_via_partition_root does: a leaf partition's changes are decoded as changes of its
 * top-most ancestor in the set ("tables" option), their tuples converted to the ancestor's
 * descriptor by column name (a partition's attnums need not be the ancestor's: a dropped column
 * of the ancestor before the partition was created, a table of another column order attached).
 *
 * The route of a leaf (the ancestor's index in the set, the conversion map) is kept per leaf
 * relid until a relcache invalidation of the leaf (ATTACH/DETACH PARTITION and DDL on the
 * ancestor, which recurses to its partitions, send one) or a new "tables" (set version).
 */
#include "postgres.h"

#include "access/tupconvert.h"
#include "catalog/partition.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "decoder.h"

typedef struct PartitionRoute
{
	Oid			leaf;			/* hash key */
	bool		valid;
	int			index;			/* the ancestor's index in the set's tables; -1: not in the set */
	Oid			ancestor;
	MemoryContext mcxt;			/* holds map (NULL: none) */
	TupleConversionMap *map;	/* leaf -> ancestor; NULL when the descriptors match */
} PartitionRoute;

/* One decoding session per walsender: the routes of its DecoderState (NULL outside a session). */
static HTAB *routes = NULL;
static bool callback_registered = false;

static void
invalidate(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	PartitionRoute *route;

	if (routes == NULL)
		return;
	hash_seq_init(&status, routes);
	while ((route = hash_seq_search(&status)) != NULL)
		if (!OidIsValid(relid) || route->leaf == relid || route->ancestor == relid)
			route->valid = false;
}

void
pgshovel2_routes_init(MemoryContext mcxt)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(PartitionRoute);
	ctl.hcxt = mcxt;
	routes = hash_create("pgshovel2_decoder partition routes", 32, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(invalidate, (Datum) 0);
		callback_registered = true;
	}
}

void
pgshovel2_routes_done(void)
{
	routes = NULL;				/* freed with the context it lives in */
}

void
pgshovel2_routes_reset(void)
{
	invalidate((Datum) 0, InvalidOid);
}

/* Compute route for leaf (a partition) against the set's tables. */
static void
compute(DecoderState *state, PartitionRoute *route, Relation leaf, MemoryContext parent)
{
	List	   *ancestors = get_partition_ancestors(RelationGetRelid(leaf));
	ListCell   *lc;
	int			index;

	if (route->mcxt != NULL)
		MemoryContextDelete(route->mcxt);
	route->mcxt = NULL;
	route->map = NULL;
	route->index = -1;
	route->ancestor = InvalidOid;
	foreach(lc, ancestors)		/* nearest first: the last one in the set is the top-most */
	{
		if (pgshovel2_find_table(state, lfirst_oid(lc), &index) != NULL)
		{
			route->index = index;
			route->ancestor = lfirst_oid(lc);
		}
	}
	list_free(ancestors);
	if (route->index >= 0)
	{
		Relation	ancestor = RelationIdGetRelation(route->ancestor);
		MemoryContext old;

		if (!RelationIsValid(ancestor))
			elog(ERROR, "pgshovel2_decoder: could not open relation %u (an ancestor of \"%s\")",
				 route->ancestor, RelationGetRelationName(leaf));
		route->mcxt = AllocSetContextCreate(parent, "pgshovel2_decoder route", ALLOCSET_SMALL_SIZES);
		old = MemoryContextSwitchTo(route->mcxt);
		route->map = convert_tuples_by_name(RelationGetDescr(leaf), RelationGetDescr(ancestor));
		MemoryContextSwitchTo(old);
		RelationClose(ancestor);
	}
	route->valid = true;
}

bool
pgshovel2_route(DecoderState *state, Relation leaf, int *index, Oid *ancestor, TupleConversionMap **map)
{
	PartitionRoute *route;
	Oid			relid = RelationGetRelid(leaf);
	bool		found;

	if (!leaf->rd_rel->relispartition || routes == NULL)
		return false;
	route = hash_search(routes, &relid, HASH_ENTER, &found);
	if (!found)
	{
		route->valid = false;
		route->mcxt = NULL;
		route->ancestor = InvalidOid;
	}
	if (!route->valid)
		compute(state, route, leaf, state->context);
	if (route->index < 0)
		return false;
	*index = route->index;
	*ancestor = route->ancestor;
	*map = route->map;
	return true;
}
