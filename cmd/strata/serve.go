package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/strata-gnn/strata/comm/auth"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/importer"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/internal/atomicfile"
	"github.com/strata-gnn/strata/partition"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/serve"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// envServeSecret holds the shared secret of `strata serve` (never a flag:
// command lines are visible to every local user).
const envServeSecret = "STRATA_SERVE_SECRET"

// serveCmd is 'strata serve': the sampling and feature server of package
// serve, for PyTorch trainers (python/strata_pyg) and other processes.
type serveCmd struct {
	Dataset  string `help:"Built-in dataset name (${builtins}), a Strata dataset directory (typed ones too: typed requests sample its types, others its graph with the types erased), or a directory 'strata import' understands (e.g. a folder of .npy arrays)." required:"" placeholder:"NAME|DIR"`
	NumNodes int64  `name:"num-nodes" help:"Node count of an imported .npy or edge-list dataset without features or labels, when it exceeds the largest node ID + 1 (0: inferred)." default:"0" placeholder:"N"`
	Device   string `help:"Where to sample: auto (a GPU if one opens, else cpu), cpu, cuda, cuda:N." default:"auto"`
	Devices  string `help:"Sample on several GPUs (cuda:0,1,...): a stream's batches go round-robin over them. Replaces --device." placeholder:"LIST"`
	Listen   string `help:"Address to serve gRPC on: HOST:PORT (loopback unless mutual TLS is on) or unix:PATH." default:"127.0.0.1:7077" placeholder:"ADDR"`
	Metrics  string `name:"metrics-listen" help:"Serve Prometheus metrics on http://ADDR/metrics (off if empty)." placeholder:"ADDR"`
	Ready    string `name:"ready-file" help:"Once serving, write the address to FILE (atomically): for scripts that start the server on port 0." placeholder:"FILE" type:"path"`

	TLSCert    string `name:"tls-cert" type:"path" help:"PEM certificate of the server; with --tls-key and --tls-ca, mutual TLS (clients must present a certificate the CA signed), required off loopback."`
	TLSKey     string `name:"tls-key" type:"path" help:"PEM private key of --tls-cert."`
	TLSCA      string `name:"tls-ca" type:"path" help:"PEM certificate of the CA that signed the clients' certificates."`
	TLSName    string `name:"tls-name" help:"DNS name in the certificates (strata if empty)."`
	SecretFile string `name:"secret-file" type:"path" help:"File holding the shared secret every request must carry (else STRATA_SERVE_SECRET; none: no secret)." placeholder:"FILE"`

	MaxMessageMB int           `name:"max-message-mb" help:"Largest reply message in MiB (a batch with its features must fit)." default:"512"`
	MaxRequestMB int           `name:"max-request-mb" help:"Largest request message in MiB." default:"64"`
	Workers      int           `help:"Batches a stream samples at once, unless its request says." default:"1"`
	MaxWorkers   int           `name:"max-workers" help:"Most batches one stream may sample at once." default:"64"`
	Prefetch     int           `help:"Batches a stream keeps sampled ahead of its client, unless its request says." default:"4"`
	MaxPrefetch  int           `name:"max-prefetch" help:"Most batches a stream may keep ahead." default:"64"`
	MaxStreams   int           `name:"max-streams" help:"Sample streams open at once, over all clients." default:"256"`
	MaxSamplers  int           `name:"max-samplers" help:"Distinct fanout lists kept ready (each GPU sampler holds its own copy of the graph)." default:"8"`
	Drain        time.Duration `name:"drain-timeout" help:"On SIGTERM or SIGINT, how long running streams may take to finish before they are cut." default:"30s"`
	ExitParent   bool          `name:"exit-with-parent" help:"Drain and exit when the parent process exits or standard input closes (how strata_pyg starts its child server)."`

	RingDir        string        `name:"ring-dir" type:"path" help:"Offer SampleShm, worker mode's shared-memory ring: each stream's ring is a file in DIR (on a memory file system such as /dev/shm; strata_pyg passes its child its private directory)." placeholder:"DIR"`
	RingMB         int           `name:"ring-mb" help:"Most MiB one stream's ring takes (and at most half the free space of --ring-dir)." default:"2048"`
	ReleaseTimeout time.Duration `name:"release-timeout" help:"How long a SampleShm stream waits for its client to release a ring slot, unless the client says." default:"1h"`
	Part           int           `name:"part" help:"Own part P of a partition: --dataset is then the output directory of 'strata partition' (partition.bin and dataset/), and clients route each seed to the server of its part (-1: none)." default:"-1" placeholder:"P"`
}

func (c *serveCmd) Validate() error {
	err := firstError(
		intIn("max-message-mb", c.MaxMessageMB, 1, 2047),
		intIn("max-request-mb", c.MaxRequestMB, 1, 2047),
		intIn("max-workers", c.MaxWorkers, 1, 1024),
		intIn("workers", c.Workers, 1, 1024),
		intIn("max-prefetch", c.MaxPrefetch, 1, 1024),
		intIn("prefetch", c.Prefetch, 1, 1024),
		intIn("max-streams", c.MaxStreams, 1, 1<<20),
		intIn("max-samplers", c.MaxSamplers, 1, 1024),
		intIn("num-nodes", c.NumNodes, 0, dataset.MaxNodes),
		durationIn("drain-timeout", c.Drain, 0, 24*time.Hour),
		intIn("ring-mb", c.RingMB, 1, 1<<20),
		durationIn("release-timeout", c.ReleaseTimeout, time.Second, 24*time.Hour),
		intIn("part", c.Part, -1, partition.MaxParts-1),
	)
	if err != nil {
		return err
	}
	if c.Workers > c.MaxWorkers {
		return usageError{fmt.Errorf("--workers %d exceeds --max-workers %d", c.Workers, c.MaxWorkers)}
	}
	if c.Prefetch > c.MaxPrefetch {
		return usageError{fmt.Errorf("--prefetch %d exceeds --max-prefetch %d", c.Prefetch, c.MaxPrefetch)}
	}
	return nil
}

func durationIn(flag string, v, lo, hi time.Duration) error {
	if v < lo || v > hi {
		return rangeErr(flag, v, fmt.Sprintf("%v..%v", lo, hi))
	}
	return nil
}

// security reads the TLS files and the secret.
func (c *serveCmd) security() (auth.Security, error) {
	sec, err := auth.Config{TLSCert: c.TLSCert, TLSKey: c.TLSKey, TLSCA: c.TLSCA, TLSName: c.TLSName}.Security()
	if err != nil {
		return sec, usageError{err}
	}
	secret, err := readSecret(envServeSecret, "secret-file", c.SecretFile)
	if err != nil {
		return sec, err
	}
	if secret != "" {
		sec.Secret = []byte(secret)
	}
	return sec, nil
}

// readSecret is a shared secret: the contents of file (flag names it in
// errors) without surrounding space when given, else the variable env
// ("" when neither is set). An empty or unreadable file is a usage error.
func readSecret(env, flag, file string) (string, error) {
	if file == "" {
		return os.Getenv(env), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", usageError{fmt.Errorf("--%s: %w", flag, err)}
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", usageError{fmt.Errorf("--%s %s is empty", flag, file)}
	}
	return s, nil
}

// openTyped opens --dataset when it is a typed dataset (format version
// 2, or a typed layout the importer reads); nil when it is not.
func (c *serveCmd) openTyped(quiet bool) (*dataset.Hetero, func(), error) {
	noop := func() {}
	if slices.Contains(builtinNames, c.Dataset) {
		return nil, noop, nil
	}
	if _, err := os.Stat(c.Dataset); err != nil {
		return nil, noop, nil // openServeDataset says why
	}
	typed := false
	if isDir, err := hasManifest(c.Dataset); err == nil && isDir {
		v, err := dataset.ManifestVersion(c.Dataset)
		typed = err == nil && v == dataset.FormatVersionHetero
	} else if kind, err := importer.Detect(c.Dataset); err == nil {
		typed = importer.IsTyped(kind)
	}
	if !typed {
		return nil, noop, nil
	}
	if c.Part >= 0 || c.NumNodes != 0 {
		return nil, noop, usageError{fmt.Errorf("--dataset %s is typed: --part and --num-nodes apply to homogeneous datasets", c.Dataset)}
	}
	return openHetero(c.Dataset, quiet)
}

// openServeDataset is openDataset with --num-nodes for imports, and with
// --part the renumbered dataset of a partition with the part it owns.
func (c *serveCmd) openServeDataset(quiet bool) (*dataset.Dataset, *serve.Partition, func(), error) {
	if c.Part >= 0 {
		if c.NumNodes != 0 {
			return nil, nil, func() {}, usageError{fmt.Errorf("--num-nodes applies to imported datasets, not to a partition's (--part=%d)", c.Part)}
		}
		saved, ds, err := partition.Load(c.Dataset, dataset.OpenOptions{Quiet: quiet})
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, nil, func() {}, usageError{fmt.Errorf("--dataset %s is not an output directory of 'strata partition', which --part=%d needs: %w", c.Dataset, c.Part, err)}
			}
			return nil, nil, func() {}, err
		}
		if c.Part >= saved.Book.K() {
			ds.Close()
			return nil, nil, func() {}, usageError{fmt.Errorf("--part=%d: the partition in %s has %d parts (0..%d)", c.Part, c.Dataset, saved.Book.K(), saved.Book.K()-1)}
		}
		fp := saved.Meta.OutputFingerprint
		if fp == "" {
			fp = ds.Fingerprint()
		}
		return ds, &serve.Partition{Book: saved.Book, Part: c.Part, Fingerprint: fp}, func() { ds.Close() }, nil
	}
	ds, closeDS, err := c.openImported(quiet)
	return ds, nil, closeDS, err
}

func (c *serveCmd) openImported(quiet bool) (*dataset.Dataset, func(), error) {
	if c.NumNodes == 0 {
		return openDataset(c.Dataset, quiet)
	}
	if _, err := os.Stat(c.Dataset); err != nil && !slices.Contains(builtinNames, c.Dataset) {
		return nil, func() {}, usageError{fmt.Errorf("--dataset %q is not a readable path: %w", c.Dataset, err)}
	}
	kind, err := importer.Detect(c.Dataset)
	if err != nil || (kind != importer.NPY && kind != importer.SNAP) {
		return nil, func() {}, usageError{fmt.Errorf("--num-nodes applies to .npy folders and edge lists, and --dataset %s is neither", c.Dataset)}
	}
	ds, err := importer.Load(kind, c.Dataset, importer.Options{Quiet: quiet, NumNodes: c.NumNodes})
	return ds, func() {}, err
}

// samplers returns the sampler factory and the device description: nil
// (the server's CPU sampler) on the CPU, the GPU sampler on each GPU.
func (c *serveCmd) samplers(note io.Writer) (func(in *graph.CSR) func([]int, bool) ([]sample.Sampler, error), string, error) {
	var bs []backend.Backend
	if c.Devices != "" {
		set, err := parseDevices(c.Devices)
		if err != nil {
			return nil, "", err
		}
		if set.Kind == "cpu" {
			return nil, "cpu", nil // the CPU sampler uses every core already
		}
		if bs, err = set.open(false); err != nil {
			return nil, "", err
		}
	} else {
		b, err := openDeviceNote(c.Device, note)
		if err != nil {
			return nil, "", err
		}
		bs = []backend.Backend{b}
	}
	var names []string
	for _, b := range bs {
		if !onDevice(b) {
			return nil, "cpu", nil
		}
		names = append(names, deviceSpecOf(b))
	}
	return func(in *graph.CSR) func([]int, bool) ([]sample.Sampler, error) {
		return func(fanouts []int, replace bool) ([]sample.Sampler, error) {
			out := make([]sample.Sampler, 0, len(bs))
			for _, b := range bs {
				s, err := gpusample.New(b, in, gpusample.Config{Fanouts: fanouts, Replace: replace})
				if err != nil {
					for _, o := range out {
						o.(io.Closer).Close()
					}
					return nil, err
				}
				out = append(out, s)
			}
			return out, nil
		}
	}, strings.Join(names, ","), nil
}

func (c *serveCmd) Run(e *env) error {
	// Signals are caught from the start: one that comes before the server
	// is up still ends it cleanly, after the ready file.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	sec, err := c.security()
	if err != nil {
		return err
	}
	if err := serve.CheckListen(c.Listen, sec.TLS != nil); err != nil {
		return usageError{err}
	}
	var note io.Writer = e.stderr
	if e.quiet {
		note = nil
	}
	mk, device, err := c.samplers(note)
	if err != nil {
		return err
	}
	het, closeHet, err := c.openTyped(e.quiet)
	if err != nil {
		return err
	}
	defer closeHet()
	var ds *dataset.Dataset
	var part *serve.Partition
	if het != nil {
		// The typed graph is sampled by typed requests; the others sample
		// it with its types erased.
		if ds, err = het.ToHomogeneous(); err != nil {
			return err
		}
	} else {
		var closeDS func()
		if ds, part, closeDS, err = c.openServeDataset(e.quiet); err != nil {
			return err
		}
		defer closeDS()
	}
	in, err := ds.InAdjacency()
	if err != nil {
		return err
	}
	opt := serve.Options{Dataset: ds, In: in, Device: device, MaxSendBytes: c.MaxMessageMB << 20, MaxRecvBytes: c.MaxRequestMB << 20,
		Workers: c.Workers, MaxWorkers: c.MaxWorkers, Prefetch: c.Prefetch, MaxPrefetch: c.MaxPrefetch,
		MaxStreams: c.MaxStreams, MaxSamplers: c.MaxSamplers, Secret: sec.Secret, TLS: sec.TLS, Metrics: serve.NewMetrics(),
		RingDir: c.RingDir, RingBytes: int64(c.RingMB) << 20, ReleaseTimeout: c.ReleaseTimeout, Partition: part, Hetero: het}
	if mk != nil {
		opt.NewSamplers = mk(in)
	}
	serve.Version = train.Version
	srv, err := serve.New(opt)
	if err != nil {
		return err
	}
	ln, err := serve.Listen(c.Listen)
	if err != nil {
		return err
	}
	addr := c.Listen
	if _, unix := serve.UnixPath(c.Listen); !unix {
		addr = ln.Addr().String()
	}
	var metricsSrv *http.Server
	if c.Metrics != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(opt.Metrics.Registry, promhttp.HandlerOpts{}))
		metricsSrv = &http.Server{Addr: c.Metrics, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		mln, err := serve.Listen(c.Metrics)
		if err != nil {
			ln.Close()
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		go metricsSrv.Serve(mln)
		defer metricsSrv.Close()
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if c.Ready != "" {
		if err := atomicfile.WriteFile(c.Ready, []byte(addr+"\n")); err != nil {
			srv.Stop()
			return fmt.Errorf("--ready-file: %w", err)
		}
	}
	owns := ""
	if part != nil {
		lo, hi := part.Book.Range(part.Part)
		owns = fmt.Sprintf(", owning part %d of %d (nodes %d..%d)", part.Part, part.Book.K(), lo, hi-1)
	}
	fmt.Fprintf(e.stderr, "strata serve: %s (%d nodes, %d edges, %d features, %d classes) sampled on %s%s, serving on %s\n",
		ds.Name, ds.NumNodes(), in.NumEdges(), ds.FeatDim, ds.NumClasses, device, owns, addr)

	return runUntilStopped(e, "strata serve", srv, served, sigs, c.ExitParent, c.Drain, c.RingDir, func() {
		if metricsSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			metricsSrv.Shutdown(ctx)
			cancel()
		}
	})
}

// runUntilStopped serves until srv stops by itself (served), a signal
// comes (a second one cuts the drain short) or, with exitParent, the
// parent goes; then drains srv within drain and calls drained. name
// prefixes the lines it prints (strata serve, strata relay).
func runUntilStopped(e *env, name string, srv *serve.Server, served chan error, sigs chan os.Signal, exitParent bool,
	drain time.Duration, ringDir string, drained func()) error {
	orphan := make(chan string, 1)
	if exitParent {
		watchParent(orphan)
	}
	var why string
	timeout := drain
	select {
	case err := <-served:
		return err
	case s := <-sigs:
		why = "signal " + s.String()
	case why = <-orphan:
		timeout = min(timeout, 5*time.Second) // nobody is left to read long streams
		if ringDir != "" {
			// The ring directory is the dead parent's private one, which it
			// cannot remove now: once the server is down (socket and rings
			// gone), remove it if nothing else is left there.
			defer os.Remove(ringDir)
		}
	}
	fmt.Fprintf(e.stderr, "%s: %s: draining (streams may finish within %v)\n", name, why, timeout)
	cut := make(chan struct{})
	var once sync.Once
	go func() {
		select {
		case <-sigs:
			once.Do(func() { close(cut) })
			srv.Stop()
		case <-cut:
		}
	}()
	clean := srv.Drain(timeout)
	once.Do(func() { close(cut) })
	drained()
	if err := <-served; err != nil {
		return err
	}
	if !clean {
		fmt.Fprintf(e.stderr, "%s: streams still running at the deadline were cut\n", name)
	}
	fmt.Fprintf(e.stderr, "%s: stopped\n", name)
	return nil
}

// watchParent sends a reason on orphan when standard input reaches its
// end or the parent process changes (it died and this process was
// adopted): strata_pyg holds the other end of the child's stdin, which
// the kernel closes however the trainer dies.
func watchParent(orphan chan<- string) {
	ppid := os.Getppid()
	go func() {
		io.Copy(io.Discard, os.Stdin)
		select {
		case orphan <- "standard input closed (parent gone)":
		default:
		}
	}()
	go func() {
		for range time.Tick(500 * time.Millisecond) {
			if os.Getppid() != ppid {
				select {
				case orphan <- fmt.Sprintf("parent process %d exited", ppid):
				default:
				}
				return
			}
		}
	}()
}
