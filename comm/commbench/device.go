package commbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/devdist"
	"github.com/strata-gnn/strata/comm/nccl"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// Device back ends: the ranks' buffers live on GPUs (one process per GPU,
// rank r on cuda:LOCAL_RANK) and the communicator is a comm.Comm
// opened by comm/devdist: "nccl", "gpushm", "gpu-auto" (what --comm auto
// picks for device buffers) and "gpu-tcp" (device buffers staged through
// the TCP back end).
const (
	KindGPUAuto = "gpu-auto"
	KindGPUTCP  = "gpu-tcp"
)

// DeviceEnv, set to "cpu" in the ranks' environment, runs the device back
// ends on the CPU back end instead of GPUs (for tests without a GPU).
const DeviceEnv = "STRATA_COMMBENCH_DEVICE"

func isDevice(kind string) bool {
	switch kind {
	case comm.KindNCCL, comm.KindGPUShm, KindGPUAuto, KindGPUTCP:
		return true
	}
	return false
}

// deviceKind maps a benchmark back end to devdist's --comm value.
func deviceKind(kind string) string {
	switch kind {
	case KindGPUAuto:
		return comm.KindAuto
	case KindGPUTCP:
		return comm.KindTCP
	}
	return kind
}

// openDevice opens this rank's compute back end: cuda:LOCAL_RANK, through
// the back-end registry (comm/nccl links the CUDA back end in).
func openDevice() (backend.Backend, func(), error) {
	if os.Getenv(DeviceEnv) == "cpu" {
		be, err := cpu.New(cpu.Options{})
		return be, func() {}, err
	}
	lr, _ := strconv.Atoi(os.Getenv("LOCAL_RANK"))
	d, err := backend.Open(fmt.Sprintf("cuda:%d", lr))
	if err != nil {
		return nil, nil, err
	}
	return d, func() {
		if c, ok := d.(io.Closer); ok {
			c.Close()
		}
	}, nil
}

func deviceChildMain(ctx context.Context, job child, cfg Config, op comm.Op) error {
	be, done, err := openDevice()
	if err != nil {
		return err
	}
	defer done()
	dc, info, err := devdist.Init(ctx, be, devdist.Options{Backend: deviceKind(job.Kind), Comm: comm.Options{Timeout: cfg.Timeout},
		GPUShm: cfg.GPUShm, NCCL: nccl.Options{Async: cfg.NCCLAsync}})
	if err != nil {
		return err
	}
	defer dc.Close()
	pts, err := MeasureDevice(ctx, dc, be, cfg, op)
	if err != nil {
		return err
	}
	if dc.Rank() != 0 {
		return nil
	}
	why := info.Reason
	if info.PeerDetail != "" {
		why += " (peer access: " + info.PeerDetail + ")"
	}
	s := Series{Backend: job.Kind, Chosen: info.Kind, Reason: why, Points: pts}
	switch info.Kind {
	case comm.KindGPUShm:
		s.GPUShm = &cfg.GPUShm
	case comm.KindNCCL:
		s.NCCLAsync = cfg.NCCLAsync
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return os.WriteFile(job.Result, b, 0o600)
}

// MeasureDevice times op for every size of cfg on the device communicator
// dc with buffers of be (float32, filled with ones); every rank calls it
// and gets the same points. Each timed run ends with Sync.
func MeasureDevice(ctx context.Context, dc comm.Comm, be backend.Backend, cfg Config, op comm.Op) ([]Point, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	n := int64(dc.Size())
	clock, err := be.Alloc(backend.Float32, 1)
	if err != nil {
		return nil, err
	}
	defer be.Free(clock)
	var pts []Point
	for _, size := range cfg.Sizes() {
		iters := int(min(max(cfg.Budget/size, int64(cfg.MinIters)), int64(cfg.MaxIters)))
		elems := size / 4
		one, two := elems, int64(0)
		switch op {
		case comm.OpAllGather:
			one, two = elems/n*n, elems/n
		case comm.OpAllToAll:
			one, two = elems/n*n, elems/n*n
		case comm.OpReduceScatter:
			one, two = elems/n, elems/n*n
		}
		var bufs []backend.Buffer
		free := func() {
			for _, b := range bufs {
				be.Free(b)
			}
		}
		for _, k := range []int64{one, two} {
			if k == 0 {
				continue
			}
			b, err := be.Alloc(backend.Float32, int(k))
			if err == nil {
				err = be.Fill(b, 1)
			}
			if err != nil {
				free()
				return nil, fmt.Errorf("commbench: %d-byte buffers: %w", size, err)
			}
			bufs = append(bufs, b)
		}
		a := bufs[0]
		b := a
		if len(bufs) > 1 {
			b = bufs[1]
		}
		var run func(context.Context) error
		switch op {
		case comm.OpAllReduce:
			run = func(ctx context.Context) error { return dc.AllReduce(ctx, a, comm.Sum) }
		case comm.OpBroadcast:
			run = func(ctx context.Context) error { return dc.Broadcast(ctx, a, 0) }
		case comm.OpAllGather:
			run = func(ctx context.Context) error { return dc.AllGather(ctx, a, b) }
		case comm.OpAllToAll:
			run = func(ctx context.Context) error { return dc.AllToAll(ctx, a, b) }
		case comm.OpReduceScatter:
			run = func(ctx context.Context) error { return dc.ReduceScatter(ctx, a, b, comm.Sum) }
		}
		if err := run(ctx); err != nil { // warm-up: registration, connections
			free()
			return nil, err
		}
		times := make([]float64, cfg.Repeats)
		for k := range times {
			err := dc.Barrier(ctx)
			start := time.Now()
			for i := 0; i < iters && err == nil; i++ {
				err = run(ctx)
			}
			if err == nil {
				err = dc.Sync(ctx)
			}
			el := []float32{float32(time.Since(start).Seconds())}
			if err == nil {
				err = be.Upload(clock, el)
			}
			if err == nil {
				err = dc.AllReduce(ctx, clock, comm.Max)
			}
			if err == nil {
				err = be.Download(el, clock)
			}
			if err != nil {
				free()
				return nil, err
			}
			times[k] = float64(el[0])
		}
		free()
		slices.Sort(times)
		sec := times[len(times)/2] / float64(iters)
		alg := float64(size) / sec / 1e9
		pts = append(pts, Point{Bytes: size, Iters: iters, Seconds: sec, AlgBW: alg, BusBW: alg * busFactor(op, int(n))})
	}
	return pts, nil
}
