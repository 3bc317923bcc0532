# Stand-in for the official redis image (deploy/images/build.sh): Debian's
# redis-server and redis-cli, run as the redis user in /data, like the
# official image.
ARG BASE
FROM ${BASE}
COPY redis-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN mkdir /data && chown redis:redis /data
VOLUME /data
WORKDIR /data
USER redis
ENTRYPOINT ["docker-entrypoint.sh"]
EXPOSE 6379
CMD ["redis-server"]
LABEL devmsg.standin=true
