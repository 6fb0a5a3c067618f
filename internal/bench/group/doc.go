// Package group measures consumer groups against raw consume and ack on
// the same topic in the same run: drain throughput from a gate opened
// once every client fetches (joining is not counted), and the rebalance
// pause per moved partition when a member dies without leaving.
package group
