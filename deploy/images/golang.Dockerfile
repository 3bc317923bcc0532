# Stand-in for the official golang image (deploy/images/build.sh): the
# Debian root filesystem with the Go toolchain at /usr/local/go and the
# same environment as the official image.
ARG BASE
FROM ${BASE}
ARG GO_VERSION
COPY go /usr/local/go
ENV GOLANG_VERSION=${GO_VERSION} GOTOOLCHAIN=local GOPATH=/go \
    PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN mkdir -p /go/src /go/bin && chmod -R 1777 /go
WORKDIR /go
LABEL devmsg.standin=true
