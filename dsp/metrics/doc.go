// Package metrics counts what a DSP run does on each device: time per
// pipeline stage, queue occupancy, bytes moved per link kind (local memory,
// peer device, host memory, network) and purpose (sampling, features,
// gradients), and feature-cache hits. Counters are atomics, safe to update
// from concurrent stages; Snapshot copies them into plain structs that are
// written to the JSON report and printed during training.
package metrics
