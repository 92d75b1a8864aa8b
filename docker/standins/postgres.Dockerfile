# Stand-in for the official postgres:15, made by scripts/compose-images from Debian's
# postgresql-15 when no image registry answers. It keeps what docker-compose.yml relies on:
# POSTGRES_DB, POSTGRES_USER and POSTGRES_PASSWORD make the database on first start, the data
# lives in /var/lib/postgresql/data (PGDATA), and pg_isready answers the health check.
ARG BASE
FROM ${BASE}
ARG SOURCE=postgres:15
LABEL org.computeshare.stand-in="true" \
      org.computeshare.stand-in-for="${SOURCE}" \
      org.opencontainers.image.description="Stand-in for ${SOURCE} built from Debian packages by scripts/compose-images; not the official image"
# No cluster of Debian's own layout: the entrypoint makes one in PGDATA.
RUN mkdir -p /etc/postgresql-common \
    && echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        postgresql-15 postgresql-client-15 \
    && rm -rf /var/lib/apt/lists/*
COPY postgres-entrypoint /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data \
    LANG=C.UTF-8
VOLUME /var/lib/postgresql/data
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
