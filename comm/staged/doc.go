// Package staged puts device buffers on a host communicator: every
// operation downloads the device buffers into host memory, runs the host
// collective (comm/inproc, comm/shm, comm/tcp) and uploads the result. It
// is what device buffers use across hosts (TCP), what --comm shm and tcp
// mean for GPUs in one process, and what comm/gpushm uses for every
// operation but all-reduce.
//
// Buffers of the CPU back end are host memory already: they go to the
// host collective as they are, without copies, so a staged communicator
// on the CPU back end costs nothing over its host communicator.
//
// Host buffers come from the host communicator's Alloc, so on shm they
// live in the shared segment and the host collective runs in place.
// Operations are synchronous: when one returns, its result is on the
// device (queued on the device's stream, before later work).
package staged
