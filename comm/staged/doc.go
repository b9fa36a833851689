// Package staged is a device communicator (comm.DeviceComm) built on a
// host communicator: every operation downloads the device buffers into
// host memory, runs the host collective (comm/shm, comm/tcp, ...) and
// uploads the result. It is what device buffers use across hosts (TCP)
// and what comm/gpushm uses for every operation but all-reduce; with the
// CPU back end it lets the device front end and the device test suites
// run without a GPU.
//
// Host buffers come from the host communicator's Alloc, so on shm they
// live in the shared segment and the host collective runs in place.
// Operations are synchronous: when one returns, its result is on the
// device (queued on the device's stream, before later work).
package staged
