package gputest

import (
	"fmt"
	"os"
	"sync"
	"testing"

	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/internal/testkit"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cuda"
)

// EnvPrecision is the precision (fp32, tf32 or bf16; default fp32) the
// GPUs of the tests and benchmarks open with, as strata train's
// --precision.
const EnvPrecision = "STRATA_TEST_PRECISION"

// Precision reads EnvPrecision; a bad value is an error naming it.
func Precision() (backend.Precision, error) {
	p, err := backend.ParsePrecision(os.Getenv(EnvPrecision))
	if err != nil {
		return p, fmt.Errorf("%s: %w", EnvPrecision, err)
	}
	return p, nil
}

// maxDevices bounds how many GPUs All opens.
const maxDevices = 4

var (
	mu     sync.Mutex
	opened = map[int]*cuda.Device{}
	failed = map[int]error{}

	countOnce sync.Once
	count     int
	countErr  error
)

// open returns GPU i, opening it on first use; a failure is kept so that
// every later call reports it without trying again.
func open(i int) (*cuda.Device, error) {
	mu.Lock()
	defer mu.Unlock()
	if d, ok := opened[i]; ok {
		return d, nil
	}
	if err, ok := failed[i]; ok {
		return nil, err
	}
	var d *cuda.Device
	// STRATA_TEST_PRECISION sets the tests' GPUs' precision as
	// --precision sets strata's (benchmarks compare with it:
	// docs/configuration.md).
	p, err := Precision()
	if err == nil {
		d, err = cuda.Open(i, cuda.Options{Precision: p})
	}
	if err != nil {
		failed[i] = err
		return nil, err
	}
	opened[i] = d
	return d, nil
}

// One returns GPU 0 (opening no other GPU), skipping t when it cannot be
// used.
func One(t testing.TB) *cuda.Device {
	t.Helper()
	d, err := open(0)
	if err != nil {
		t.Skipf("no usable GPU: %.120s", err.Error())
	}
	return d
}

// All returns every visible GPU, up to 4, skipping t when one of them
// cannot be used or there is none.
func All(t testing.TB) []*cuda.Device {
	t.Helper()
	count, err := Count()
	if err != nil {
		t.Skipf("no usable GPU: %.120s", err.Error())
	}
	devs := make([]*cuda.Device, 0, min(count, maxDevices))
	for i := range min(count, maxDevices) {
		d, err := open(i)
		if err != nil {
			t.Skipf("no usable GPU: %.120s", err.Error())
		}
		devs = append(devs, d)
	}
	if len(devs) == 0 {
		t.Skip("no usable GPU: none visible")
	}
	return devs
}

// Count returns how many GPUs are visible, opening none (an error
// without CUDA): for tests that start one process per GPU.
func Count() (int, error) {
	countOnce.Do(func() {
		if countErr = cu.Load(); countErr == nil {
			count, countErr = cu.DeviceCount()
		}
	})
	return count, countErr
}

// Devices returns the first n of All, skipping t when fewer are visible.
func Devices(t testing.TB, n int) []*cuda.Device {
	t.Helper()
	devs := All(t)
	if len(devs) < n {
		t.Skipf("needs %d GPUs, found %d", n, len(devs))
	}
	return devs[:n]
}

// CompileKernels compiles src as the CUDA back end's LoadKernels does
// (after its common definitions, cuda.CommonSource), with
// testkit.CompileCUDA: kernel errors show up on any machine with
// libnvrtc, no GPU needed; without it t is skipped.
func CompileKernels(t testing.TB, src, name string) []byte {
	t.Helper()
	return testkit.CompileCUDA(t, cuda.CommonSource()+src, name)
}

// OpTime is one op's device time in a profile (the CUDA back end's).
type OpTime = cuda.OpTime

// StartProfile starts the CUDA back end's op profiler on b, for
// benchmarks above the back end that hold b as a backend.Backend.
func StartProfile(b backend.Backend) error {
	d, ok := b.(*cuda.Device)
	if !ok {
		return fmt.Errorf("gputest: %s cannot profile (not a CUDA device)", b.Name())
	}
	return d.StartProfile()
}

// StopProfile stops the profiler StartProfile started on b and returns
// each op's device time.
func StopProfile(b backend.Backend) ([]OpTime, error) {
	d, ok := b.(*cuda.Device)
	if !ok {
		return nil, fmt.Errorf("gputest: %s cannot profile (not a CUDA device)", b.Name())
	}
	return d.StopProfile()
}
