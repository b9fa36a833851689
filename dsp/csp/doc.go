// Package csp holds LayerAllocate, the requester's allocation of a
// layer-wise hop's edge budget over its frontier, which the collective
// layer-wise sampler (package dsp/gpucsp) runs on the host: with
// replacement, i.i.d. draws of frontier node i with probability
// w_i/sum(w) (w_i its degree or total edge weight); without replacement,
// distinct edges uniform among all the frontier's edges (Floyd's
// algorithm over its edge slots). The result depends only on the
// frontier's degrees and weights and the key, never on the number of
// devices.
package csp
