// Package cudalib finds and opens NVIDIA's shared libraries (libcuda,
// libnvrtc, libcublas, libnccl) at run time, without cgo.
//
// # Search order
//
// For each library a list of sonames is tried (newest major version first)
// in these places, in order:
//
//  1. the folders listed in $STRATA_CUDA_PATH (colon separated);
//  2. the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache, ...),
//     by bare soname;
//  3. CUDA toolkit folders: /usr/local/cuda*/targets/x86_64-linux/lib
//     (newest first), /usr/local/cuda/lib64;
//  4. driver folders: /usr/local/nvidia/lib64, /usr/lib/x86_64-linux-gnu;
//  5. NVIDIA Python-wheel folders under every python3*/site-packages (or
//     dist-packages) found: nvidia/cu13/lib, nvidia/cu12/lib,
//     nvidia/cuda_nvrtc/lib, nvidia/cublas/lib, nvidia/nccl/lib.
//
// Some libraries need a sibling loaded first from the folder they came
// from: libnvrtc dlopens libnvrtc-builtins by bare name, which fails when
// that folder is not on the loader path, and libcublas needs libcublasLt.
// Those siblings are preloaded with RTLD_GLOBAL.
//
// When nothing loads, Open returns a *NotFoundError naming the library,
// the sonames and every folder searched.
package cudalib
