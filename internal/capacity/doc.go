// Package capacity turns a handful of planning inputs into the capacity table
// of the HarborCart design guide: ingest bandwidth, daily and retained
// storage with replication, group deliveries, broker egress, consumers per
// group against the partition count, the ten-minute promotion burst, and the
// backlog of an outage with the time to drain it.
//
// It is pure arithmetic: no I/O, no clock, no randomness. [Compute] is a
// function of its [Inputs] alone, so the same inputs always print the same
// table, which is what the golden-file tests of platformctl rely on. The
// figures are planning inputs, not measurements; in particular the
// per-consumer rate is hypothetical until it is measured, and the storage
// figures are a floor that excludes indexes, segment overhead and headroom.
//
// Units follow the guide:
//   - rates are events per second; sizes are bytes ([ParseSize] accepts
//     1024, 1KiB, 1 KiB, 1KB, 10MiB, ...; KB, MB, GB and TB are decimal,
//     KiB, MiB, GiB and TiB binary);
//   - bandwidth is printed in MiB/s, daily storage in decimal TB and TiB,
//     retained storage in TiB and bursts in GiB, always in the same unit for
//     a given row so that a tenfold event size prints tenfold figures;
//   - every result is computed from exact values and only rounded when
//     printed (two decimals, three for the per-day row); the computation
//     column shows the rounded operands the guide shows.
//
// [Inputs.Validate] reports every problem at once, each naming the field by
// its platformctl flag (rate, peak, size, ...); [Compute] requires inputs
// that passed it.
package capacity
