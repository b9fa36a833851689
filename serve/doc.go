// Package serve is `strata serve`: a sampling and feature server over a
// dataset, for PyTorch/PyG trainers (the Python package strata_pyg in
// python/) and for other Strata processes, speaking gRPC with the
// protocol of proto/strata/v1/sampler.proto (generated code in servepb).
//
// # What it serves
//
// Sample streams one epoch of node-wise neighbor-sampled batches in PyG's
// NeighborLoader layout (see Batch in the proto file): n_id with the seeds
// first, edge_index in local indices with row 0 the sampled neighbor,
// per-hop counts, and on request the features and labels of n_id. The
// batches are PyG's, not Strata's message-flow graphs: hop h samples only
// the nodes that hop h-1 added (SampleFrontier), with the random streams
// of package sample, so a node's draws at a hop are the same as in the
// MiniBatch that `strata train` would sample for the same key
// (FromMiniBatch derives the PyG batch from such a MiniBatch, which is
// how a GPU sampler, which only makes MiniBatches, is served). A batch
// depends only on (graph, fanouts, seeds, key); Plan fixes which seeds
// and key each batch has (shuffle, data-parallel rank, servers sharing an
// epoch), so batches never depend on threads, workers or servers.
//
// With SampleRequest.link the batches are edge-seeded (PyG's
// LinkNeighborLoader; link.go): an epoch runs over the request's edges,
// each batch's negatives come from package link's training negatives
// (link.Negatives) keyed by the batch's key, and the distinct endpoints
// of positives and negatives, ascending (link.NewBatch), are sampled as a
// node batch's seeds; edge_label_index gives the pairs as local indices.
// With Options.Hetero (a typed dataset) and SampleRequest.input_type the
// batches are typed (PyG's HeteroData; hetero.go): hop k samples every
// relation from the nodes of its destination type that hop k-1 added,
// through sample.HeteroSampler.SampleHop, and each node type and relation
// gets its own n_id and edge_index. Info lists both in capabilities, so
// that clients can tell a server too old to know them.
//
// SampleShm is Sample for a client on the same host (strata_pyg's worker
// mode): the batches' tensors go into a shared-memory ring (package
// shmring; only with Options.RingDir) and the bidirectional stream
// carries which slot holds which batch one way and the client's releases
// the other. Batch s of the stream uses slot s mod S and is written once
// the client has released batch s-S (waiting at most the release
// timeout); the slots are sized from the first batch, and a batch that
// does not fit goes inline. The stream, and so the ring, lasts until the
// client has released every batch.
//
// Batches are encoded once: the tensors go from the sampler's output and
// the dataset straight into the bytes of the outgoing message (encode.go:
// a hand-encoded Batch in a reused buffer, which the server's codec hands
// to gRPC as it is) or into the ring slot. SampleRequest.feature_dtype
// BFLOAT16 writes the features of messages rounded to bfloat16 (half the
// bytes; capability "bfloat16"; rows of a copy of the features rounded
// once, on the first such request, within Options.BF16TableBytes:
// bf16.go), ShmRequest.narrow_ids the ring's IDs as
// int32 (for a client that widens them on its GPU). Every batch carries
// a BatchTiming (sampling, encoding, waiting for a ring slot) so that
// clients can tell where its time went.
//
// With Options.Relay the server is a relay (`strata relay`; relay.go):
// no dataset, and each SampleShm stream is the epoch of the upstream
// servers' Sample streams (round-robin or by partition, in strata_pyg's
// order), received in Go and written into the ring, so that a trainer in
// server-client mode maps its batches as in worker mode.
//
// With Options.Partition the server owns one part of a partition
// (`strata partition`); Info says which, and SampleRequest.owned streams
// sample only the seeds of that part, with keys of their own, so that a
// client can route each seed to the server of its part.
//
// Features looks up rows of the features and labels by node ID: a
// generic feature store for clients that sample elsewhere. Info describes
// the dataset and the server's limits; grpc.health.v1.Health says whether
// it serves.
//
// # Limits and flow control
//
// Every message is bounded (Options.MaxRecvBytes for requests, checked by
// gRPC before decoding; Options.MaxSendBytes for replies, checked before
// sending, with an error that says how to shrink the batch), every count
// in a request is checked against the dataset before anything is sized
// from it, and a stream keeps at most max(prefetch, workers) batches
// sampled ahead of what gRPC has taken: a client that stops reading stops
// the sampling of its stream once gRPC's window is full (a SampleShm
// stream: once every ring slot waits for a release).
//
// # Security
//
// Without TLS the server listens only on loopback or a unix socket
// (CheckListen); off loopback mutual TLS is required (the certificates of
// comm/auth: --tls-cert, --tls-key, --tls-ca). A shared secret
// (Options.Secret, sent by clients in the "strata-secret" metadata)
// keeps other local users out; the health service needs none.
//
// # Lifecycle
//
// Drain stops a server gracefully: health turns NOT_SERVING, no new
// connection is accepted, running streams may finish within a deadline,
// then whatever remains is cut. `strata serve` drains on SIGTERM and
// SIGINT, and with --exit-with-parent when its parent process goes away.
//
// Metrics (Prometheus; metrics.go) count batches, bytes, errors,
// sampling latency and queue depth; `strata serve --metrics-listen`
// serves them on /metrics.
package serve
