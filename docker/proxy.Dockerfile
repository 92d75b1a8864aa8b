# The stack's proxy (docker-compose.yml, `proxy`): Debian's nginx in front of the `web`
# containers, one published port for however many of them `--scale web=N` starts. Built from
# Debian's package on debian:12 (pulled, or scripts/compose-images' stand-in where no registry
# answers), like the stand-ins; the configuration is docker/proxy.conf.
FROM debian:12
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx-light \
    && rm -rf /var/lib/apt/lists/* /etc/nginx/sites-enabled /etc/nginx/conf.d
COPY docker/proxy.conf /etc/nginx/nginx.conf
EXPOSE 8000
STOPSIGNAL SIGQUIT
CMD ["nginx", "-g", "daemon off;"]
