package main

import (
	"io"

	"github.com/strata-gnn/strata/tensor/backend"
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

// cudaOptions are the options of the CUDA devices this command opens
// (openBackend): 'strata train' sets TF32 for the length of a run
// (useEnvironment).
var cudaOptions cudabk.Options

// openBackend opens one device spec ("cpu", "cuda:1"): CUDA devices with
// cudaOptions, other kinds through package backend's registry.
func openBackend(spec string) (backend.Backend, error) {
	if kind, index, err := backend.ParseDevice(spec); err == nil && kind == "cuda" {
		d, err := cudabk.Open(index, cudaOptions)
		if err != nil {
			return nil, err
		}
		return d, nil
	}
	return backend.Open(spec)
}

// The variables of the CUDA back end that 'strata train' notes and
// honours (env.go).
const (
	envTF32   = cudabk.EnvTF32
	envPoison = cudabk.EnvPoison
)

// cudaOptionsFromEnv returns the options of the CUDA devices a run opens:
// TF32 from --tf32 or STRATA_CUDA_TF32 (an error names a bad value).
func cudaOptionsFromEnv(tf32 bool) (cudabk.Options, error) {
	o, _, err := cudabk.FromEnv(cudabk.Options{TF32: tf32})
	return o, err
}

// cudaDriverErr is why libcuda cannot be used here (nil when it can).
func cudaDriverErr() error { return cudabk.Probe().Driver.Err }
