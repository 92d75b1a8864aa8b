# Stand-in for the official python:3.11-slim-bookworm, made by scripts/compose-images from
# Debian's own packages when no image registry answers. Debian bookworm's python3 is 3.11.
# The official image keeps its Python in /usr/local; here it is Debian's in /usr, linked
# from /usr/local/bin, with pip allowed to install there as in the official image.
ARG BASE
FROM ${BASE}
ARG SOURCE=python:3.11-slim-bookworm
LABEL org.computeshare.stand-in="true" \
      org.computeshare.stand-in-for="${SOURCE}" \
      org.opencontainers.image.description="Stand-in for ${SOURCE} built from Debian packages by scripts/compose-images; not the official image"
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-pip python3-venv ca-certificates netbase tzdata \
    && rm -rf /var/lib/apt/lists/* \
    && rm -f /usr/lib/python3.11/EXTERNALLY-MANAGED \
    && ln -s /usr/bin/python3 /usr/local/bin/python \
    && ln -s /usr/bin/pip3 /usr/local/bin/pip
# The CA bundle of the machine that built this stand-in: where that machine reaches PyPI
# through a TLS-inspecting gateway, Debian's stock bundle does not verify PyPI's certificate.
COPY ca-bundle.crt /usr/local/share/computeshare-standin/ca-bundle.crt
ENV LANG=C.UTF-8 \
    SSL_CERT_FILE=/usr/local/share/computeshare-standin/ca-bundle.crt \
    PIP_CERT=/usr/local/share/computeshare-standin/ca-bundle.crt \
    REQUESTS_CA_BUNDLE=/usr/local/share/computeshare-standin/ca-bundle.crt
CMD ["python3"]
