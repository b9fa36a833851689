// Package gpusample is node-wise neighbor sampling on the GPU: it draws a
// MiniBatch's blocks, removes duplicate nodes and relabels them entirely
// on the device (no host round trip), over a graph held in device memory
// or in mapped pinned host memory read through UVA (for graphs larger
// than the GPU).
//
// Sampler implements sample.Sampler: Sample downloads the blocks into a
// sample.MiniBatch. SampleDevice keeps them on the GPU as a Batch whose
// blocks are back-end Sparse matrices and device buffers, usable by the
// model without re-upload: Batch.NNBlocks hands them to package nn
// (nn.NewBlockFromSparse) with no host copy. SampleAsync queues a batch
// and Pending.Wait collects it, so a training loop can queue the next
// batch ahead of the current step and keep the GPU busy.
//
// HeteroSampler samples typed graphs (a fanout per relation and hop):
// sample.SampleTyped, the algorithm sample.HeteroSampler runs on the CPU,
// on a CUDA machine whose draws are a Sampler's per relation (the hop
// API) and whose relabel is Stepper.Relabel per node type, so uniform
// typed batches equal the CPU's byte for byte.
//
// # Back end
//
// The sampler is written against package backend's capabilities, found
// once in New: Kernels and Enqueuer (its CUDA C, sample.cu and hop.cu,
// is embedded here and compiled by the back end), PinnedMemory (the
// Mapped and Split placements, and the sizes read back per batch),
// Fences and SparseBuilder. The CUDA back end has them all; New refuses
// a back end without them, naming what it lacks. Sibling samplers run on
// handles from backend.Siblings.
//
// # Draws
//
// The rules and random streams are those of sample.NeighborSampler:
// destination v at hop h of batch key k draws from
// rng.Derive(sample.HopKey(k, h), v) on both. Uniform sampling with and
// without replacement (Floyd's algorithm, positions in row order) makes
// the same draws as the CPU, so those batches are identical to the CPU
// sampler's, byte for byte.
// Weighted sampling follows the same law with its own draws: with
// replacement by inverse CDF over per-row running weight sums (8 bytes
// per edge), without replacement by A-Res (keys log(U)/w, the k largest
// win), positions in row order.
//
// # Block building
//
// Per hop: counts per destination, an exclusive scan for offsets, one
// thread per destination for its draws, then deduplication with an
// open-addressing hash table that keeps each node's first position
// (atomicMin), a scan of first-occurrence flags for local ids, and a
// relabel pass. Destinations keep ids 0..NumDst-1 and new sources follow
// in first-seen order, exactly as sample.ToBlock. Buffers are sized by
// upper bounds (fanout times frontier), so sizes known only on the device
// need no synchronization until the batch is complete; fanout -1 reads
// the edge count once per hop.
package gpusample
