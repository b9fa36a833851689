// Package cudacomm is the CUDA half of comm's device communicators: what
// comm/nccl, comm/gpushm and comm/devdist need of a GPU beyond the back
// ends' general capabilities (tensor/backend). Those packages take
// backend.Backend and backend.Buffer and name no CUDA type; this package
// takes the same values and reaches the CUDA device behind them.
//
//   - IsGPU, Retain and GPU: for NCCL, the device's primary context made
//     current on the caller's thread, the device's stream under its lock
//     (Enqueue), the device addresses of buffers (Addr) and events polled
//     with cuEventQuery (Event.Done: deadlines without blocking).
//   - Mover: comm/gpushm's copies between device buffers and the shared
//     segment on streams of its own, the segment page-locked and mapped,
//     and the device path's stream memory operations and reduction
//     kernels.
//   - BusID and CanAccess: peer-to-peer access between the GPUs of a job.
package cudacomm
