#!/bin/sh
# Builds the platformd image: a static binary built on the host, in a
# FROM-scratch image (no image registry is needed).
#
#   deploy/docker/build.sh [TAG]        # default platformd:dev
#
# It also writes the rig's TLS files (deploy/tlsgen: a throw-away CA, the
# nodes' certificate) into $PLATFORM_DOCKER_SHARED/tls (default
# deploy/docker/shared/tls) unless they exist.
#
# PLATFORM_DOCKER_UID and PLATFORM_DOCKER_GID set the image's runtime user (default 65532).
set -eu
tag=${1:-platformd:dev}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$ctx/platformd" ./cmd/platformd)
cp "$here/Dockerfile" "$here/node.yaml" "$ctx/"
mkdir -m 0700 "$ctx/data"
# The rig's TLS files (a throw-away CA; never committed), once.
shared=${PLATFORM_DOCKER_SHARED:-$here/shared}
if [ ! -f "$shared/tls/ca.pem" ]; then
  (cd "$root" && go run ./deploy/tlsgen --dir "$shared/tls" --hosts n1,n2,n3)
fi
docker build -t "$tag" \
  --build-arg "UID=${PLATFORM_DOCKER_UID:-65532}" --build-arg "GID=${PLATFORM_DOCKER_GID:-65532}" \
  "$ctx"
