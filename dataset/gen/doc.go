// Package gen generates synthetic node-classification datasets shaped like
// the large OGB graphs, with planted classes so that accuracy means
// something.
//
// # Model
//
// Every node u draws an expected degree w_u from a power law
// P(w) ~ w^-Exponent, clipped at MaxDegree and scaled so the mean is
// AvgDegree, and a class k_u (class k has share ~ (k+1)^-ClassSkew). Node u
// then sends about w_u/2 edges: with probability Homophily to a node of its
// own class, otherwise to a node of another class (the class chosen in
// proportion to its total expected degree); inside the class the endpoint is
// chosen in proportion to expected degree. This is a degree-corrected
// stochastic block model, or Chung-Lu graph with planted classes: every node
// also receives about w_u/2 edges, so its expected degree is w_u, and about
// a Homophily fraction of all edges join nodes of one class.
//
// Features are the node's class centroid (a random unit vector per class)
// plus isotropic Gaussian noise of expected norm Noise. With the presets'
// noise a classifier that sees one node's features alone is mediocre, while
// averaging over neighbors (what a GNN does) recovers the class far more
// often. Labels are the classes; every node is labeled, and each node falls
// in train, val, test or none with probabilities TrainFrac, ValFrac,
// TestFrac.
//
// # Stored graph
//
// The graph is undirected and stored both ways in one CSR (Dataset.Directed
// is false): every row is sorted ascending, has no duplicates and no
// self-loops, and v is in row u exactly when u is in row v. Because
// duplicates and self-loops are dropped, the stored edge count is a few
// percent below NumNodes*AvgDegree; the presets' AvgDegree is calibrated to
// hit their target counts.
//
// # Determinism
//
// Every random number is rng.Hash of a key derived from (Seed, kind of draw,
// node or class ID) and a per-node counter, never from a shared generator,
// so the output is a pure function of the Config, whatever GOMAXPROCS is or
// how the nodes are split among goroutines. Parallel passes work on fixed
// chunks of nodes and write only what their chunk owns; the CSR is filled by
// workers that each own a range of rows and scan the drawn edges in node
// order, so no atomics or floating-point reductions depend on the schedule.
// Bit-identical output across CPU architectures is not promised (math.Pow
// and math.Log may differ in the last bit between architectures).
//
// # Memory and speed
//
// The arrays are built in place with counting sorts and prefix sums: the
// only temporary of edge size is the list of drawn endpoints (4 bytes per
// undirected edge), freed before features are drawn. The products preset
// (2.45M nodes, ~124M stored edges, 100-d features) peaks near 1.85 GB
// (Config.EstimateBytes) and takes about 17 CPU-seconds to generate.
//
// # Presets
//
// tiny and small are for tests; products and papers (with papers-m and
// papers-s at 10% and 1%) have the OGB graphs' shapes and labels easy
// enough that GraphSAGE reaches 0.99+ within a few epochs. products-hard
// is the products shape with homophily 0.7 and noise 12: features alone
// are near useless and GraphSAGE climbs over many epochs (0.67 test
// accuracy after 3 epochs, 0.81-0.84 after 10 at 2% scale), so accuracy
// differences between training setups show; products-hard-s is it at 2%
// scale (49K nodes) for CPU checks.
//
// The hetero preset (HeteroPreset, GenerateHetero) is a typed dataset:
// papers, authors and fields, four relations, classes that only the edge
// types separate (HeteroConfig says how), so a type-aware model beats the
// same model with the types erased.
//
// Use Preset and Presets for named shapes, Config.Scaled to resize one, and
// Generate to build it; dataset.Write stores the result.
package gen
