// Package multi trains link predictors (package link) on several
// devices with Strata's two multi-device trainers, without a training
// loop of its own:
//
//   - RunDSP: sampled mini-batches in the DSP engine (dsp/engine), as
//     engine.Task. Every epoch the training links, in link.EpochEdges'
//     order, are dealt to the device that owns the link's source
//     (engine.Deal: owners first, then balanced to equal shares, cut
//     into batches of BatchSize positives); in the sampler stage of the
//     device, batch by batch ahead of the trainer (engine.TaskPreparer),
//     each positive gets its negatives (link.Negatives, keyed by the
//     global batch) and the distinct endpoints become the batch's seeds,
//     sampled collectively as node seeds are; the batch's links are removed from the sampled
//     neighborhoods (link.ExcludeTargets on the host; a GPU batch loses
//     them on its GPU, engine.TaskTargets with link.TargetKeys, and
//     travels on as node classification's batches do); the loss is binary
//     cross-entropy of the decoder's scores on the device's pairs
//     (link.PairLoss); gradients are all-reduced by the engine.
//     Device 0 evaluates with link.Evaluator after the epochs due.
//   - RunFullGraph: the full-graph trainer (package fullgraph) with
//     fullgraph.Task: every device computes its nodes' embeddings over
//     the whole message-passing graph, the embeddings are all-gathered,
//     each device scores the training pairs whose source it owns, and
//     the gradient of every embedding row goes back to its owner through
//     the trainer's layers (skip-broadcast and staleness apply as for
//     node classification).
//
// The split, the negatives, the decoder and the metrics are package
// link's; the links are split in the caller's node IDs (the trainers
// renumber nodes by partition), so the split and the evaluation pairs do
// not depend on the number of devices. On one device RunDSP gives the
// numbers of link.Run in sampled mode.
package multi
