package main

import (
	"fmt"
	"io"

	"github.com/strata-gnn/strata/tensor/backend"
	// Linking the CUDA back end registers the device kind "cuda" (cuda:N);
	// it loads libcuda, NVRTC and cuBLAS at run time, so the binary still
	// builds with CGO_ENABLED=0 and runs on machines without a GPU.
	cudabk "github.com/strata-gnn/strata/tensor/backend/cuda"
	"github.com/strata-gnn/strata/train"
	"github.com/strata-gnn/strata/train/gputrain"
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

// batchSource returns, for a CUDA back end, the source that samples
// training batches and gathers their features on the GPU; nil (host
// sampling) otherwise.
func batchSource(b backend.Backend) train.NewBatchSource {
	if _, ok := b.(*cudabk.Device); ok {
		return gputrain.New(gputrain.Options{})
	}
	return nil
}

// deviceSpecOf names the device b is as a --devices entry: "cuda:N" for a
// GPU, "cpu" otherwise.
func deviceSpecOf(b backend.Backend) string {
	if d, ok := b.(*cudabk.Device); ok {
		return fmt.Sprintf("cuda:%d", d.Ordinal())
	}
	return "cpu"
}
