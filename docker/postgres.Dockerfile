# PostgreSQL 15 from Debian with PgQ, pgqd, the pgshovel2 capture extension (trigger backend) and the
# pgshovel2_decoder output plugin (logical backend), on Debian bookworm.
FROM debian:bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      postgresql-server-dev-15 build-essential \
    && rm -rf /var/lib/apt/lists/*
COPY sql/capture /src/capture
COPY sql/decoder /src/decoder
RUN for d in capture decoder; do \
      make -C /src/$d with_llvm=no && make -C /src/$d with_llvm=no install DESTDIR=/out || exit 1; done

FROM debian:bookworm
RUN apt-get update && apt-get install -y --no-install-recommends \
      postgresql-15 postgresql-15-pgq3 pgqd \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ /
COPY docker/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
VOLUME /var/lib/postgresql/data
USER postgres
EXPOSE 5432
ENTRYPOINT ["postgres-entrypoint"]
CMD ["postgres"]
