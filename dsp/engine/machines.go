package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/strata-gnn/strata/comm/world"
	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/dsp/machines"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/train"
)

// The per-machine layout (Options.Machine, package dsp/machines): the
// process loaded only its machine's directory, so the partition is the
// directory's, its rows come from the machine's shard and every other
// row from the feature service of the machine owning it.

// Partition computes the engine's partition of ds into devices parts
// (method and seed as Config.Partition and Train.Seed): what `strata
// partition --machines` writes, so that a job over machine directories
// trains on the same renumbered graph as one process with every device.
func Partition(ctx context.Context, ds *dataset.Dataset, devices int, method string, seed uint64) (*machines.Partitioned, error) {
	cfg := Config{Devices: devices, Partition: method}
	cfg.Train.Seed = seed
	if cfg.Partition == "" {
		cfg.Partition = Multilevel
	}
	pd, err := partitionData(ctx, ds, &cfg, nil)
	if err != nil {
		return nil, err
	}
	p := &machines.Partitioned{Orig: ds, Dataset: pd.ds, Book: pd.book, NewToOld: pd.newToOld, Method: pd.method, Seed: seed,
		MostlyZero: train.MostlyZero(ds.Features)}
	if p.NewToOld == nil { // no renumbering (one part, or range)
		p.NewToOld = make([]int32, ds.NumNodes())
		for i := range p.NewToOld {
			p.NewToOld[i] = int32(i)
		}
	}
	// RowNormAuto's decision on the whole table.
	p.NonNegative = train.NewDenseFeatures(ds.Features, int(ds.NumNodes()), ds.FeatDim, train.RowNormAuto).RowNormalized
	return p, nil
}

// machinePartition checks the machine directory against the job and
// returns it as the run's partition.
func machinePartition(ctx context.Context, dir *machines.Dir, cfg *Config, w *world.World) (*partitioned, error) {
	ms := w.Machines()
	counts := make([]int, len(ms))
	for i, ps := range ms {
		for _, p := range ps {
			counts[i] += p.Devices
		}
	}
	me := w.MachineOf(w.Process())
	if err := dir.CheckJob(me, len(ms), counts); err != nil {
		return nil, &RunError{Op: "machine directory", Err: err}
	}
	// Every process must hold a directory of the same partition.
	v, _ := json.Marshal(map[string]string{"fingerprint": dir.Manifest.Fingerprint})
	if err := w.Agree(ctx, "partition", v); err != nil {
		return nil, &RunError{Op: "machine directory", Err: fmt.Errorf("%w (%s is %s): %w", machines.ErrOtherPartition, dir.Path, dir, err)}
	}
	if dir.Book.K() != cfg.Devices {
		return nil, &RunError{Op: "machine directory", Err: fmt.Errorf("%s: a partition into %d parts for a job of %d ranks", dir.Path, dir.Book.K(), cfg.Devices)}
	}
	return &partitioned{ds: dir.Dataset, book: dir.Book, method: dir.Manifest.Method, edgeCut: -1}, nil
}

// machineFeatures prepares the machine's rows as the whole table's would
// be (the manifest's RowNormAuto decision, bf16 rounding), starts the
// feature service and, on a process that evaluates, fetches every row
// for the evaluator.
func (s *shared) machineFeatures(ctx context.Context, dir *machines.Dir) error {
	m, cfg := dir.Manifest, &s.cfg
	norm := cfg.Train.RowNorm
	if norm == train.RowNormAuto {
		norm = train.RowNormOff
		if m.NonNegative {
			norm = train.RowNormOn
		}
	}
	shard := train.NewDenseFeatures(dir.X, int(m.Hi-m.Lo), m.Cols, norm)
	shard.Round(cfg.Train.Prec())
	var hot *machines.Hot
	if h := dir.Hot; h != nil && len(h.IDs) > 0 {
		// Prepared as the shard: row normalization is per row.
		hx := train.NewDenseFeatures(h.X, len(h.IDs), m.Cols, norm)
		hx.Round(cfg.Train.Prec())
		hot = &machines.Hot{IDs: h.IDs, X: hx.Dense}
	}
	svc, err := machines.Start(ctx, machines.ServiceOptions{World: s.w, Dir: dir, X: shard.Dense, Hot: hot, In: s.in, CacheBytes: s.opts.RemoteCacheBytes,
		Timeout: s.opts.RemoteTimeout})
	if err != nil {
		return &RunError{Op: "feature service", Err: err}
	}
	s.svc = svc
	s.sparse = m.MostlyZero
	s.feats = &train.Features{Rows: int(m.Nodes), Cols: m.Cols, RowNormalized: shard.RowNormalized, BF16: shard.BF16}
	if s.w.First() == 0 || cfg.Train.Eval == train.Sampled {
		// The evaluator reads every row (the whole graph, or any
		// sampled batch).
		all, err := svc.All()
		if err != nil {
			return &RunError{Op: "feature service", Err: err}
		}
		s.feats.Dense = all
	}
	return nil
}

// shardSpec is what a device's store needs of the per-machine layout:
// the machine's shard and the rows of the others.
type shardSpec struct {
	src    cache.RowSource
	x      []float32 // rows [lo, hi)
	lo, hi int
	// The machine's hot rows of other machines (hottest first), and the
	// rows the device's cache holds.
	hotIDs   []int32
	hotX     []float32
	capacity int
}

// shard is device d's view of the feature service (nil without one).
func (s *shared) shard(d *device) *shardSpec {
	if s.svc == nil {
		return nil
	}
	lo, hi, x := s.svc.Shard()
	ids, hx := s.svc.Hot()
	return &shardSpec{src: s.svc.Source(d.m), x: x, lo: int(lo), hi: int(hi), hotIDs: ids, hotX: hx, capacity: s.capRow}
}

// prefetcher is the device's store when it can fetch a batch's remote
// rows while the batch waits in the sampler's queue: a shard store
// whose loads are plain gathers of the batch's IDs (no loader exchange,
// whose gathers are of other ID lists). On a GPU the sampler stage
// downloads the batch's input IDs for it (aheadIDs). Nil otherwise.
func (d *device) prefetcher() *cache.ShardStore {
	st, ok := d.kit.store.(*cache.ShardStore)
	if !ok || cache.Exchanges(d.s.plan) || d.s.cfg.NoPipeline {
		return nil
	}
	return st
}

// machineReport is what every process sends process 0 at the end.
type machineReport struct {
	Bytes   map[string]int64  `json:"bytes"`
	Fetches *machines.Fetches `json:"fetches,omitempty"`
	// Rows of other machines read from the hot rows: in device memory,
	// and on the host (hotServed).
	HotDevice int64 `json:"hot_device,omitempty"`
	HotHost   int64 `json:"hot_host,omitempty"`
}

// hotServed is the rows of other machines this process's devices read
// from the machine's hot rows: held in device memory (their shard
// stores' held rows), and on the host (the feature service's hot hits:
// staged, the devices' budgets not holding them).
func (s *shared) hotServed() (device, host int64) {
	if s.svc == nil {
		return 0, 0
	}
	for _, d := range s.devs {
		if d != nil && d.shard != nil {
			h, _ := d.shard.Served()
			device += h
		}
	}
	return device, s.svc.HotHits()
}

// perMachine collects every process's bytes per link and remote-feature
// requests through the store and, on process 0, sums them per machine
// (nil on the others). Every process of a job calls it once, after
// training.
func (s *shared) perMachine(ctx context.Context) ([]world.MachineInfo, error) {
	mine := machineReport{Bytes: map[string]int64{}}
	for _, r := range s.w.Ranks() {
		snap := s.ctrs[r].Snapshot(r)
		for _, byLink := range snap.Bytes {
			for l, n := range byLink {
				mine.Bytes[l] += n
			}
		}
	}
	if s.svc != nil {
		f := s.svc.Fetches()
		mine.Fetches = &f
		mine.HotDevice, mine.HotHost = s.hotServed()
	}
	b, err := json.Marshal(mine)
	if err != nil {
		return nil, err
	}
	all, err := s.w.Gather(ctx, "dsp-machine-metrics", b)
	if err != nil || all == nil { // only process 0 sums them
		return nil, err
	}
	var out []world.MachineInfo
	for m, ps := range s.w.Machines() {
		mi := world.MachineInfo{Machine: m, Host: ps[0].Host, Bytes: map[string]int64{}}
		var f machines.Fetches
		var hotDev, hotHost int64
		for _, p := range ps {
			mi.Processes = append(mi.Processes, p.Index)
			mi.Ranks = append(mi.Ranks, p.Ranks()...)
			var rep machineReport
			if err := json.Unmarshal(all[p.Index], &rep); err != nil {
				return nil, fmt.Errorf("%s sent a malformed metrics report: %w", p, err)
			}
			for l, n := range rep.Bytes {
				mi.Bytes[l] += n
			}
			if rep.Fetches != nil {
				f.Merge(*rep.Fetches)
			}
			hotDev, hotHost = hotDev+rep.HotDevice, hotHost+rep.HotHost
		}
		if f.Requests > 0 || hotDev+hotHost > 0 {
			mi.RemoteFeatures = &world.RemoteFeatures{Requests: f.Requests, Rows: f.Rows, Bytes: f.Bytes, HotRows: hotDev + hotHost, HotDeviceRows: hotDev}
			if f.Requests > 0 {
				mi.RemoteFeatures.P50Ms, mi.RemoteFeatures.P99Ms = f.Quantile(0.5), f.Quantile(0.99)
			}
		}
		out = append(out, mi)
	}
	return out, nil
}

// remoteLine is the progress line's remote-feature part: this process's
// requests so far and their latency, and the rows of other machines read
// from the hot rows, how many of them in device memory ("" without a
// feature service).
func (s *shared) remoteLine() string {
	if s.svc == nil {
		return ""
	}
	dev, host := s.hotServed()
	hot := fmt.Sprintf(", hot rows %d (%d on device)", dev+host, dev)
	f := s.svc.Fetches()
	if f.Requests == 0 {
		return " | remote rows 0" + hot
	}
	return fmt.Sprintf(" | remote rows %d in %d requests, p50 %.2fms p99 %.2fms", f.Rows, f.Requests, f.Quantile(0.5), f.Quantile(0.99)) + hot
}

// rankLinks is the link class from rank r to every rank: local to
// itself, network to a rank of another machine, peer otherwise.
func (s *shared) rankLinks(r int) []metrics.Link {
	k := s.cfg.Devices
	out := make([]metrics.Link, k)
	machineOf := make([]int, k)
	for m, ps := range s.w.Machines() {
		for _, p := range ps {
			for _, q := range p.Ranks() {
				machineOf[q] = m
			}
		}
	}
	for q := range k {
		switch {
		case q == r:
			out[q] = metrics.Local
		case machineOf[q] != machineOf[r]:
			out[q] = metrics.Network
		default:
			out[q] = metrics.Peer
		}
	}
	return out
}
