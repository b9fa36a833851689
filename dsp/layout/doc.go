// Package layout holds one device's share of the topology in DSP's data
// layout (the first package of the reading order layout -> csp -> cache
// -> pipeline -> engine): the graph is partitioned into patches, renumbered so each patch
// owns a contiguous range of global IDs (package partition/book: the
// owner of a node is a range check), and device p keeps the rows of the
// in-adjacency for its range, with adjacency lists in global IDs.
//
// A Patch also records where each of its rows lives: rows are placed in
// device memory, longest first (the rows neighbor sampling touches most,
// as DSP's cache_graph does), until a byte budget is spent; the rest stay
// in host memory, read by the device over the bus (pinned memory through
// UVA on GPUs: the collective samplers' Split placement, package
// dsp/csp). Place reports a row's location; DeviceRowIDs lists the rows
// placed on the device.
//
// Memory: the patch shares the rows of the input graph (no copy) and
// holds an index of NumNodes+1 offsets, so that sample.NeighborSampler
// (which expects a square graph) can sample the patch directly, drawing
// exactly what it would draw on the whole graph.
package layout
