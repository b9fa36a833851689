// Package cudadsp is the CUDA half of the DSP packages (dsp/csp,
// dsp/cache, dsp/engine): the GPU machines their algorithms are written
// against, and the engine's GPU-only pieces. Those packages take
// backend.Backend and keep the CPU machines (production code for CPU
// devices and CI); this package implements the same interfaces with
// kernels compiled at run time, on the back ends with the capabilities
// they need (the CUDA back end). It names no CUDA type either: it goes
// through package backend's optional interfaces.
//
//   - csp.go, csp_layer.go, csp_walk.go with csp.cu, layer.cu and
//     walk.cu: collective sampling's node-wise, layer-wise and walk
//     machines (csp.Machine, LayerMachine, WalkMachine) over gpusample's
//     hop API; place.go copies a patch's rows to the device or into
//     mapped pinned memory.
//   - cache.go with route.cu: the feature loader's routing machine
//     (cache.Machine) and the GPU feature store (package feature's).
//   - kit.go: the engine's full sampler on a GPU, batches in device
//     memory and their hand-over between a GPU's handles (streams), and
//     the deferred frees behind the trainer's stream; presample.go: the
//     pre-sampling pass counted on the GPUs.
//
// Importing the package registers the machines (csp.RegisterDevice,
// cache.RegisterDevice); dsp/engine imports it, so every program that
// trains with DSP has them. dsp/csp and dsp/cache never import it, and
// their GPU tests link it from an external test file.
//
// The GPU tests of these machines exercise them through the packages'
// APIs, against the CPU machines and the single-device samplers:
// dsp/csp's gpu_test.go and *_gpu_test.go, dsp/engine's gpu_test.go,
// layer_gpu_test.go and presample_gpu_test.go. kernels_test.go here
// compiles every kernel module with NVRTC (no GPU needed).
package cudadsp
