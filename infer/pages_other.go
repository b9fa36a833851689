//go:build !linux

package infer

import "github.com/strata-gnn/strata/graph"

// hostFloats returns n zeroed float32s of Go memory (pages_linux.go maps
// large ones).
func hostFloats(n int) (x []float32, unmap func()) { return make([]float32, n), nil }

// hostWords returns n zeroed words of Go memory (pages_linux.go maps
// large ones in huge pages).
func hostWords(n int) (x []uint64, unmap func()) { return make([]uint64, n), nil }

// prepareOutput does nothing outside Linux (pages_linux.go).
func prepareOutput(x []float32, parts, workers int) (stop func()) { return func() {} }

// prefetch does nothing outside Linux (pages_linux.go).
func prefetch(in *graph.CSR, dense []float32, workers int) (stop func()) { return func() {} }
