package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"github.com/strata-gnn/strata/comm/commcli"
	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/train"
)

// cli is the command line. Every subcommand's flags can also come from a
// YAML file named by --config (keys are flag names); flags given on the
// command line win over the file.
type cli struct {
	Quiet   bool             `help:"No progress bars or per-epoch lines; print only results and errors."`
	Config  configFile       `help:"YAML file of flag values for the subcommand (keys are flag names, e.g. 'batch-size: 64'); command-line flags override it; unknown keys are errors." placeholder:"FILE"`
	Version kong.VersionFlag `help:"Print the version and exit."`

	Train     trainCmd          `cmd:"" help:"Train a GNN (GCN, GraphSAGE, GAT) for node classification; with no flags, GraphSAGE on the built-in Cora."`
	Predict   predictCmd        `cmd:"" help:"Score nodes with a saved model (train --save): float32 logits as .npy."`
	Embed     embedCmd          `cmd:"" help:"Write a saved model's hidden representations of a layer as .npy (a link model: by default its embeddings, what its decoder scores)."`
	Evaluate  evaluateCmd       `cmd:"" help:"Train, validation and test accuracy of a saved model on a dataset (a link model: validation and test AUC, MRR, Hits@K); on its own dataset, the training report's."`
	Import    importCmd         `cmd:"" help:"Convert a dataset in another format into a Strata dataset directory."`
	Split     splitCmd          `cmd:"" help:"Make seeded node splits (random or stratified) and edge splits (link prediction) of a dataset."`
	Gen       genCmd            `cmd:"" help:"Generate a synthetic dataset."`
	Info      infoCmd           `cmd:"" help:"Show the version, compute devices and back ends, and optionally summarize a dataset."`
	Partition partitionCmd      `cmd:"" help:"Partition a dataset into K parts for multi-device training; renumbers it so each part owns a contiguous ID range."`
	Launch    commcli.LaunchCmd `cmd:"" help:"Start N local processes with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set; stop all of them if one fails."`
	Bench     benchCmd          `cmd:"" help:"Benchmarks."`
	Serve     serveCmd          `cmd:"" help:"Serve sampled batches and features over gRPC to PyTorch/PyG trainers (python/strata_pyg) and other processes."`
	Relay     relayCmd          `cmd:"" help:"Relay remote strata serve batches into a local shared-memory ring (strata_pyg's server-client mode starts it)."`
}

// benchCmd groups the benchmark subcommands.
type benchCmd struct {
	Comm commcli.BenchCommCmd `cmd:"" help:"Bus bandwidth per communication back end against message size (table and JSON)."`
}

// env is what subcommands write to; tests substitute buffers.
type env struct {
	stdout, stderr io.Writer
	quiet          bool
}

// processStart is when the process started (near enough: package
// initialization), the origin of the setup times that reports give.
var processStart = time.Now()

// exitCode is panicked by kong's exit hook so run can return it.
type exitCode int

// run parses args and runs the selected subcommand, returning the process
// exit status.
func run(args []string, stdout, stderr io.Writer) (code int) {
	var c cli
	parser, err := kong.New(&c,
		kong.Name("strata"),
		kong.Description("Strata trains graph neural networks. Run 'strata train' to train GraphSAGE on the built-in Cora. Flags configure everything; docs/configuration.md lists the STRATA_* environment variables (library paths, launch, debugging)."),
		kong.Vars{"version": "strata " + train.Version, "builtins": strings.Join(builtinNames, ", "), "presets": strings.Join(gen.Presets(), ", "), "kinds": kindNames(), "devices": devicesSyntax},
		kong.UsageOnError(),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { panic(exitCode(code)) }),
	)
	if err != nil {
		fmt.Fprintln(stderr, "strata:", err)
		return 2
	}
	defer func() {
		if r := recover(); r != nil {
			ec, ok := r.(exitCode)
			if !ok {
				panic(r)
			}
			code = int(ec)
		}
	}()
	ctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintln(stderr, "strata:", err)
		return 2
	}
	e := &env{stdout: stdout, stderr: stderr, quiet: c.Quiet}
	savedQuiet, savedOut := progress.Quiet, progress.Output
	progress.Quiet = progress.Quiet || c.Quiet
	progress.Output = stderr
	defer func() { progress.Quiet, progress.Output = savedQuiet, savedOut }()
	if err := ctx.Run(e); err != nil {
		fmt.Fprintln(stderr, "strata:", err)
		var ue usageError
		var lu interface{ Usage() bool } // a library's usage error (launch.ConfigError)
		if errors.As(err, &ue) || errors.As(err, &lu) && lu.Usage() {
			return 2
		}
		return 1
	}
	return 0
}

// usageError marks errors in the flags' values (exit status 2).
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func main() {
	stop := startCPUProfile(os.Getenv("STRATA_CPU_PROFILE"), os.Stderr)
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
