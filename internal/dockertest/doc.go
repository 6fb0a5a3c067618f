// Package dockertest holds the helpers of the Docker-based tests under
// deploy/: it builds the project's own images (the static platformd binary
// put into a fresh build context next to a deploy directory's Dockerfile)
// and runs them with compose (`docker compose`, else docker-compose v1.29)
// under a unique project name. Published ports are free ports on the
// loopback interface only; a test reaches its containers through them and
// never dials a container IP. Where no Docker engine or compose tool
// answers, or under -short, the test is skipped with a clear message.
// Everything a test creates (containers, volumes, networks, the image) is
// removed when it ends; on failure the compose logs are dumped first.
//
// The helpers take a testing.TB, report with Skip, Fatal and Error, and
// never panic.
package dockertest
