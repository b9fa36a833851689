// Package cuquery binds cuEventQuery, which the GPU back ends poll to
// wait for device work with a deadline (internal/cuda only has the
// blocking cuEventSynchronize). It resolves the symbol from the libcuda
// handle internal/cudalib already opened.
package cuquery
