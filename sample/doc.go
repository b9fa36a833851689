// Package sample draws mini-batches for sampled GNN training: node-wise
// neighbor sampling with per-hop fanouts, producing per-layer bipartite
// blocks (message-flow graphs) with local relabeling, seeds first.
//
// A batch depends only on (seed, epoch, batch index) and the graph, never on
// how many goroutines sample it.
package sample
