package main

import (
	"io"

	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	// Linking the CUDA back end registers the device kind "cuda" (cuda:N);
	// it loads libcuda, NVRTC and cuBLAS at run time, so the binary still
	// builds with CGO_ENABLED=0 and runs on machines without a GPU.
	cudabk "github.com/strata-gnn/strata/tensor/backend/cuda"
)

// writeCUDAInfo prints what `strata info` should show about CUDA: the
// libraries found (paths and versions), each device (name, compute
// capability, SMs, memory), peer-to-peer access between device pairs and
// the kernel cache folder. It never fails on a machine without CUDA; it
// says what is missing and where it looked.
func writeCUDAInfo(w io.Writer) error { return cudabk.Probe().WriteText(w) }

// devicePrecision is the precision every device this command opens
// computes in (openBackend): 'strata train' sets it from --precision for
// the length of a run (useEnvironment).
var devicePrecision backend.Precision

// openBackend opens one device spec ("cpu", "cuda:1") with
// devicePrecision: CUDA devices and the CPU back end directly, other
// kinds through package backend's registry (which opens them in fp32).
func openBackend(spec string) (backend.Backend, error) {
	kind, index, err := backend.ParseDevice(spec)
	switch {
	case err == nil && kind == "cuda":
		d, err := cudabk.Open(index, cudabk.Options{Precision: devicePrecision})
		if err != nil {
			return nil, err
		}
		return d, nil
	case err == nil && kind == "cpu" && index == 0:
		b, err := cpu.New(cpu.Options{Precision: devicePrecision})
		if err != nil {
			return nil, err
		}
		return b, nil
	}
	return backend.Open(spec)
}

// The variables of the CUDA back end that 'strata train' notes (env.go).
const (
	// envTF32 was --tf32's variable; --precision replaced both.
	envTF32   = "STRATA_CUDA_TF32"
	envPoison = cudabk.EnvPoison
)

// cudaDriverErr is why libcuda cannot be used here (nil when it can).
func cudaDriverErr() error { return cudabk.Probe().Driver.Err }
