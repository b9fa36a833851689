package fullgraph

import "math"

// CommStats counts what the embedding exchange sent and avoided. Bytes
// are payload bytes delivered: a broadcast of an n x w float32 block
// counts 4*n*w bytes for each of the P-1 receivers; a gradient message
// 4*n*w bytes to its one receiver. Evaluation passes, which always
// exchange exactly, are counted apart (EvalBytes), as are the weight
// gradient all-reduce (AllReduceBytes: 4 bytes per parameter per device
// and step) and the flag exchanges (FlagBytes).
type CommStats struct {
	// Forward embedding broadcasts: one opportunity per block, layer and
	// training epoch.
	Broadcasts        int64   `json:"broadcasts"`
	BroadcastsSkipped int64   `json:"broadcasts_skipped"`
	BytesSent         int64   `json:"bytes_sent"`
	BytesAvoided      int64   `json:"bytes_avoided"`
	AvoidedFraction   float64 `json:"avoided_fraction"` // BytesAvoided / (BytesSent + BytesAvoided)

	// Backward gradient contributions to block owners (one message per
	// pair of devices with edges between their blocks, layer and epoch).
	GradMessages        int64   `json:"grad_messages"`
	GradSkipped         int64   `json:"grad_skipped"`
	GradBytesSent       int64   `json:"grad_bytes_sent"`
	GradBytesAvoided    int64   `json:"grad_bytes_avoided"`
	GradAvoidedFraction float64 `json:"grad_avoided_fraction"`

	AllReduceBytes int64 `json:"allreduce_bytes"`
	FlagBytes      int64 `json:"flag_bytes"`
	EvalBytes      int64 `json:"eval_bytes"`

	// Blocks has one entry per layer and source block.
	Blocks []BlockStats `json:"blocks"`
}

// BlockStats is the history of one embedding block of one layer. Age is
// how many epochs old the copy the other devices used was (0: fresh);
// drift the relative change ||fresh - cached||_F / ||cached||_F the
// owner measured before deciding.
type BlockStats struct {
	Layer int `json:"layer"`
	Block int `json:"block"`
	Rows  int `json:"rows"`
	Width int `json:"width"`

	Sent    int64 `json:"sent"`
	Skipped int64 `json:"skipped"`
	// MaxAge is the oldest copy ever used; FinalAge the age after the last
	// epoch.
	MaxAge   int `json:"max_age"`
	FinalAge int `json:"final_age"`
	// Drift statistics over every decision that had a cached copy to
	// compare with; MaxSkippedDrift is the largest drift of a skipped
	// broadcast (at most Epsilon: the adaptive bound only shrinks it).
	Measured        int64   `json:"measured"`
	MeanDrift       float64 `json:"mean_drift"`
	MaxDrift        float64 `json:"max_drift"`
	MaxSkippedDrift float64 `json:"max_skipped_drift"`
	FinalDrift      float64 `json:"final_drift"`

	driftSum float64
}

// blockEvent is one decision about one block.
type blockEvent struct {
	sent     bool
	age      int     // age of the copy in use after the decision
	drift    float64 // < 0: not measured
	rows     int
	width    int
	receives int // devices that receive a broadcast (P-1)
}

func (b *BlockStats) record(ev blockEvent) {
	if ev.sent {
		b.Sent++
	} else {
		b.Skipped++
	}
	b.MaxAge = max(b.MaxAge, ev.age)
	b.FinalAge = ev.age
	if ev.drift >= 0 {
		d := finite(ev.drift)
		b.Measured++
		b.driftSum += d
		b.MeanDrift = b.driftSum / float64(b.Measured)
		b.MaxDrift = max(b.MaxDrift, d)
		b.FinalDrift = d
		if !ev.sent {
			b.MaxSkippedDrift = max(b.MaxSkippedDrift, d)
		}
	}
}

// finite clamps +Inf (a block that was all zeros and no longer is) so
// the JSON report stays valid.
func finite(x float64) float64 {
	if math.IsInf(x, 1) || x > math.MaxFloat32 {
		return math.MaxFloat32
	}
	return x
}

func (c *CommStats) finish() {
	if t := c.BytesSent + c.BytesAvoided; t > 0 {
		c.AvoidedFraction = float64(c.BytesAvoided) / float64(t)
	}
	if t := c.GradBytesSent + c.GradBytesAvoided; t > 0 {
		c.GradAvoidedFraction = float64(c.GradBytesAvoided) / float64(t)
	}
}

// EpochComm is one epoch's share of CommStats (Report.EpochComm has one
// per epoch): broadcasts sent and skipped and their bytes, gradient bytes
// sent and avoided, the oldest cached block used, the mean drift measured
// and the adaptive scale of the variation bound.
type EpochComm struct {
	Epoch            int     `json:"epoch"`
	Broadcasts       int64   `json:"broadcasts"`
	Skipped          int64   `json:"broadcasts_skipped"`
	BytesSent        int64   `json:"bytes_sent"`
	BytesAvoided     int64   `json:"bytes_avoided"`
	GradBytesSent    int64   `json:"grad_bytes_sent"`
	GradBytesAvoided int64   `json:"grad_bytes_avoided"`
	MaxAge           int     `json:"max_age"`
	MeanDrift        float64 `json:"mean_drift"`
	EpsScale         float64 `json:"eps_scale"`
}

// SkippedShare is the share of the epoch's broadcast bytes avoided.
func (e *EpochComm) SkippedShare() float64 {
	if t := e.BytesSent + e.BytesAvoided; t > 0 {
		return float64(e.BytesAvoided) / float64(t)
	}
	return 0
}

// epochComm accumulates one epoch's share of CommStats.
type epochComm struct {
	Broadcasts, Skipped             int64
	BytesSent, BytesAvoided         int64
	GradBytesSent, GradBytesAvoided int64
	MaxAge                          int
	driftSum                        float64
	driftN                          int64
}

// record is the epoch's EpochComm.
func (c *epochComm) record(epoch int, scale float64) EpochComm {
	e := EpochComm{Epoch: epoch, Broadcasts: c.Broadcasts, Skipped: c.Skipped, BytesSent: c.BytesSent, BytesAvoided: c.BytesAvoided,
		GradBytesSent: c.GradBytesSent, GradBytesAvoided: c.GradBytesAvoided, MaxAge: c.MaxAge, EpsScale: scale}
	if c.driftN > 0 {
		e.MeanDrift = c.driftSum / float64(c.driftN)
	}
	return e
}
