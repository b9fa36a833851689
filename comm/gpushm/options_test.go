package gpushm

import (
	"errors"
	"strings"
	"testing"
)

// setAllEnv sets every tuning variable FromEnv reads to a valid value
// other than the default.
func setAllEnv(t *testing.T) {
	t.Helper()
	for k, v := range map[string]string{EnvChunkBytes: "8388608", EnvSlots: "4", EnvWorkers: "12", EnvChunks: "2",
		EnvDeviceMax: "-1", EnvDeviceChunk: "1048576", EnvAsync: "1", EnvIdle: "gosleep"} {
		t.Setenv(k, v)
	}
}

// TestOptionsIgnoreEnv: a communicator opened with zero Options takes the
// package defaults whatever STRATA_GPUSHM_* says; only FromEnv reads
// the variables (the caller decides).
func TestOptionsIgnoreEnv(t *testing.T) {
	setAllEnv(t)
	var o Options
	if o.chunk() != DefaultChunkBytes || o.slots() != DefaultSlots || o.chunks() != DefaultChunks ||
		o.deviceMax() != DefaultDeviceMax || o.deviceChunk(MaxChunkBytes) != DefaultDeviceChunk || o.Async || o.Idle != "" {
		t.Errorf("zero Options read the environment: chunk %d slots %d chunks %d deviceMax %d deviceChunk %d",
			o.chunk(), o.slots(), o.chunks(), o.deviceMax(), o.deviceChunk(MaxChunkBytes))
	}
	if w := o.workers(2); w == 12 {
		t.Errorf("workers %d: read from %s", w, EnvWorkers)
	}
}

func TestFromEnv(t *testing.T) {
	setAllEnv(t)
	o, used, err := FromEnv(Options{Prefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	want := Options{Prefix: "p", ChunkBytes: 8 << 20, Slots: 4, Workers: 12, Chunks: 2, DeviceMax: -1, DeviceChunk: 1 << 20, Async: true, Idle: IdleGoSleep}
	if o != want {
		t.Errorf("FromEnv = %+v, want %+v", o, want)
	}
	if len(used) != len(EnvNames) {
		t.Errorf("used %v, want all of %v", used, EnvNames)
	}
	if o.chunk() != 8<<20 || o.slots() != 4 || o.workers(2) != 12 || o.chunks() != 2 || o.deviceMax() != 0 || o.deviceChunk(8<<20) != 1<<20 {
		t.Errorf("accessors of %+v", o)
	}
	// Fields the caller set win over the environment.
	o, _, err = FromEnv(Options{Slots: 16, Chunks: 4, Idle: IdlePrecise})
	if err != nil || o.Slots != 16 || o.Chunks != 4 || o.Idle != IdlePrecise || o.ChunkBytes != 8<<20 {
		t.Errorf("explicit fields: %+v, %v", o, err)
	}
	// Nothing set: nothing changes.
	for _, k := range EnvNames {
		t.Setenv(k, "")
	}
	if o, used, err := FromEnv(Options{}); err != nil || o != (Options{}) || len(used) != 0 {
		t.Errorf("empty environment: %+v, %v, %v", o, used, err)
	}
}

func TestFromEnvErrors(t *testing.T) {
	for _, c := range []struct{ name, value string }{
		{EnvChunkBytes, "lots"}, {EnvChunkBytes, "5000"}, {EnvSlots, "1"}, {EnvSlots, "1000"}, {EnvWorkers, "-2"},
		{EnvChunks, "x"}, {EnvDeviceChunk, "4095"}, {EnvAsync, "maybe"}, {EnvIdle, "busy"},
	} {
		t.Run(c.name+"="+c.value, func(t *testing.T) {
			for _, k := range EnvNames {
				t.Setenv(k, "")
			}
			t.Setenv(c.name, c.value)
			_, _, err := FromEnv(Options{})
			if err == nil || !strings.Contains(err.Error(), c.name) {
				t.Errorf("FromEnv: %v, want an error naming %s", err, c.name)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	good := []Options{{}, {ChunkBytes: 64 << 10, Slots: 2, Workers: 1, Chunks: 1, DeviceMax: -1, DeviceChunk: 64 << 10, Idle: IdlePrecise},
		{ChunkBytes: MaxChunkBytes, Slots: MaxSlots, Workers: MaxWorkers, Chunks: MaxChunks, DeviceChunk: MaxChunkBytes, Idle: IdleGoSleep}}
	for _, o := range good {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	for field, o := range map[string]Options{
		"ChunkBytes": {ChunkBytes: 5000}, "Slots": {Slots: MaxSlots + 1}, "Workers": {Workers: -1},
		"Chunks": {Chunks: MaxChunks + 1}, "DeviceChunk": {DeviceChunk: 2 * MaxChunkBytes}, "Idle": {Idle: "spin"},
	} {
		var oe *OptionError
		if err := o.Validate(); !errors.As(err, &oe) || oe.Field != field {
			t.Errorf("%+v: %v, want an OptionError on %s", o, err, field)
		}
	}
}
