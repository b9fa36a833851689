// Package csp is DSP's collective sampling primitive (CSP) on the devices
// of a run, GPUs or CPU back ends: every device holds the in-adjacency rows of
// its range of node IDs (a layout.Patch) in its memory, and the devices
// draw mini-batches together, one hop at a time, without any host copy
// of frontiers or neighbors on a GPU: node-wise (Sampler, below),
// layer-wise (LayerSampler), typed (TypedSampler) and random walks
// (Walker) in the sections after. A node-wise hop:
//
//  1. shuffle: the frontier (device, deduplicated, global IDs; its size
//     is read on the device) is grouped by owner (a range check on the
//     partition offsets, then a two-pass counting scatter with
//     shared-memory ranks), and the same kernel writes the header: per
//     peer the number of nodes it gets, the requester's hop key, hop,
//     fanout, frontier size and a status word. A header all-to-all and
//     one read of the header to the host size the node IDs' all-to-all-v;
//  2. sample: each owner draws all received nodes of all requesters in
//     one pass over its patch with package gpusample's per-node body
//     (gs_draw_row under each requester's hop key), so the picks equal
//     the single-GPU sampler's. With a fixed fanout k every node gets k
//     answer slots, the unused ones -1 (gpusample's DrawStrided): answer
//     sizes follow from the header, so no totals are exchanged;
//  3. reshuffle: the slots go back in one int32 all-to-all-v (edge IDs in
//     a second, int64 one when Config.EdgeIDs is set); the requester
//     counts each row's valid slots, scans, and compacts them into
//     frontier order, then deduplicates/relabels with gpusample's kernels
//     (Stepper.Relabel), whose sizes stay on the device: the next hop's
//     routing reads the new frontier's size there.
//
// A hop that takes every neighbor (fanout -1) has no fixed slot count: the
// owner counts, the ranks exchange per-requester totals (a second status
// exchange, two more reads), and the answers carry counts and neighbors.
//
// Sample therefore returns exactly the batch that
// gpusample.Sampler.SampleDevice (and sample.NeighborSampler) returns
// over the whole graph with the same seeds and key (seeds, every block's
// SrcNodes, indptr and indices; EdgeIDs too with Config.EdgeIDs), for any
// number of devices and any contiguous partition.
//
// # Host waits
//
// A collective through the communicator returns when the device has run
// it, and a read of device-known sizes waits too; between them the host
// only queues work. A hop with a fixed fanout waits 4 times (header
// exchange, header read, node exchange, answer exchange; 5 with
// EdgeIDs), a fanout -1 hop 7 (8), and a step ends with one read of every
// block's sizes: 13 waits for three hops (the first version of this
// package waited 24 times, 8 per hop). Stats.Waits counts them. A single
// rank (nil communicator) skips the protocol and samples its patch, which
// is then the whole graph, with gpusample.SampleDevice (one wait;
// sample.NeighborSampler on the CPU).
//
// # Machines
//
// The protocols (proto.go, layerproto.go, walkproto.go) are written once
// against small machine interfaces (Machine, SamplerMachine,
// LayerMachine, WalkMachine): the buffers and kernels they need. The
// constructors pick the machine from the back end they are given: the
// CPU back end (tensor/backend/cpu) gets cpuMachine, every kernel in Go
// over the back end's host buffers (machine_cpu.go, layer_cpu.go,
// walk_cpu.go), whose draws are package sample's; a device the
// registered Device accepts gets its machines: package
// internal/cudadsp registers the CUDA ones (csp.cu, layer.cu, walk.cu
// and gpusample's hop API), and this package never imports it. CPU devices thus run
// the code GPUs run, with host communicators (one comm.Comm interface
// for both), and the CPU machine is the reference the kernels are
// checked against: the tests run every protocol on it, 1-4 ranks with
// random delays and injected failures, against package sample's
// single-device samplers (and the tests' plain single-device layer-wise
// sampler). A Sample returns a Batch: Device (a gpusample.Batch) on a
// GPU, Host (a sample.MiniBatch over the machine's buffers) on the CPU.
//
// Read the package in this order: machine.go, proto.go (node-wise),
// machine_cpu.go, then layerproto.go with layeralloc.go and walkproto.go;
// internal/cudadsp's machines and kernels last.
//
// # Layer-wise sampling
//
// LayerSampler draws layer-wise batches: Fanouts[hop] is the number of
// edges drawn for the whole layer; frontier node v receives each draw
// with probability p_v = w_v / sum(w) (w_v is v's degree, or its total
// edge weight when weighted), then draws that many in-neighbors. With
// replacement the layer's edges are i.i.d. draws; without replacement
// (unweighted only) they are distinct edges, uniform among all edges of
// the frontier. The data flow is the node-wise one: frontiers, answers
// and blocks stay on the devices. A hop routes the frontier as above (the header
// carries the requester's node key), the owners answer each node's
// degree (and row weight sum) in an int64 all-to-all-v, and the
// requester reads its frontier's degrees, in frontier order with each
// node's owner, to the host: the allocation of the layer's budget over
// the frontier (LayerAllocate over the degrees or weights: i.i.d. draws,
// or Floyd's algorithm over the frontier's edge slots) runs there,
// because it is sequential in floating point; the result depends only on
// (graph, seeds, key), never on the number of devices. The counts go
// to the owners in an all-to-all-v that carries, per owner, a status and
// the total asked; each owner reads those 2P words, checks every count
// (a refused count, or a total that does not add up,
// draws nothing and fails the step on that rank when it reads its sizes),
// draws, and the answers come back in an int32 all-to-all-v (edge IDs in
// an int64 one). Uniform draws are gpusample's per-node body (gs_draw_row
// through the hop API, under the layer's node key: with replacement in
// draw order, without by Floyd's algorithm in row order); weighted draws
// (with replacement) are an inverse CDF (lw_draw_weighted) over this
// package's copy of the rows and their running weight sums. The
// requester knows every count, so the block's row offsets come from the
// host and only the relabeling's size is read back.
//
// A layer-wise hop waits 8 times with several ranks (header exchange and
// read, node, degree and allocation exchanges, the degree read, the
// allocation headers' read, the answer exchange; 9 with EdgeIDs), 3
// times on one rank (the reads), and a step ends with one read of the
// sizes and the violation counters. A single rank runs the protocol with
// local copies (there is no single-GPU layer-wise sampler to defer to).
//
// # Typed sampling
//
// TypedSampler draws heterogeneous batches (a fanout per relation and
// hop, sample.HeteroSampler's) collectively: every node type has its own
// contiguous partition, and for each relation a rank holds the rows of
// the destinations it owns (a patch of the relation's square view). The
// algorithm is sample.SampleTyped on a machine whose draw of a hop's
// relations (sample.HopDrawer) is the node-wise hop above without its
// relabeling, run for all of them at once (typedhop.go): each relation
// routes its frontier on its Machine (the relation's stream key as the
// hop key), and one header all-to-all carries, per peer, one row per
// relation; the requests of every relation go in one all-to-all-v (per
// peer, the relations' segments in relation order, packed and unpacked
// by device copies, so the kernels see the per-relation buffers), the
// answers in one (edge IDs in a second), the totals of the relations at
// fanout -1 in one all-to-all, and one read brings every relation's edge
// count. A hop thus makes the collective rounds of a homogeneous hop (3:
// header, nodes, answers; +1 with EdgeIDs, +1 with a fanout -1
// relation) and waits 5 times (those, the header read and the counts'
// read; +1 with EdgeIDs, +3 with a fanout -1 relation) whatever the
// number of relations, plus a read per node type that gained sources,
// for its relabel (the per-relation hop made 5 waits per relation). Relabel is the Machine's over a
// type's frontier followed by its relations' sources (nF may be 0 there:
// a type reached only as a source). Every rank draws every relation
// sampled at a hop, even with an empty frontier of its type
// (sample.EmptyDrawer). The batch comes back on the host, equal to
// sample.HeteroSampler's. Failures before a hop's header (bad seeds, a
// failed relabel, a routing failure) are reported in every relation's
// rows of it, so every rank fails at the same hop.
//
// # Random walks
//
// Walker draws sample.RandomWalk's walks collectively, with the walkers
// in device memory: a walker (origin rank, walk index,
// stream key, node) travels to the owner of its node (routed by the same
// kernels as a frontier; a header exchange and read size the walkers'
// int64 all-to-all-v), the owner takes the step (wk_step: row v's entry
// rng_below(rng_hash(key, t), degree)) and keeps the walker and the
// step's trace; a walker at a node without neighbors stops. After the
// last step every rank reads its violation counter (walkers it could not
// step fail every rank through the next header), the traces are routed
// to their origins (the routing kernels over the identity offsets),
// exchanged and written into the walks' slots, and a last read checks
// them. A walk of length L waits 3L+5 times with several ranks, L+3 on
// one; the walks (int32, start first, -1 after a dead end) stay on the
// device (Walks.Download copies them).
//
// # Failures
//
// Sample is a collective: every rank calls it the same number of times
// in the same order. Invalid seeds, a frontier whose fixed-fanout hop
// could exceed gpusample's 2^30-entry bound, and failures of a rank
// before a hop's header (its routing, the previous hop's relabeling)
// are reported in that header's status word, as are a fanout -1 hop's
// owner-side failures before its totals exchange, so every rank fails at
// the same step: the failing one with its own error, the others with
// ErrPeer naming it. A failure between a hop's header and its last
// exchange (an allocation or a draw that fails on the device, more than
// 2^31-1 answer slots at an owner), a protocol violation or a device
// failure in the middle of an exchange returns at once on the rank that
// sees it; its peers' next collective then fails at the context's
// deadline. Every error is an *Error naming the rank and hop.
//
// LayerSampler fails the same way; besides, a requester whose allocation
// fails (an impossible degree answer, a layer that would exceed the
// block bounds) reports it in the allocation's status words, so every
// rank fails at that hop too. Walker.Walk fails as Sample does, a step
// standing for a hop (Error.Hop is the step; Length for the traces'
// return); invalid starts fail every rank at step 0.
package csp
