// Package machines is DSP's multi-machine layout: one directory per
// machine (`strata partition --machines M`) and the feature service
// through which the machines read each other's rows.
//
// A machine directory (dir.go) holds what one machine needs and nothing
// more: the whole topology (every machine samples locally), renumbered
// by the partition so that machine m's devices own one contiguous range
// of node IDs; the labels and splits; the feature rows of that range
// (the machine's shard); the hot rows (hot.go: the globally hottest
// rows by the cache plan's hotness, the same set on every machine, up to
// a byte budget; the directory holds those another machine owns); the
// partition book (partition.bin); and machine.json, which names the
// partition (and the hot set) by a fingerprint. A training process loads
// only its machine's directory: no machine reads every feature row from
// disk.
//
// Rows that are neither the machine's nor hot are asked of the machine
// owning them (source.go): every process serves its machine's shard
// (only its shard) through the serve package's gRPC Features RPC, the
// addresses are exchanged through the job's rendezvous store, off
// loopback over mutual TLS (the job's certificates), on loopback with a
// shared secret. A batch's missing rows are deduplicated and asked of
// their owners at once, each machine's split into up to InFlight
// concurrent requests (bounded per machine over the process, each at
// most MaxRows rows), each with a deadline whose error names the
// machine; a cache of remote rows (a byte budget) keeps rows asked
// before; a device's Source (ahead.go) starts a batch's gather when the
// batch is sampled, so that its rows travel while earlier batches load
// and train.
package machines
