# Stand-in for the official haproxy image (deploy/images/build.sh): Debian's
# haproxy, run as the haproxy user with its configuration at
# /usr/local/etc/haproxy/haproxy.cfg, like the official image.
ARG BASE
FROM ${BASE}
COPY haproxy-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN mkdir -p /usr/local/etc/haproxy /var/lib/haproxy && chown haproxy:haproxy /var/lib/haproxy
USER haproxy
WORKDIR /var/lib/haproxy
STOPSIGNAL SIGUSR1
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["haproxy", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
LABEL devmsg.standin=true
