// Command strata-commbench runs comm/commbench standalone (the same
// measurement 'strata bench comm' prints), for measuring the
// communication back ends without the full CLI.
//
//	strata-commbench [-procs 2] [-backends inproc,shm,tcp] [-op all_reduce] [-min 4096] [-max 268435456] [-json out.json]
//
// On GPUs (one process per GPU, rank r on cuda:r) the back ends nccl,
// gpushm, gpu-auto (what --comm auto picks for device buffers) and
// gpu-tcp measure device buffers, e.g.
//
//	NCCL_P2P_DISABLE=1 strata-commbench -backends gpushm,nccl,gpu-auto -json bw.json
//
// gpushm's settings and NCCL's asynchronous mode come from the
// STRATA_GPUSHM_* variables and STRATA_NCCL_ASYNC (gpushm.FromEnv,
// nccl.FromEnv; 'strata bench comm' has flags for them), read here once
// and passed to the ranks.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/strata-gnn/strata/comm/commbench"
	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/nccl"
)

func main() {
	if commbench.IsChild() {
		if err := commbench.ChildMain(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "strata-commbench:", err)
			os.Exit(1)
		}
		return
	}
	var cfg commbench.Config
	backends := flag.String("backends", "inproc,shm,shm:plain,tcp", "back ends to measure (\":plain\": Go-heap buffers instead of Comm.Alloc; on GPUs: nccl, gpushm, gpu-auto, gpu-tcp)")
	flag.IntVar(&cfg.Procs, "procs", 2, "ranks")
	flag.StringVar(&cfg.Op, "op", "all_reduce", "all_reduce, broadcast, all_gather, all_to_all or reduce_scatter")
	flag.Int64Var(&cfg.MinBytes, "min", 4<<10, "smallest message in bytes")
	flag.Int64Var(&cfg.MaxBytes, "max", 256<<20, "largest message in bytes")
	flag.Int64Var(&cfg.Factor, "factor", 4, "size step factor")
	flag.Int64Var(&cfg.Budget, "budget", 512<<20, "bytes timed per size")
	flag.IntVar(&cfg.Repeats, "repeats", 3, "timed runs per size (median reported)")
	flag.IntVar(&cfg.ShmSlotBytes, "shm-slot", 0, "shm slot bytes (0: default)")
	flag.IntVar(&cfg.TCPSegmentBytes, "tcp-segment", 0, "tcp segment bytes (0: default)")
	flag.StringVar(&cfg.ShmReducer, "shm-reducer", "", "shm: auto, goroutine or inline")
	jsonOut := flag.String("json", "", "write the report as JSON to this file")
	flag.Parse()
	cfg.Backends = strings.Split(*backends, ",")
	cfg.Log = os.Stderr
	var err error
	if cfg.GPUShm, _, err = gpushm.FromEnv(cfg.GPUShm); err == nil {
		var no nccl.Options
		no, _, err = nccl.FromEnv(no)
		cfg.NCCLAsync = no.Async
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "strata-commbench:", err)
		os.Exit(2)
	}
	rep, err := commbench.Run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "strata-commbench:", err)
		os.Exit(1)
	}
	rep.WriteTable(os.Stdout)
	if *jsonOut != "" {
		f, err := os.Create(*jsonOut)
		if err == nil {
			err = rep.WriteJSON(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "strata-commbench:", err)
			os.Exit(1)
		}
	}
}
