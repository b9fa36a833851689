package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/strata-gnn/strata/internal/cudalib"
	"github.com/strata-gnn/strata/tensor/backend"
	// Back ends register themselves with package backend when linked in.
	_ "github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
	"github.com/strata-gnn/strata/train/gputrain"
)

// deviceSpecOf names the device b is as a --devices entry: its back
// end's name ("cuda:N" for a GPU, "cpu").
func deviceSpecOf(b backend.Backend) string { return b.Name() }

// onDevice reports whether b samples and trains on the device itself:
// it compiles kernels at run time and takes work on its queue
// (backend.Kernels and Enqueuer: the CUDA back end).
func onDevice(b backend.Backend) bool {
	_, k := b.(backend.Kernels)
	_, q := b.(backend.Enqueuer)
	return k && q
}

// batchSource returns, for a back end that runs kernels on its own queue
// (a GPU), the source that samples training batches and gathers their
// features on the device; nil (host sampling) otherwise.
func batchSource(b backend.Backend) train.NewBatchSource {
	if onDevice(b) {
		return gputrain.New(gputrain.Options{})
	}
	return nil
}

// typedSampler returns, for a back end that runs kernels on its own
// queue (a GPU), the typed sampler that draws typed batches on the
// device; nil (host sampling) otherwise.
func typedSampler(b backend.Backend) train.NewTypedSampler {
	if onDevice(b) {
		return gputrain.NewTyped(gputrain.Options{})
	}
	return nil
}

// devicesSyntax is the one description of a --devices list, shown in the
// help of --devices and in docs/limits.md; every mode parses lists with
// parseDevices.
var devicesSyntax = fmt.Sprintf("cpu:N for N CPU virtual devices (N in 1..%d), or a comma list of distinct devices of one kind, "+
	"one rank each: cuda:0,cuda:1, or cuda:0,1,2,3 (a bare number repeats the previous kind; cuda means cuda:0; at most %d)",
	maxVirtualDevices, maxListedDevices)

// Bounds of a --devices list. Virtual CPU devices share this machine's
// cores and memory: each costs its own cache, model and optimizer state
// and batch buffers (see docs/limits.md), and every collective step
// exchanges messages between all pairs, so past a few hundred a run is
// slow without modelling anything real; the memory estimate of the run
// (memory.go) still applies below the cap.
const (
	maxVirtualDevices = 256
	maxListedDevices  = 1024
)

// deviceSet is a parsed --devices list.
type deviceSet struct {
	List    string   // as given
	Kind    string   // back-end kind of every entry ("cpu", "cuda")
	Specs   []string // one device spec per rank ("cpu", "cuda:2")
	Virtual bool     // cpu:N
}

// parseDevices reads a --devices list (devicesSyntax). It only parses:
// whether the devices exist is found when they open.
func parseDevices(list string) (deviceSet, error) {
	list = strings.TrimSpace(list)
	set := deviceSet{List: list}
	if rest, ok := strings.CutPrefix(list, "cpu:"); ok && !strings.Contains(rest, ",") {
		n, err := strconv.Atoi(rest)
		if err != nil || n < 1 || n > maxVirtualDevices {
			return set, usageError{fmt.Errorf("--devices %s: want cpu:N with N in 1..%d (virtual CPU devices; see docs/limits.md)", list, maxVirtualDevices)}
		}
		set.Kind, set.Virtual = "cpu", true
		for range n {
			set.Specs = append(set.Specs, "cpu")
		}
		return set, nil
	}
	entries := strings.Split(list, ",")
	if len(entries) > maxListedDevices {
		return set, usageError{fmt.Errorf("--devices: %d entries, at most %d", len(entries), maxListedDevices)}
	}
	seen := map[string]bool{}
	for _, s := range entries {
		s = strings.TrimSpace(s)
		if _, err := strconv.Atoi(s); err == nil {
			if set.Kind == "" {
				return set, usageError{fmt.Errorf("--devices %s: entry %q: a bare number repeats the previous entry's kind, and there is none (cuda:%s?)", list, s, s)}
			}
			s = set.Kind + ":" + s
		}
		k, idx, err := backend.ParseDevice(s)
		key := fmt.Sprintf("%s:%d", k, idx)
		if err != nil || k == "auto" || seen[key] {
			return set, usageError{fmt.Errorf("--devices %s: empty, bad, auto or repeated entry %q (list distinct devices such as cuda:0,1,2,3, or cpu:N)", list, s)}
		}
		if set.Kind != "" && k != set.Kind {
			return set, usageError{fmt.Errorf("--devices %s: entry %q mixes kind %s with %s (list devices of one kind)", list, s, k, set.Kind)}
		}
		seen[key], set.Kind = true, k
		set.Specs = append(set.Specs, s)
	}
	return set, nil
}

// open opens one back end per rank. With shareCPU, the virtual devices of
// cpu:N share one CPU back end (full-graph training); otherwise each has
// its own. An error names the list and the entry that did not open.
func (s deviceSet) open(shareCPU bool) ([]backend.Backend, error) {
	bs := make([]backend.Backend, len(s.Specs))
	for i, spec := range s.Specs {
		if shareCPU && s.Virtual && i > 0 {
			bs[i] = bs[0]
			continue
		}
		b, err := openSpec(spec)
		if err != nil {
			return nil, flagError("--devices "+s.List, err) // the back end's error names the device
		}
		bs[i] = b
	}
	return bs, nil
}

// openDevice opens the compute back end named by spec (--device). "auto"
// (or "") picks the first registered kind other than cpu that opens, else
// cpu; a kind named explicitly must open or it is an error.
func openDevice(spec string) (backend.Backend, error) { return openDeviceNote(spec, nil) }

// openDeviceNote is openDevice that, when "auto" falls back to the CPU
// although another kind is installed and failed to open (a driver that
// does not start, a library that does not load), writes one line saying
// why to note (if not nil). A kind that is simply not installed (no
// libcuda on the machine) is not worth a line on every CPU run: `strata
// info` says what is missing.
func openDeviceNote(spec string, note io.Writer) (backend.Backend, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "auto" {
		var why []string
		for _, kind := range backend.Kinds() {
			if kind == "cpu" {
				continue
			}
			b, err := openBackend(kind)
			if err == nil {
				return b, nil
			}
			if !notInstalled(err) {
				why = append(why, strings.Join(strings.Fields(err.Error()), " "))
			}
		}
		if note != nil && len(why) > 0 {
			fmt.Fprintf(note, "device auto: %s; using cpu\n", strings.Join(why, "; "))
		}
		spec = "cpu"
	}
	b, err := openSpec(spec)
	if err != nil {
		return nil, flagError("--device "+spec, err)
	}
	return b, nil
}

// openSpec opens one device spec ("cpu", "cuda:1"). A malformed spec or
// a kind this build lacks is a usageError.
func openSpec(spec string) (backend.Backend, error) {
	kind, _, err := backend.ParseDevice(spec)
	if err != nil {
		return nil, usageError{err}
	}
	registered := false
	for _, k := range backend.Kinds() {
		registered = registered || k == kind
	}
	if !registered {
		return nil, usageError{fmt.Errorf("no %q back end in this build (available: %s)", kind, strings.Join(backend.Kinds(), ", "))}
	}
	return openBackend(spec)
}

// flagError prefixes err with what names the flag, keeping a usageError a
// usageError.
func flagError(prefix string, err error) error {
	var ue usageError
	if errors.As(err, &ue) {
		return usageError{fmt.Errorf("%s: %w", prefix, ue.error)}
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// notInstalled reports whether err says there is no GPU driver on this
// machine at all (as opposed to one that fails, or a driver without the
// compiler or BLAS library).
func notInstalled(err error) bool {
	if !cudalib.Supported { // no run-time loading on this platform
		return true
	}
	var nf *cudalib.NotFoundError
	return errors.As(err, &nf) && nf.Lib == cudalib.Driver.Name && len(nf.Errs) == 0
}

// singleDeviceList is the --devices list of the one device --device names,
// for sampled-mode flags of the DSP engine given without --devices: cpu:1
// for the CPU (also when auto falls back to it), else the device auto or
// spec opens ("cuda:0").
func singleDeviceList(spec string) (string, error) {
	b, err := openDevice(spec)
	if err != nil {
		return "", err
	}
	list := deviceSpecOf(b)
	if c, ok := b.(io.Closer); ok && list != "cpu" {
		c.Close() // runDSP opens it again with the others' settings
	}
	if list == "cpu" {
		list = "cpu:1"
	}
	return list, nil
}

// unavailable says in `strata info`'s list of back ends why one did not
// open; a missing driver is said once, in the cuda: section below it.
func unavailable(err error) string {
	if notInstalled(err) {
		return "no driver on this machine (see cuda: below)"
	}
	return err.Error()
}
