# devmsg container image: a static binary on distroless, running as a
# non-root user.
#
#   docker build -t devmsg --build-arg VERSION=$(git describe --tags --always --dirty) .
#   docker run -p 8443:8443 -p 1883:1883 -p 8883:8883 -p 8083:8083 -v devmsg-data:/var/lib/devmsg devmsg
#
# docker-compose.yml runs three of these against one Redis behind HAProxy;
# docs/operations.md explains the set-up.

# The Go version of go.mod's go line.
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
# Fail instead of downloading another toolchain if the image and go.mod
# ever disagree.
ENV GOTOOLCHAIN=local
WORKDIR /src
# Modules first, so a source change does not download them again. go.mod
# replaces mochi-mqtt with the patched copy in third_party, whose go.mod
# the download needs.
COPY go.mod go.sum ./
COPY third_party/mochi-mqtt/go.mod third_party/mochi-mqtt/go.sum ./third_party/mochi-mqtt/
RUN go mod download
COPY . .
# `devmsg version` prints this.
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/devmsg ./cmd/devmsg
# The data directory, created here because the final image has no shell.
RUN mkdir -p /out/data

# static-debian12 has CA certificates (callbacks POST to https URLs),
# tzdata and /etc/passwd entries, and nothing else: no shell, no package
# manager. The nonroot tag runs as uid and gid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/devmsg /devmsg
# A named volume mounted here starts as a copy of this directory, owner
# included, so the non-root user can write to it.
COPY --from=build --chown=65532:65532 /out/data /var/lib/devmsg
USER 65532:65532
# data_dir holds the embedded store (store.type embedded) and the
# generated TLS certificate (both store types). The environment overrides
# data_dir in a config file (docs/configuration.md: file, then env, then
# flags), so change it here with -e DEVMSG_DATA_DIR=..., not in the file.
ENV DEVMSG_DATA_DIR=/var/lib/devmsg
VOLUME ["/var/lib/devmsg"]
# http.addr (HTTPS: REST API, admin API, console, /healthz, /readyz,
# /metrics), then mqtt.tcp_addr, mqtt.tls_addr and mqtt.ws_addr.
EXPOSE 8443 1883 8883 8083
# No HEALTHCHECK here: it must know the node's config (http.addr, TLS).
# `devmsg healthcheck` with the same --config as serve asks the node's own
# GET /readyz (distroless has no shell or curl); docker-compose.yml runs
# it. The load balancer in deploy/haproxy.cfg checks GET /readyz itself.
# SIGTERM lets requests in flight finish for up to 30 s; give the container
# that long to stop (docker stop -t 40, compose stop_grace_period: 40s).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/devmsg", "serve"]
