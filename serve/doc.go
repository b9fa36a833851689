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
// the sampling of its stream once gRPC's window is full.
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
