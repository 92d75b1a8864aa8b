# Stand-in for the official node image of the Dockerfile's static stage, made by
# scripts/compose-images from Debian's nodejs and npm when no image registry answers. Debian
# bookworm's Node is older (18) than the official tag says; the static stage only runs
# `npm ci` to fetch the pages' libraries, which it does the same way.
ARG BASE
FROM ${BASE}
ARG SOURCE=node:20-bookworm-slim
LABEL org.computeshare.stand-in="true" \
      org.computeshare.stand-in-for="${SOURCE}" \
      org.opencontainers.image.description="Stand-in for ${SOURCE} built from Debian packages (Debian's nodejs, not ${SOURCE}'s version) by scripts/compose-images; not the official image"
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        nodejs npm ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# See python.Dockerfile: the building machine's CA bundle, for the npm registry.
COPY ca-bundle.crt /usr/local/share/computeshare-standin/ca-bundle.crt
ENV NODE_EXTRA_CA_CERTS=/usr/local/share/computeshare-standin/ca-bundle.crt
CMD ["node"]
