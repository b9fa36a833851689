package openblas

import "golang.org/x/sys/cpu"

// coreTypeHint names the OpenBLAS kernel family the CPU supports, for
// OPENBLAS_CORETYPE. OpenBLAS identifies CPUs by vendor and model number,
// and under hypervisors that report a generic model it falls back to its
// SSE3 "Prescott" kernels: 5x slower sgemm on an AVX-512 machine. The
// feature flags from x/sys/cpu include the OS support checks (XGETBV).
func coreTypeHint() string {
	x := cpu.X86
	switch {
	case x.HasAVX512F && x.HasAVX512BW && x.HasAVX512DQ && x.HasAVX512VL && x.HasAVX512CD && x.HasFMA && x.HasAVX2:
		return "SkylakeX"
	case x.HasAVX2 && x.HasFMA:
		return "Haswell"
	}
	return ""
}
