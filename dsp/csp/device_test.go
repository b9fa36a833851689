package csp_test

// The GPU tests of this package (gpu_test.go and the *_gpu_test.go
// files) run the CUDA machines, which package internal/cudadsp
// registers with csp.RegisterDevice: importing it from this external
// test package links them into the test binary (internal/cudadsp
// imports csp, so the package's own test files cannot import it).
import _ "github.com/strata-gnn/strata/internal/cudadsp"
