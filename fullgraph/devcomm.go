package fullgraph

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/nccl"
	"github.com/strata-gnn/strata/internal/cudacomm"
	"github.com/strata-gnn/strata/tensor/backend"
)

// CommOptions configure OpenDeviceComms.
type CommOptions struct {
	// Timeout bounds each operation (comm.DefaultTimeout if zero).
	Timeout time.Duration
	// GPUShm tunes the gpushm communicators (strata train's --gpushm-*
	// flags); its comm.Options are replaced by Timeout. It is checked
	// (gpushm.Options.Validate) whatever the kind, so a bad setting is
	// reported even where auto picks NCCL.
	GPUShm gpushm.Options
}

// Device communicator kinds for OpenDeviceComms (strata train --comm).
const (
	CommAuto   = "auto"
	CommNCCL   = "nccl"
	CommGPUShm = "gpushm"
	CommHost   = "host"
)

// OpenDeviceComms opens the device communicators of Options.DeviceComms
// for the devices bs, one rank each in this process: "nccl"
// (comm/nccl.OpenLocal), "gpushm" (comm/gpushm.NewLocal: the GPU variant
// of the shared-memory collectives) or "host" (none: the engine stages
// its messages through host memory). "auto" picks NCCL when it loads,
// else gpushm, and host for one device or devices that are not distinct
// CUDA GPUs. It returns the communicators (nil for host), the kind used
// and why. Close every communicator when done.
func OpenDeviceComms(ctx context.Context, kind string, bs []backend.Backend, co CommOptions) ([]comm.Comm, string, string, error) {
	kind = strings.ToLower(strings.TrimSpace(kind))
	seen := map[backend.Backend]bool{}
	gpus := len(bs) > 1
	for _, b := range bs {
		if !cudacomm.IsGPU(b) || seen[b] {
			gpus = false
			break
		}
		seen[b] = true
	}
	if err := co.GPUShm.Validate(); err != nil {
		return nil, "", "", fmt.Errorf("fullgraph: %w", err)
	}
	o := comm.Options{Timeout: co.Timeout}
	gso := co.GPUShm
	gso.Options = o
	switch kind {
	case "", CommAuto:
		if !gpus {
			if len(bs) < 2 {
				return nil, CommHost, "one device", nil
			}
			return nil, CommHost, "the devices are not distinct CUDA GPUs", nil
		}
		why := "NCCL not available"
		err := nccl.Available()
		if err == nil {
			var cs []comm.Comm
			if cs, err = nccl.OpenLocal(ctx, bs, nccl.Options{Options: o}); err == nil {
				return cs, CommNCCL, "NCCL loads", nil
			}
			why = "NCCL failed to start"
		}
		cs, err2 := gpushm.NewLocal(bs, gso)
		if err2 != nil {
			return nil, "", "", fmt.Errorf("fullgraph: device communicators: %s (%v); gpushm: %w", why, err, err2)
		}
		return cs, CommGPUShm, fmt.Sprintf("%s (%v)", why, err), nil
	case CommHost:
		return nil, CommHost, "requested", nil
	case CommNCCL, CommGPUShm:
		if !gpus {
			return nil, "", "", cfgErr("comm", "%s needs two or more distinct CUDA GPUs", kind)
		}
		var cs []comm.Comm
		var err error
		if kind == CommNCCL {
			cs, err = nccl.OpenLocal(ctx, bs, nccl.Options{Options: o})
		} else {
			cs, err = gpushm.NewLocal(bs, gso)
		}
		if err != nil {
			return nil, "", "", fmt.Errorf("fullgraph: %s: %w", kind, err)
		}
		return cs, kind, "requested", nil
	}
	return nil, "", "", cfgErr("comm", "unknown kind %q (want auto, nccl, gpushm or host)", kind)
}
