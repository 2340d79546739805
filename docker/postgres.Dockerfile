# PostgreSQL 15 with PgQ, pgqd, the pgshovel2 capture extension (trigger backend) and the
# pgshovel2_decoder output plugin (logical backend).
FROM postgres:15-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends \
      postgresql-15-pgq3 pgqd postgresql-server-dev-15 build-essential \
    && rm -rf /var/lib/apt/lists/*
COPY sql/capture /src/capture
COPY sql/decoder /src/decoder
RUN for d in capture decoder; do make -C /src/$d with_llvm=no && make -C /src/$d with_llvm=no install || exit 1; done
