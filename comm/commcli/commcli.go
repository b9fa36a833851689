// Package commcli holds the kong command structs for 'strata launch' and
// 'strata bench comm', so the CLI wires them with two fields:
//
//	Launch commcli.LaunchCmd `cmd:"" help:"Start N local processes with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set."`
//	Bench  struct {
//		Comm commcli.BenchCommCmd `cmd:"" help:"Bus bandwidth of the communication back ends against message size."`
//	} `cmd:"" help:"Benchmarks."`
//
// BenchCommCmd re-executes the same command line for its ranks (with an
// environment variable set) and recognizes that case itself, so nothing
// else is needed in main.
package commcli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/strata-gnn/strata/comm/auth"
	"github.com/strata-gnn/strata/comm/commbench"
	"github.com/strata-gnn/strata/comm/gpushm"
	"github.com/strata-gnn/strata/comm/launch"
	"github.com/strata-gnn/strata/comm/nccl"
)

// LaunchCmd is 'strata launch -n N [flags] -- <cmd> [args...]'.
type LaunchCmd struct {
	N          int           `short:"n" required:"" help:"Number of processes (ranks) on this machine."`
	Nodes      int           `name:"nnodes" default:"1" help:"Machines in the job, each running one 'strata launch' with the same -n, --nnodes, --master-addr and --master-port (torchrun's --nnodes)."`
	NodeRank   int           `name:"node-rank" default:"0" help:"This machine's index in 0..nnodes-1 (its processes are ranks node-rank*n .. node-rank*n+n-1; machine 0 runs rank 0, which serves the store at --master-addr)."`
	MasterAddr string        `default:"127.0.0.1" help:"Address of rank 0's rendezvous store (MASTER_ADDR): machine 0's, with --nnodes."`
	MasterPort int           `help:"Port of the store (MASTER_PORT); 0 picks a free one (one machine only)."`
	Grace      time.Duration `default:"5s" help:"After a rank fails, how long the others get between SIGTERM and SIGKILL."`
	NoPrefix   bool          `help:"Do not prefix output lines with [rank r]."`
	TLSCert    string        `name:"tls-cert" type:"path" help:"PEM certificate of the ranks (STRATA_COMM_TLS_CERT); with --tls-key and --tls-ca, mutual TLS, required when --master-addr is not on loopback."`
	TLSKey     string        `name:"tls-key" type:"path" help:"PEM private key of --tls-cert (STRATA_COMM_TLS_KEY)."`
	TLSCA      string        `name:"tls-ca" type:"path" help:"PEM certificate of the CA that signed every rank's certificate (STRATA_COMM_TLS_CA)."`
	TLSName    string        `name:"tls-name" help:"DNS name in the ranks' certificates (STRATA_COMM_TLS_NAME; strata if empty)."`
	Insecure   bool          `name:"insecure-trusted-network" help:"Off loopback, accept the shared secret (STRATA_COMM_SECRET) without TLS: the traffic is not protected; only on a network you trust (STRATA_COMM_INSECURE_TRUSTED_NETWORK=1, each rank warns)."`
	Command    []string      `arg:"" passthrough:"" help:"The command every rank runs (after --)."`

	Stdout, Stderr io.Writer `kong:"-"` // os.Stdout, os.Stderr if nil
}

// Run starts the processes and waits; a failing rank stops the others and
// is reported (non-zero exit).
func (c *LaunchCmd) Run() error {
	cmd := c.Command
	if len(cmd) > 0 && cmd[0] == "--" {
		cmd = cmd[1:]
	}
	if len(cmd) == 0 {
		return fmt.Errorf("launch: give the command after --, e.g. strata launch -n 2 -- strata train ...")
	}
	if c.Nodes < 1 {
		return &launch.ConfigError{Err: fmt.Errorf("launch: --nnodes %d, want 1 or more machines", c.Nodes)}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err := launch.Run(ctx, launch.Config{N: c.N, Nodes: c.Nodes, NodeRank: c.NodeRank, Command: cmd, MasterAddr: c.MasterAddr, MasterPort: c.MasterPort,
		Grace: c.Grace, Prefix: !c.NoPrefix, Stdout: c.Stdout, Stderr: c.Stderr,
		Auth: auth.Config{TLSCert: c.TLSCert, TLSKey: c.TLSKey, TLSCA: c.TLSCA, TLSName: c.TLSName, InsecureTrustedNetwork: c.Insecure}})
	return err
}

// BenchCommCmd is 'strata bench comm'.
type BenchCommCmd struct {
	Comm     []string      `default:"inproc,shm,shm:plain,tcp" help:"Back ends to measure (inproc, shm, tcp, auto; ':plain' uses Go-heap buffers instead of Comm.Alloc; device buffers on GPUs: nccl, gpushm, gpu-auto, gpu-tcp)."`
	Procs    int           `short:"n" default:"2" help:"Ranks (goroutines for inproc, processes otherwise)."`
	Op       string        `default:"all_reduce" enum:"all_reduce,broadcast,all_gather,all_to_all,reduce_scatter" help:"Collective to time."`
	MinBytes int64         `default:"4096" help:"Smallest message in bytes."`
	MaxBytes int64         `default:"268435456" help:"Largest message in bytes."`
	Factor   int64         `default:"4" help:"Size step factor."`
	Repeats  int           `default:"3" help:"Timed runs per size (the median is reported)."`
	Budget   int64         `default:"536870912" help:"Bytes moved per timed run (iterations = budget / size, at least 3)."`
	Timeout  time.Duration `default:"1m" help:"Deadline of each collective."`
	JSON     string        `default:"comm-bench.json" help:"Write the report as JSON to this file ('' for none)."`

	GPUShm    GPUShmFlags `embed:""`
	NCCLAsync bool        `name:"nccl-async" help:"nccl: operations return once queued on the GPU's stream (as the DSP engine runs them) instead of when complete."`

	Stdout, Stderr io.Writer `kong:"-"`
}

// Run measures and prints the table (bus bandwidth against size per back
// end), writing the JSON report too. In a rank started by the benchmark
// it runs that rank instead.
func (c *BenchCommCmd) Run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if commbench.IsChild() {
		return commbench.ChildMain(ctx)
	}
	out, errw := c.Stdout, c.Stderr
	if out == nil {
		out = os.Stdout
	}
	if errw == nil {
		errw = os.Stderr
	}
	var backends []string
	for _, b := range c.Comm {
		for _, s := range strings.Split(b, ",") {
			if s = strings.TrimSpace(s); s != "" {
				backends = append(backends, s)
			}
		}
	}
	cfg := commbench.Config{Backends: backends, Procs: c.Procs, Op: c.Op, MinBytes: c.MinBytes,
		MaxBytes: c.MaxBytes, Factor: c.Factor, Repeats: c.Repeats, Budget: c.Budget, Timeout: c.Timeout, Log: errw}
	if err := c.deviceSettings(&cfg, errw); err != nil {
		return err
	}
	rep, err := commbench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	rep.WriteTable(out)
	if c.JSON != "" {
		f, err := os.Create(c.JSON)
		if err != nil {
			return err
		}
		if err := rep.WriteJSON(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s\n", c.JSON)
	}
	for _, s := range rep.Series {
		if s.Error != "" {
			return fmt.Errorf("bench comm: %s failed", s.Backend)
		}
	}
	return nil
}

// deviceSettings sets the gpushm and NCCL settings of cfg from the flags
// and, for what they leave unset, from the environment (gpushm.FromEnv,
// nccl.FromEnv: the ranks do not read it), with a line on w for every
// variable that counts.
func (c *BenchCommCmd) deviceSettings(cfg *commbench.Config, w io.Writer) error {
	var used []string
	var err error
	if cfg.GPUShm, used, err = c.GPUShm.EnvOptions(gpushm.Options{}); err != nil {
		return err
	}
	cfg.NCCLAsync = c.NCCLAsync
	if !c.NCCLAsync {
		no, set, err := nccl.FromEnv(nccl.Options{})
		if err != nil {
			return fmt.Errorf("environment: %w", err)
		}
		if set {
			used = append(used, nccl.EnvAsync)
		}
		cfg.NCCLAsync = no.Async
	}
	for _, name := range used {
		fmt.Fprintf(w, "bench comm: %s=%s is set (docs/configuration.md)\n", name, os.Getenv(name))
	}
	return nil
}
