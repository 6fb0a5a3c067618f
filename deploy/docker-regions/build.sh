#!/bin/sh
# Builds the two-region rig's image: a static platformd built on the host,
# in a FROM-scratch image (nothing is pulled from a registry).
#
#   deploy/docker-regions/build.sh [TAG]        # default platformd-regions:dev
#
# It also writes the rig's TLS files (deploy/tlsgen) into
# $PLATFORM_DOCKER_SHARED/tls (default deploy/docker-regions/shared/tls)
# unless they exist.
#
# PLATFORM_DOCKER_UID and PLATFORM_DOCKER_GID set the runtime user (default 65532).
set -eu
tag=${1:-platformd-regions:dev}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$ctx/platformd" ./cmd/platformd)
cp "$here/Dockerfile" "$here/eu.yaml" "$here/us.yaml" "$ctx/"
mkdir -m 0700 "$ctx/data"
# The rig's TLS files (a throw-away CA; never committed), once: one node
# certificate for the names the nodes are dialled by.
shared=${PLATFORM_DOCKER_SHARED:-$here/shared}
if [ ! -f "$shared/tls/ca.pem" ]; then
  hosts=""
  for n in eu1 eu2 eu3 us1 us2 us3; do hosts="$hosts,$n,$n-link,$n-peer"; done
  (cd "$root" && go run ./deploy/tlsgen --dir "$shared/tls" --hosts "${hosts#,}")
fi
docker build -t "$tag" \
  --build-arg "UID=${PLATFORM_DOCKER_UID:-65532}" --build-arg "GID=${PLATFORM_DOCKER_GID:-65532}" \
  "$ctx"
