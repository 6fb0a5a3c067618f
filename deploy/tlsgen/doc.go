// Command tlsgen writes a throw-away CA and the certificates of a Docker
// rig (deploy/docker, deploy/docker-regions) into a directory the rig
// mounts read-only at /tls:
//
//	go run ./deploy/tlsgen --dir deploy/docker/shared/tls --hosts n1,n2,n3
//
// ca.pem, node.pem and node-key.pem (one certificate for every node, valid
// for --hosts and loopback), client.pem and client-key.pem (a client
// certificate). Keys are written 0600: hand the directory to the
// containers' user (chown -R 65532:65532). Nothing it writes is meant to
// be kept or committed; run it again for a new CA.
package main
