# Stand-in for the official redis:7, made by scripts/compose-images from Debian's redis-server
# (7.0) when no image registry answers: same commands (redis-server, redis-cli), same /data,
# and, as the official entrypoint does, protected mode off when started without a config file
# so that the other containers may connect.
ARG BASE
FROM ${BASE}
ARG SOURCE=redis:7
LABEL org.computeshare.stand-in="true" \
      org.computeshare.stand-in-for="${SOURCE}" \
      org.opencontainers.image.description="Stand-in for ${SOURCE} built from Debian packages by scripts/compose-images; not the official image"
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data && chown redis:redis /data
COPY redis-entrypoint /usr/local/bin/docker-entrypoint.sh
WORKDIR /data
VOLUME /data
EXPOSE 6379
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["redis-server"]
