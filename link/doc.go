// Package link trains link predictors: a node encoder (GCN, GraphSAGE or
// GAT, package nn) and a decoder scoring node pairs (dot product or an
// MLP on the Hadamard product), with binary cross-entropy on positive
// edges and sampled negatives, evaluated by AUC, MRR and Hits@K on
// held-out edges ('strata train --task link').
package link
