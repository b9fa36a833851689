// Package machines is DSP's multi-machine layout: one directory per
// machine (`strata partition --machines M`) and the feature service
// through which the machines read each other's rows.
//
// A machine directory (dir.go) holds what one machine needs and nothing
// more: the whole topology (every machine samples locally), renumbered
// by the partition so that machine m's devices own one contiguous range
// of node IDs; the labels and splits; the feature rows of that range
// (the machine's shard: its devices' hot rows under DSP's partition
// cache policy, and its cold rows); the partition book (partition.bin);
// and machine.json, which names the partition by a fingerprint. A
// training process loads only its machine's directory: no machine reads
// every feature row from disk.
//
// Rows owned by another machine are asked of that machine's feature
// service (source.go): every process serves its machine's shard through
// the serve package's gRPC Features RPC, the addresses are exchanged
// through the job's rendezvous store, off loopback over mutual TLS (the
// job's certificates), on loopback with a shared secret. A batch's
// missing rows are deduplicated and asked of their owners in one request
// per machine, split into requests of at most MaxRows rows, each with a
// deadline whose error names the machine; an optional cache of remote
// rows (a byte budget) keeps rows asked before.
package machines
