#!/bin/sh
# Entry point of the haproxy stand-in image (deploy/images/build.sh): like the
# official image's, it runs haproxy in master-worker mode in the foreground
# (-W -db), logging to stdout, and passes any other command through.
set -e
if [ "${1#-}" != "$1" ]; then
	set -- haproxy "$@"
fi
if [ "$1" = haproxy ]; then
	shift
	set -- haproxy -W -db "$@"
fi
exec "$@"
