// Package gputest opens CUDA devices for tests, once per test binary, and
// skips the test when there are none (or too few). CompileKernels checks
// that a package's kernel source compiles as the CUDA back end's
// LoadKernels compiles it.
package gputest
