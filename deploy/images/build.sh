#!/usr/bin/env bash
# `make images`: builds the devmsg image from ./Dockerfile, tagged as
# docker-compose.yml runs it (devmsg:${VERSION:-dev}), after making sure the
# base images that the Dockerfile and docker-compose.yml name are there.
#
# Each base image is used as it is if the engine has it, else pulled. Where
# no registry answers, a local stand-in is built and tagged with the same
# name, so that the Dockerfile and docker-compose.yml are run unchanged:
#
#   golang:$GO_VERSION     a Debian bookworm root filesystem with the Go
#                          toolchain of that version at /usr/local/go
#   gcr.io/distroless/static-debian12:nonroot
#                          /etc/passwd and /etc/group with nonroot (65532),
#                          CA certificates and tzdata, nothing else
#   redis:7                Debian bookworm's redis-server and redis-cli
#   haproxy:2.9            Debian bookworm's haproxy (2.6, which reads
#                          deploy/haproxy.cfg as 2.9 does)
#
# The root filesystem is made with debootstrap from Debian's packages (run
# as root; apt-get install debootstrap) and kept in $DEVMSG_IMAGES_CACHE
# (default ~/.cache/devmsg-images), so it is made once. The Go toolchain is
# the host's when its version is the Dockerfile's, else that version
# fetched through the Go module proxy (GOTOOLCHAIN). Every stand-in carries
# the label devmsg.standin=true: `docker image ls -f label=devmsg.standin`
# lists them, and `docker rmi` of them lets a later run pull the real ones.
#
# The Dockerfile's build stage downloads the Go modules. The golang
# stand-in carries them, from the host's module cache, with GOPROXY=off
# (see standin_golang), so the build needs no network; a real golang image
# is never changed.
#
# Exit status 3: something needed to build a stand-in is missing (above).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=deploy/images
cache=${DEVMSG_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/devmsg-images}
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

go_version=$(sed -n 's/^ARG GO_VERSION=//p' Dockerfile)
golang=golang:$go_version
distroless=$(sed -n 's/^FROM \(gcr\.io\/[^ ]*\).*/\1/p' Dockerfile)
redis=$(sed -n 's/^ *image: \(redis:[^ ]*\)$/\1/p' docker-compose.yml)
haproxy=$(sed -n 's/^ *image: \(haproxy:[^ ]*\)$/\1/p' docker-compose.yml)
for v in go_version distroless redis haproxy; do
	if [ -z "${!v}" ]; then
		echo "images: cannot find the $v image in the Dockerfile or docker-compose.yml" >&2
		exit 1
	fi
done

log() { echo "images: $*" >&2; }

have() { docker image inspect "$1" >/dev/null 2>&1; }

is_standin() { [ "$(docker image inspect -f '{{index .Config.Labels "devmsg.standin"}}' "$1" 2>/dev/null)" = true ]; }

# present IMAGE: true once the engine has IMAGE, pulling it if it can.
present() {
	have "$1" && return 0
	log "pulling $1"
	docker pull -q "$1" >/dev/null 2>&1 && return 0
	log "$1 cannot be pulled; building a local stand-in"
	return 1
}

# rootfs makes the debootstrapped Debian root filesystem, as the tar file
# $rootfs_tar, unless it is there. (Not called in a subshell, so that its
# exit 3 ends the script.)
rootfs_tar=$cache/$suite-rootfs.tar
rootfs() {
	local tar=$rootfs_tar
	if [ ! -s "$tar" ]; then
		if ! command -v debootstrap >/dev/null || [ "$(id -u)" != 0 ]; then
			log "building stand-ins needs debootstrap, run as root (apt-get install debootstrap)"
			exit 3
		fi
		mkdir -p "$cache"
		local dir
		dir=$(mktemp -d "$cache/rootfs.XXXXXX")
		log "debootstrap $suite into $dir"
		debootstrap --variant=minbase --include=ca-certificates,tzdata,redis-server,redis-tools,haproxy \
			"$suite" "$dir" "$mirror" >"$dir.log" 2>&1 || {
			log "debootstrap failed; its log: $dir.log"
			exit 1
		}
		rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
		tar -C "$dir" --numeric-owner -cf "$tar.tmp" .
		mv "$tar.tmp" "$tar"
		rm -rf "$dir" "$dir.log"
	fi
}

base=devmsg-standin/debian:$suite

standin_base() {
	have "$base" && return
	log "importing $base"
	rootfs
	docker import -c 'CMD ["bash"]' -c 'LABEL devmsg.standin=true' "$rootfs_tar" "$base" >/dev/null
}

# build TAG DOCKERFILE [EXTRA-FILE...]: a stand-in from a Dockerfile in
# deploy/images, with the named files beside it as the context.
build() {
	local tag=$1 file=$2
	shift 2
	docker build -q --force-rm -t "$tag" --build-arg BASE="$base" -f "$here/$file" "$@" >/dev/null
}

standin_distroless() {
	# Only a few files of the root filesystem, imported on their own:
	# there is no shell in it.
	local tmp
	rootfs
	tmp=$(mktemp -d)
	tar -C "$tmp" -xf "$rootfs_tar" ./etc/ssl/certs/ca-certificates.crt ./usr/share/zoneinfo
	mkdir -p "$tmp/tmp" "$tmp/home/nonroot" "$tmp/root"
	chmod 1777 "$tmp/tmp"
	chown 65532:65532 "$tmp/home/nonroot"
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$tmp/etc/passwd"
	printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$tmp/etc/group"
	tar -C "$tmp" --numeric-owner -c . | docker import \
		-c 'USER 65532' -c 'WORKDIR /home/nonroot' -c 'LABEL devmsg.standin=true' \
		-c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		-c 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' - "$distroless" >/dev/null
	rm -rf "$tmp"
}

# The golang stand-in is two images: the toolchain on the Debian root
# filesystem (devmsg-standin/go:$go_version, made once), and on top of it
# the modules of go.sum with GOPROXY=off (tagged $golang), made again when
# go.mod or go.sum change. The build container may have no way to the
# module proxy (no route, or a TLS-intercepting proxy whose CA only the
# host trusts), so the build gets its modules from the host.
standin_go() {
	local img=devmsg-standin/go:$go_version
	have "$img" && return
	local goroot
	goroot=$(GOTOOLCHAIN=go$go_version go env GOROOT 2>/dev/null) || {
		log "no Go $go_version toolchain: the golang stand-in needs one (go, with GOTOOLCHAIN)"
		exit 3
	}
	if [ "$("$goroot/bin/go" env GOVERSION)" != "go$go_version" ]; then
		log "no Go $go_version toolchain (found $goroot)"
		exit 3
	fi
	standin_base
	log "$img from $goroot"
	local tmp
	tmp=$(mktemp -d)
	cp "$here/golang.Dockerfile" "$tmp/Dockerfile"
	# The toolchain goes in as the build context; only what a build needs.
	tar -C "$tmp" -c Dockerfile -C "$goroot/.." --anchored --exclude=go/test --exclude=go/doc --exclude=go/api \
		--transform 's,^[^/]*/,go/,' "$(basename "$goroot")" |
		docker build -q --force-rm -t "$img" --build-arg BASE="$base" --build-arg GO_VERSION="$go_version" - >/dev/null
	rm -rf "$tmp"
}

# modules_sum names the modules and the recipe of the layer below.
modules_sum() { { cat go.mod go.sum third_party/mochi-mqtt/go.mod third_party/mochi-mqtt/go.sum; echo warm-v1; } | sha256sum | cut -c1-16; }

standin_golang() {
	local sum
	sum=$(modules_sum)
	if have "$golang" && [ "$(docker image inspect -f '{{index .Config.Labels "devmsg.modules"}}' "$golang")" = "$sum" ]; then
		return
	fi
	standin_go
	log "$golang: devmsg-standin/go:$go_version with the modules of go.sum"
	go mod download
	local tmp modcache
	tmp=$(mktemp -d)
	modcache=$(go env GOMODCACHE)
	# Every module version go.sum names, in the module proxy's layout
	# (upper case letters escaped as !x), which is the module cache's.
	awk '{sub("/go.mod$", "", $2); print $1, $2}' go.sum | sort -u | while read -r path version; do
		local esc
		esc=$(printf '%s' "$path" | sed 's/[A-Z]/!\L&/g')
		mkdir -p "$tmp/cache/download/$esc/@v"
		cp "$modcache/cache/download/$esc/@v/$version".* "$tmp/cache/download/$esc/@v/" 2>/dev/null || true
	done
	# A warm build cache: the packages devmsg imports from other modules,
	# built as the Dockerfile builds them, so that a build of the image
	# compiles only devmsg's own packages.
	mkdir -p "$tmp/warm/third_party"
	cp go.mod go.sum "$tmp/warm/"
	cp -r third_party/mochi-mqtt "$tmp/warm/third_party/"
	CGO_ENABLED=0 go list -deps -f '{{if and (not .Standard) .Module}}{{if ne .Module.Path "github.com/devmsg/devmsg"}}{{.ImportPath}}{{end}}{{end}}' ./cmd/devmsg |
		grep . >"$tmp/warm/packages"
	printf '%s\n' 'ARG FROM' 'FROM $FROM' 'COPY cache /go/pkg/mod/cache' 'ENV GOPROXY=off' 'COPY warm /tmp/warm' \
		'RUN cd /tmp/warm && CGO_ENABLED=0 go build -trimpath $(cat packages) && rm -rf /tmp/warm' \
		"LABEL devmsg.standin=true devmsg.modules=$sum" >"$tmp/Dockerfile"
	docker build -q --force-rm -t "$golang" --build-arg FROM="devmsg-standin/go:$go_version" "$tmp" >/dev/null
	rm -rf "$tmp"
}

# A golang stand-in is brought up to date with go.sum; a real image is
# left as it is.
if is_standin "$golang" || ! present "$golang"; then
	standin_golang
fi
present "$distroless" || standin_distroless
if ! present "$redis"; then
	standin_base
	build "$redis" redis.Dockerfile "$here"
fi
if ! present "$haproxy"; then
	standin_base
	build "$haproxy" haproxy.Dockerfile "$here"
fi

tag=devmsg:${VERSION:-dev}
log "building $tag"
docker build --force-rm -t "$tag" --build-arg VERSION="$(git describe --tags --always --dirty 2>/dev/null || echo dev)" .
