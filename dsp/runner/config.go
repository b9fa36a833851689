package runner

import (
	"fmt"
	"time"

	"github.com/strata-gnn/strata/dsp/cache"
	"github.com/strata-gnn/strata/train"
)

// Sampling schemes.
const (
	NodeWise  = "node"
	LayerWise = "layer"
)

// Partitioning methods.
const (
	// Multilevel partitions with package partition and renumbers the
	// nodes (the default with several devices).
	Multilevel = "multilevel"
	// METIS is Multilevel with libmetis.
	METIS = "metis"
	// Range splits the existing node IDs into equal contiguous ranges
	// (no partitioning, no renumbering).
	Range = "range"
)

// Rebalancing modes.
const (
	Pad  = "pad"
	Trim = "trim"
)

// Config describes a multi-device run.
type Config struct {
	// Train is the model, optimizer and schedule, as for the single-device
	// trainer. Mode must be "sampled". Device 0 evaluates after every epoch,
	// over the whole graph (Eval "full") or on sampled batches.
	Train train.Config `json:"train"`
	// Devices is the number of devices (ranks).
	Devices int `json:"devices"`
	// Scheme is NodeWise (default) or LayerWise; for LayerWise,
	// Train.Fanouts are the edges drawn per layer.
	Scheme string `json:"scheme"`
	// Replace and Weighted select the sampling variant (default uniform
	// without replacement, the single-device trainer's).
	Replace  bool `json:"replace"`
	Weighted bool `json:"weighted"`
	// Partition is Multilevel (default), METIS or Range.
	Partition string `json:"partition"`
	// TopologyBytes is each device's budget for its patch's rows; the rest
	// stays in host memory. 0 or negative: no limit.
	TopologyBytes int64 `json:"topology_bytes"`
	// CacheBytes is each device's budget for cached feature rows (0: every
	// row comes from host memory; negative: room for every row).
	CacheBytes  int64         `json:"cache_bytes"`
	CachePolicy cache.Policy  `json:"cache_policy"` // partition (default) | replicate | auto
	CacheGroup  int           `json:"cache_group"`  // replicate: devices per copy
	Hotness     cache.Hotness `json:"hotness"`      // in-degree (default) | pagerank | reverse-pagerank | presample
	// QueueCapacity bounds each queue between stages (default 2).
	QueueCapacity int `json:"queue_capacity"`
	// Rebalance is Pad (default) or Trim.
	Rebalance string `json:"rebalance"`
	// NoCoordinator lets the stages issue collectives without the
	// launch-order coordinator (comm.Coordinator). That is safe with
	// separate in-process communicators; GPUs need the coordinator.
	NoCoordinator bool `json:"no_coordinator"`
	// BucketBytes is the size of the gradient buckets all-reduced at once
	// (default 10 MiB, as MegEngine's ParamPack).
	BucketBytes int `json:"bucket_bytes"`
	// WaitTimeout bounds every wait of a stage: for a queue, for its turn
	// to launch a collective (default 10 minutes: it must exceed the
	// longest legitimate wait, device 0's evaluation after an epoch).
	// CommTimeout bounds each collective (default 5 minutes).
	WaitTimeout time.Duration `json:"wait_timeout"`
	CommTimeout time.Duration `json:"comm_timeout"`
}

// Defaults returns the single-device defaults of model on k devices, with
// a feature cache large enough for every row.
func Defaults(model string, k int) Config {
	return Config{Train: train.Defaults(model), Devices: k, CacheBytes: -1}
}

// maxDevices bounds Devices.
const maxDevices = 1 << 10

// ConfigError reports an invalid field.
type ConfigError struct {
	Field string
	Msg   string
}

func (e *ConfigError) Error() string { return "dsp: config " + e.Field + ": " + e.Msg }

// normalize fills defaults and validates.
func (c *Config) normalize() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if err := c.Train.Validate(); err != nil {
		return err
	}
	if c.Train.Mode != train.Sampled {
		return bad("mode", "multi-device training is sampled mini-batch training, not %q", c.Train.Mode)
	}
	if c.Devices < 1 || c.Devices > maxDevices {
		return bad("devices", "%d not in [1, %d]", c.Devices, maxDevices)
	}
	switch c.Scheme {
	case "":
		c.Scheme = NodeWise
	case NodeWise, LayerWise:
	default:
		return bad("scheme", "unknown scheme %q (want node or layer)", c.Scheme)
	}
	if c.Scheme == LayerWise && c.Weighted && !c.Replace {
		return bad("weighted", "weighted layer-wise sampling is with replacement only")
	}
	switch c.Partition {
	case "":
		c.Partition = Multilevel
	case Multilevel, METIS, Range:
	default:
		return bad("partition", "unknown method %q (want multilevel, metis or range)", c.Partition)
	}
	if c.CachePolicy == "" {
		c.CachePolicy = cache.Partition
	}
	if _, err := cache.ParsePolicy(string(c.CachePolicy)); err != nil {
		return bad("cache_policy", "%v", err)
	}
	if c.CachePolicy == cache.Replicate && c.CacheGroup == 0 {
		c.CacheGroup = 1
	}
	if c.CachePolicy == cache.Replicate && (c.CacheGroup < 1 || c.Devices%c.CacheGroup != 0) {
		return bad("cache_group", "%d does not divide %d devices", c.CacheGroup, c.Devices)
	}
	if c.CachePolicy == cache.Auto && c.CacheGroup != 0 {
		return bad("cache_group", "the auto policy chooses the group (got %d)", c.CacheGroup)
	}
	if c.CachePolicy == cache.Partition && c.CacheGroup != 0 && c.CacheGroup != c.Devices {
		return bad("cache_group", "the partition policy spans all devices")
	}
	h, err := cache.ParseHotness(string(c.Hotness))
	if err != nil {
		return bad("hotness", "%v", err)
	}
	c.Hotness = h
	if c.QueueCapacity == 0 {
		c.QueueCapacity = 2
	}
	if c.QueueCapacity < 1 || c.QueueCapacity > 1024 {
		return bad("queue_capacity", "%d not in [1, 1024]", c.QueueCapacity)
	}
	switch c.Rebalance {
	case "":
		c.Rebalance = Pad
	case Pad, Trim:
	default:
		return bad("rebalance", "unknown mode %q (want pad or trim)", c.Rebalance)
	}
	if c.BucketBytes == 0 {
		c.BucketBytes = 10 << 20
	}
	if c.BucketBytes < 4 {
		return bad("bucket_bytes", "%d < 4", c.BucketBytes)
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = 10 * time.Minute
	}
	if c.CommTimeout == 0 {
		c.CommTimeout = 5 * time.Minute
	}
	if c.WaitTimeout < 0 || c.CommTimeout < 0 {
		return bad("wait_timeout", "timeouts must be positive")
	}
	return nil
}
