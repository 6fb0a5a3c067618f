// Package units parses and prints the byte sizes and durations that
// configuration files and command lines use: "10GiB", "1 KB", "72h",
// "1h30m". Decimal units (KB, MB, GB, TB, PB) are powers of 1000, binary
// ones (KiB ... PiB) powers of 1024, as the design guide prints them.
package units
