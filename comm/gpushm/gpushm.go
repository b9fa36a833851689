package gpushm

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/strata-gnn/strata/comm"
)

// Defaults.
const (
	// DefaultChunkBytes is the largest pipeline chunk.
	DefaultChunkBytes = 4 << 20
	// DefaultSlots is the number of chunks in flight per rank.
	DefaultSlots = 8
	// DefaultHostHeapBytes is each rank's share of the host shm segment
	// that stages the operations other than all-reduce.
	DefaultHostHeapBytes = 64 << 20
	// minPipeChunk is the smallest chunk a large message is cut into.
	minPipeChunk = 256 << 10
	// DefaultChunks is the number of chunks a message is cut into (within
	// minPipeChunk..ChunkBytes). 8 measured faster than 16 on 2 H200s
	// (16 MiB: 13.6 vs 11.2 GB/s bus bandwidth; 256 MiB: 33.6 vs 30.5).
	DefaultChunks = 8
	// inlineShare is the largest share of a chunk this rank reduces on
	// the pipeline's own goroutine (waking reducers costs more).
	inlineShare = 64 << 10
	// DefaultDeviceMax is the largest all-reduce run on the device path
	// (reduced by kernels on the device's stream; see the package doc).
	DefaultDeviceMax = 16 << 20
	// DefaultDeviceChunk is the largest chunk of the device path (the
	// copy of one chunk overlaps the reduction of the one before). On 2
	// H200s 4 MiB chunks measured 28.5 GB/s bus bandwidth at 12.6 MiB,
	// against 22-24 with 1 MiB and 17 with 512 KiB, and the same below.
	DefaultDeviceChunk = 4 << 20
)

// Bounds of the tuning Options (Validate). MaxRanks, MaxSlots and
// MaxChunkBytes bound the segment too.
const (
	MaxRanks      = 256
	MaxSlots      = 64
	MaxChunkBytes = 64 << 20
	minChunkBytes = 64 << 10
	// MaxWorkers bounds Options.Workers.
	MaxWorkers = 256
	// MaxChunks bounds Options.Chunks.
	MaxChunks = 1024
)

// Idle modes (Options.Idle).
const (
	// IdlePrecise naps with nanosleep and a 1 us timer slack (the
	// default).
	IdlePrecise = "precise"
	// IdleGoSleep naps with time.Sleep, whose sub-millisecond sleeps last
	// about 1 ms on an idle Go runtime (kept for comparison).
	IdleGoSleep = "gosleep"
)

// Options configure a GPU shared-memory communicator. The package reads
// no environment variable but the debug switch EnvTrace: FromEnv applies
// the STRATA_GPUSHM_* tuning variables for programs that honour them
// (the strata command does, below its flags; docs/configuration.md).
type Options struct {
	comm.Options
	// ChunkBytes is the largest chunk of the host pipeline
	// (DefaultChunkBytes if zero; a multiple of 4096 from 64 KiB to
	// 64 MiB): the size of the segment's slots.
	ChunkBytes int
	// Slots is the number of chunks in flight (DefaultSlots if zero;
	// 2..MaxSlots).
	Slots int
	// Workers is the number of reducer goroutines per rank (0: up to 8,
	// about NumCPU/ranks - 1; at most MaxWorkers).
	Workers int
	// Chunks is the number of chunks a message of the host pipeline is
	// cut into, within 256 KiB..ChunkBytes (DefaultChunks if zero; at
	// most MaxChunks).
	Chunks int
	// HostHeapBytes sizes the host shm communicator that stages the other
	// operations (DefaultHostHeapBytes if zero, none if negative).
	HostHeapBytes int
	// Dir holds the named segments (/dev/shm if empty).
	Dir string
	// Prefix namespaces the store keys ("gpushm" if empty); use a
	// distinct prefix for each communicator of a job.
	Prefix string
	// DeviceMax is the largest all-reduce, in bytes, run on the device
	// path (DefaultDeviceMax if zero, never if negative). Larger ones use
	// the host pipeline.
	DeviceMax int
	// DeviceChunk is the largest chunk of the device path
	// (DefaultDeviceChunk if zero; a multiple of 4096 from 64 KiB to
	// 64 MiB, used up to ChunkBytes).
	DeviceChunk int
	// Async lets an all-reduce on the device path return once it is
	// queued on the device's stream (later work on the stream is ordered
	// after it, as with NCCL), instead of when it completes. A failure
	// is then reported by the next operation or Sync; a watchdog still
	// ends the wait at the deadline or when a peer fails, so the device
	// never hangs.
	Async bool
	// Idle is how waits sleep once spinning stops: IdlePrecise (or "")
	// or IdleGoSleep.
	Idle string
	// asyncHostCopies makes the CPU back end's copies complete on other
	// goroutines (tests).
	asyncHostCopies bool
	// inline is the largest share reduced on the pipeline's goroutine
	// (inlineShare if zero, none if negative; tests).
	inline int
	// emulate runs the device path on the CPU back end, on a goroutine
	// that stands for the device's stream (tests).
	emulate bool
}

// OptionError reports a tuning field of Options out of its range.
type OptionError struct {
	Field string // "ChunkBytes", "Slots", ...
	Value string
	Want  string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("gpushm: %s %s: want %s", e.Field, e.Value, e.Want)
}

// Validate checks the tuning fields (zero always means the default). Open
// and NewLocal call it; callers that take the values from users (flags,
// FromEnv) call it to report a bad one before anything opens.
func (o Options) Validate() error {
	bad := func(field string, v any, want string) error {
		return &OptionError{Field: field, Value: fmt.Sprint(v), Want: want}
	}
	chunkOK := func(b int) bool { return b >= minChunkBytes && b <= MaxChunkBytes && b%4096 == 0 }
	switch {
	case o.ChunkBytes != 0 && !chunkOK(o.ChunkBytes):
		return bad("ChunkBytes", o.ChunkBytes, fmt.Sprintf("a multiple of 4096 from %d to %d (0: %d)", minChunkBytes, MaxChunkBytes, DefaultChunkBytes))
	case o.Slots != 0 && (o.Slots < 2 || o.Slots > MaxSlots):
		return bad("Slots", o.Slots, fmt.Sprintf("2..%d (0: %d)", MaxSlots, DefaultSlots))
	case o.Workers < 0 || o.Workers > MaxWorkers:
		return bad("Workers", o.Workers, fmt.Sprintf("0..%d (0: about NumCPU/ranks - 1, up to 8)", MaxWorkers))
	case o.Chunks < 0 || o.Chunks > MaxChunks:
		return bad("Chunks", o.Chunks, fmt.Sprintf("0..%d (0: %d)", MaxChunks, DefaultChunks))
	case o.DeviceChunk != 0 && !chunkOK(o.DeviceChunk):
		return bad("DeviceChunk", o.DeviceChunk, fmt.Sprintf("a multiple of 4096 from %d to %d (0: %d)", minChunkBytes, MaxChunkBytes, DefaultDeviceChunk))
	case o.Idle != "" && o.Idle != IdlePrecise && o.Idle != IdleGoSleep:
		return bad("Idle", strconv.Quote(o.Idle), IdlePrecise+" or "+IdleGoSleep)
	}
	return nil
}

func (o Options) inlineMax() int {
	switch {
	case o.inline == 0:
		return inlineShare
	case o.inline < 0:
		return 0
	}
	return o.inline
}

// Environment variables FromEnv reads: each sets the Options field of the
// same name when that is zero (for tuning without rebuilding; the strata
// command's flags --gpushm-chunk-bytes, ... set the same fields).
const (
	EnvChunkBytes  = "STRATA_GPUSHM_CHUNK_BYTES"  // ChunkBytes
	EnvSlots       = "STRATA_GPUSHM_SLOTS"        // Slots
	EnvWorkers     = "STRATA_GPUSHM_WORKERS"      // Workers
	EnvChunks      = "STRATA_GPUSHM_CHUNKS"       // Chunks
	EnvDeviceMax   = "STRATA_GPUSHM_DEVICE_MAX"   // DeviceMax
	EnvDeviceChunk = "STRATA_GPUSHM_DEVICE_CHUNK" // DeviceChunk
	EnvAsync       = "STRATA_GPUSHM_ASYNC"        // Async (1, true, yes, on)
	EnvIdle        = "STRATA_GPUSHM_IDLE"         // Idle (precise, gosleep)
)

// EnvTrace, when 1 (or true, yes, on), times the phases of every
// all-reduce and prints a summary line to standard error when the
// communicator closes. It only observes, so it stays a debug variable
// that the package reads itself (when a communicator opens).
const EnvTrace = "STRATA_GPUSHM_TRACE"

// EnvNames lists the variables FromEnv reads.
var EnvNames = []string{EnvChunkBytes, EnvSlots, EnvWorkers, EnvChunks, EnvDeviceMax, EnvDeviceChunk, EnvAsync, EnvIdle}

// FromEnv returns o with every zero tuning field that a STRATA_GPUSHM_*
// variable names (EnvNames) set from it, and the names of the variables
// that were set. An unset or empty variable changes nothing; one that
// does not parse, or whose value Validate refuses, is an error naming
// the variable.
func FromEnv(o Options) (Options, []string, error) {
	var used []string
	for _, f := range []struct {
		name string
		dst  *int
	}{{EnvChunkBytes, &o.ChunkBytes}, {EnvSlots, &o.Slots}, {EnvWorkers, &o.Workers}, {EnvChunks, &o.Chunks},
		{EnvDeviceMax, &o.DeviceMax}, {EnvDeviceChunk, &o.DeviceChunk}} {
		s := strings.TrimSpace(os.Getenv(f.name))
		if s == "" {
			continue
		}
		v, err := strconv.Atoi(s)
		if err != nil {
			return o, used, fmt.Errorf("gpushm: %s=%q: not an integer", f.name, s)
		}
		used = append(used, f.name)
		if *f.dst == 0 {
			*f.dst = v
		}
	}
	if s := strings.TrimSpace(os.Getenv(EnvAsync)); s != "" {
		on, ok := parseBool(s)
		if !ok {
			return o, used, fmt.Errorf("gpushm: %s=%q: want 1, true, yes, on, 0, false, no or off", EnvAsync, s)
		}
		used = append(used, EnvAsync)
		o.Async = o.Async || on
	}
	if s := strings.TrimSpace(os.Getenv(EnvIdle)); s != "" {
		used = append(used, EnvIdle)
		if o.Idle == "" {
			o.Idle = s
		}
	}
	if err := o.Validate(); err != nil {
		var oe *OptionError
		if errors.As(err, &oe) {
			for _, f := range [][2]string{{"ChunkBytes", EnvChunkBytes}, {"Slots", EnvSlots}, {"Workers", EnvWorkers},
				{"Chunks", EnvChunks}, {"DeviceChunk", EnvDeviceChunk}, {"Idle", EnvIdle}} {
				if f[0] == oe.Field && slices.Contains(used, f[1]) {
					return o, used, fmt.Errorf("gpushm: %s=%s: want %s", f[1], oe.Value, oe.Want)
				}
			}
		}
		return o, used, err
	}
	return o, used, nil
}

func parseBool(s string) (v, ok bool) {
	switch strings.ToLower(s) {
	case "1", "true", "yes", "on":
		return true, true
	case "0", "false", "no", "off":
		return false, true
	}
	return false, false
}

func envBool(name string) bool {
	v, _ := parseBool(strings.TrimSpace(os.Getenv(name)))
	return v
}

// deviceMax is the largest all-reduce on the device path (0: none).
func (o Options) deviceMax() int {
	if o.DeviceMax == 0 {
		return DefaultDeviceMax
	}
	return max(o.DeviceMax, 0)
}

// deviceChunk is the device path's largest chunk, within [64 KiB, slot]
// and a multiple of 4096.
func (o Options) deviceChunk(slot int) int {
	d := o.DeviceChunk
	if d == 0 {
		d = DefaultDeviceChunk
	}
	return min(max(d/4096*4096, 64<<10), slot)
}

func (o Options) chunk() int {
	if o.ChunkBytes == 0 {
		return DefaultChunkBytes
	}
	return o.ChunkBytes
}

func (o Options) slots() int {
	if o.Slots == 0 {
		return DefaultSlots
	}
	return o.Slots
}

func (o Options) workers(n int) int {
	if o.Workers > 0 {
		return o.Workers
	}
	return max(1, min(8, runtime.NumCPU()/max(n, 1)-1))
}

func (o Options) chunks() int {
	if o.Chunks > 0 {
		return o.Chunks
	}
	return DefaultChunks
}

func (o Options) hostHeap() int {
	switch {
	case o.HostHeapBytes == 0:
		return DefaultHostHeapBytes
	case o.HostHeapBytes < 0:
		return 0
	}
	return o.HostHeapBytes
}

func (o Options) prefix() string {
	if o.Prefix == "" {
		return "gpushm"
	}
	return o.Prefix
}
