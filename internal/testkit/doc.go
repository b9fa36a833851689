// Package testkit holds helpers shared by Strata's tests, such as locating
// the real datasets under /work/shared/datasets and compiling CUDA C with
// NVRTC.
package testkit
