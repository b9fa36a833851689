// Package cache is DSP's partitioned feature cache and loader.
//
// Every device has a byte budget of device memory for feature rows. The
// cache Plan decides which rows each device holds:
//
//   - Partition (DSP's PartitionCache, the default): device p caches the
//     hottest nodes of its own patch. Every hot row lives on exactly one
//     device, so together the devices cache up to K budgets' worth of
//     rows; a row cached elsewhere is one all-to-all away.
//   - Replicate with GroupSize g (GraphLearn's DeviceGroup): devices form
//     groups of g consecutive ranks; each group holds the same global
//     hottest rows, split round-robin among its members. g = 1 gives every
//     device its own full copy; g = K is a partitioned cache ranked
//     globally.
//
// Hotness is an order of nodes, hottest first: InDegree (the default, as
// DSP, GLT and Quiver), PageRank, ReversePageRank, or ByCounts from a
// pre-sampling pass (how often each node was an input node).
//
// Rows that are not cached anywhere are cold: they stay in host memory
// (pinned and read through UVA on GPUs; one shared table on the CPU).
//
// The Loader serves a batch's input nodes: it dedupes them, looks up each
// node's location in the plan (a table every device holds, 8 bytes per
// node), then fetches hot rows from peers by all-to-all (the owner of a row
// gathers it from its device buffer with Backend.GatherRows) while another
// goroutine copies cold rows from host memory, and finally scatters the
// rows into the batch's order. Whatever the budget and policy, the rows
// returned equal the feature table's.
package cache
