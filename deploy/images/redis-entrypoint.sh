#!/bin/sh
# Entry point of the redis stand-in image (deploy/images/build.sh): like the
# official image's, it runs redis-server with protected mode off, as the
# official image is built with that default (the other containers on the
# compose network are its clients), and passes any other command through.
set -e
if [ "${1#-}" != "$1" ]; then
	set -- redis-server "$@"
fi
if [ "$1" = redis-server ]; then
	shift
	exec redis-server --protected-mode no "$@"
fi
exec "$@"
