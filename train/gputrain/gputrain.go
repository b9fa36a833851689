package gputrain

import (
	"fmt"
	"slices"

	"github.com/strata-gnn/strata/feature"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/sample/gpusample"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/train"
)

// Options configure the source.
type Options struct {
	// FeatureBudget is the device memory, in bytes, for the feature
	// store (slot table and hot rows). 0: half of the device's free
	// memory. Rows that do not fit are read from pinned host memory,
	// hottest (highest in-degree) rows first on the device.
	FeatureBudget int64
	// Mapped keeps the graph structure in pinned host memory instead of
	// device memory (slower sampling, for graphs too large for the GPU).
	Mapped bool
}

// device is what the source needs of its back end beyond what the
// sampler and the feature store check: a queue (for the uninitialized
// input buffer) and its free memory (for the default feature budget).
type device interface {
	backend.Backend
	backend.Kernels
	backend.Enqueuer
	backend.Memory
}

// New returns a train.NewBatchSource for a back end that samples and
// gathers on the device (the CUDA back end; see package gpusample for
// the capabilities it needs).
func New(opt Options) train.NewBatchSource {
	return func(b backend.Backend, in *graph.CSR, x []float32, rows, cols int, fanouts []int) (train.BatchSource, error) {
		if b == nil {
			return nil, fmt.Errorf("gputrain: needs a device back end, got none")
		}
		dev, ok := b.(device)
		if !ok {
			return nil, fmt.Errorf("gputrain: %s cannot sample and gather on the device: it lacks run-time kernels, a queue or memory information (backend.Kernels, Enqueuer, Memory)", b.Name())
		}
		if opt.FeatureBudget < 0 {
			return nil, fmt.Errorf("gputrain: negative feature budget %d", opt.FeatureBudget)
		}
		place := gpusample.OnDevice
		if opt.Mapped {
			place = gpusample.Mapped
		}
		s, err := gpusample.New(dev, in, gpusample.Config{Fanouts: fanouts, Placement: place})
		if err != nil {
			return nil, err
		}
		budget := opt.FeatureBudget
		if budget == 0 {
			free, _, err := dev.MemInfo()
			if err != nil {
				s.Close()
				return nil, err
			}
			budget = int64(free / 2)
		}
		// At bf16 the store holds bfloat16 rows (x's values are
		// bfloat16s: train.Features.Round): twice the rows fit.
		bf16, vb := dev.Precision() == backend.BF16, int64(4)
		if bf16 {
			vb = 2
		}
		var hot []graph.NodeID
		if budget < 4*int64(rows)+vb*int64(rows)*int64(cols) {
			hot = feature.HotByInDegree(in) // only part fits: keep the hottest
		}
		fs, err := feature.New(dev, x, rows, cols, feature.Options{BudgetBytes: budget, Hot: hot, BFloat16: bf16})
		if err != nil {
			s.Close()
			return nil, err
		}
		return &Source{dev: dev, s: s, fs: fs, cols: cols}, nil
	}
}

// Source is the train.BatchSource New makes. Not safe for concurrent use.
type Source struct {
	dev  device
	s    *gpusample.Sampler
	fs   *feature.Store
	cols int
	next *queued
}

type queued struct {
	seeds []int32
	key   sample.Key
	p     *gpusample.Pending
}

var _ train.BatchSource = (*Source)(nil)

// Features returns the feature store (hot rows, device bytes).
func (s *Source) Features() *feature.Store { return s.fs }

// drop waits for and discards a queued batch that will not be used.
func (s *Source) drop() {
	if s.next == nil {
		return
	}
	if b, err := s.next.p.Wait(); err == nil {
		b.Free()
	}
	s.next = nil
}

// Prefetch queues the sampling of a batch for a later Batch call.
func (s *Source) Prefetch(seeds []int32, key sample.Key) error {
	s.drop()
	p, err := s.s.SampleAsync(seeds, key)
	if err != nil {
		return err
	}
	s.next = &queued{seeds: slices.Clone(seeds), key: key, p: p}
	return nil
}

// Batch returns the blocks and gathered input features of seeds' batch.
func (s *Source) Batch(seeds []int32, key sample.Key) ([]*nn.Block, backend.Buffer, func(), error) {
	return s.BatchDropout(seeds, key, 0, 0)
}

// BatchDropout is Batch with input dropout (rate p, mask seed seed)
// applied to the features while they are gathered
// (feature.Store.GatherDropout): no separate dropout pass.
func (s *Source) BatchDropout(seeds []int32, key sample.Key, p float32, seed uint64) ([]*nn.Block, backend.Buffer, func(), error) {
	var bt *gpusample.Batch
	var err error
	if q := s.next; q != nil && q.key == key && slices.Equal(q.seeds, seeds) {
		s.next = nil
		bt, err = q.p.Wait()
	} else {
		s.drop()
		bt, err = s.s.SampleDevice(seeds, key)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	defer bt.Free() // node and edge ids; later work on the stream is ordered after the gather
	nin := bt.Blocks[0].NumSrc
	var x backend.Buffer
	if err := s.dev.Enqueue(func(q backend.Queue) error {
		// Uninitialized: the gather writes every element.
		var err error
		x, err = q.AllocRaw(backend.Float32, nin*s.cols)
		return err
	}); err != nil {
		return nil, nil, nil, err
	}
	if err := s.fs.GatherDropout(x, bt.InputNodes(), p, seed); err != nil {
		s.dev.Free(x)
		return nil, nil, nil, err
	}
	blocks, err := bt.NNBlocks()
	if err != nil {
		s.dev.Free(x)
		return nil, nil, nil, err
	}
	release := func() {
		for _, k := range blocks {
			k.Free()
		}
		s.dev.Free(x)
	}
	return blocks, x, release, nil
}

// Close waits for a queued batch and releases the sampler's graph and
// the feature store.
func (s *Source) Close() error {
	s.drop()
	err := s.s.Close()
	if ferr := s.fs.Close(); err == nil {
		err = ferr
	}
	return err
}

// NewTyped returns a train.NewTypedSampler that samples typed batches on
// the device (gpusample.HeteroSampler: the CPU sampler's batches, drawn
// on the GPU), with the relations in device memory, or in mapped pinned
// host memory with opt.Mapped.
func NewTyped(opt Options) train.NewTypedSampler {
	return func(b backend.Backend, numNodes []int64, rels []sample.Relation, cfg sample.HeteroConfig) (sample.TypedSampler, error) {
		place := gpusample.OnDevice
		if opt.Mapped {
			place = gpusample.Mapped
		}
		return gpusample.NewHetero(b, numNodes, rels, cfg, place)
	}
}
