package gpushm

import (
	"os"
	"runtime"
	"strconv"

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

// Options configure a GPU shared-memory communicator.
type Options struct {
	comm.Options
	// ChunkBytes is the largest chunk (DefaultChunkBytes if zero; a
	// multiple of 4096 from 64 KiB to 64 MiB). Messages are cut into about
	// DefaultChunks chunks of at least 256 KiB, at most this size.
	ChunkBytes int
	// Slots is the number of chunks in flight (DefaultSlots if zero).
	Slots int
	// Workers is the number of reducer goroutines per rank (0: up to 8,
	// about NumCPU/ranks - 1). Zero ChunkBytes, Slots and Workers are
	// read from $STRATA_GPUSHM_CHUNK_BYTES, _SLOTS and _WORKERS when set.
	Workers int
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
	// (DefaultDeviceChunk if zero; a multiple of 4096 from 64 KiB, at
	// most ChunkBytes).
	DeviceChunk int
	// Async lets an all-reduce on the device path return once it is
	// queued on the device's stream (later work on the stream is ordered
	// after it, as with NCCL), instead of when it completes. A failure
	// is then reported by the next operation or Sync; a watchdog still
	// ends the wait at the deadline or when a peer fails, so the device
	// never hangs. Zero DeviceMax, DeviceChunk and false Async are read
	// from $STRATA_GPUSHM_DEVICE_MAX, _DEVICE_CHUNK and _ASYNC when set.
	Async bool
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

func (o Options) inlineMax() int {
	switch {
	case o.inline == 0:
		return inlineShare
	case o.inline < 0:
		return 0
	}
	return o.inline
}

// Environment variables that set ChunkBytes, Slots and Workers when the
// Options leave them zero (for tuning without rebuilding).
const (
	EnvChunkBytes  = "STRATA_GPUSHM_CHUNK_BYTES"
	EnvSlots       = "STRATA_GPUSHM_SLOTS"
	EnvWorkers     = "STRATA_GPUSHM_WORKERS"
	EnvChunks      = "STRATA_GPUSHM_CHUNKS" // target chunks per message (DefaultChunks)
	EnvDeviceMax   = "STRATA_GPUSHM_DEVICE_MAX"
	EnvDeviceChunk = "STRATA_GPUSHM_DEVICE_CHUNK"
	EnvAsync       = "STRATA_GPUSHM_ASYNC" // 1 or true: Options.Async
	// EnvIdle picks how waits sleep once spinning stops: "precise"
	// (default: nanosleep with a 1 us timer slack) or "gosleep"
	// (time.Sleep, whose sub-millisecond sleeps last about 1 ms on an
	// idle Go runtime; kept for comparison).
	EnvIdle = "STRATA_GPUSHM_IDLE"
	// EnvTrace, when 1, times the phases of every all-reduce and prints a
	// summary line to standard error when the communicator closes.
	EnvTrace = "STRATA_GPUSHM_TRACE"
)

func envBool(name string) bool {
	switch os.Getenv(name) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// deviceMax is the largest all-reduce on the device path (0: none).
func (o Options) deviceMax() int {
	d := o.DeviceMax
	if d == 0 {
		d = DefaultDeviceMax
		if v, err := strconv.Atoi(os.Getenv(EnvDeviceMax)); err == nil {
			d = v
		}
	}
	return max(d, 0)
}

// deviceChunk is the device path's largest chunk, within [64 KiB, slot]
// and a multiple of 4096.
func (o Options) deviceChunk(slot int) int {
	d := o.DeviceChunk
	if d == 0 {
		d = fromEnv(EnvDeviceChunk, DefaultDeviceChunk)
	}
	return min(max(d/4096*4096, 64<<10), slot)
}

func (o Options) async() bool { return o.Async || envBool(EnvAsync) }

// fromEnv returns the positive integer in $name, else def.
func fromEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func (o Options) chunk() int {
	if o.ChunkBytes == 0 {
		return fromEnv(EnvChunkBytes, DefaultChunkBytes)
	}
	return o.ChunkBytes
}

func (o Options) slots() int {
	if o.Slots == 0 {
		return fromEnv(EnvSlots, DefaultSlots)
	}
	return o.Slots
}

func (o Options) workers(n int) int {
	if o.Workers > 0 {
		return o.Workers
	}
	return fromEnv(EnvWorkers, max(1, min(8, runtime.NumCPU()/max(n, 1)-1)))
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
