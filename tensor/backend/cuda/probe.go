package cuda

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/strata-gnn/strata/internal/cublas"
	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/internal/cudalib"
	"github.com/strata-gnn/strata/internal/nvrtc"
)

// LibInfo describes one run-time library.
type LibInfo struct {
	Name    string // "libcuda", "libnvrtc", "libcublas"
	Path    string // where it was loaded from ("" if not found or unknown)
	Version string // e.g. "13.0"
	Err     error  // why it is unavailable (nil when loaded)
}

// DeviceInfo describes one GPU.
type DeviceInfo struct {
	Ordinal           int
	Name              string
	PCIBusID          string
	TotalMem          uint64
	ComputeCapability string // "9.0"
	Multiprocessors   int
	L2Bytes           int
	CanMapHostMemory  bool
}

// Info is what Probe finds: libraries, devices and peer access.
type Info struct {
	Driver, NVRTC, CUBLAS LibInfo
	Devices               []DeviceInfo
	// Peer[i][j] reports whether device i can access device j's memory
	// directly (NVLink or PCIe peer-to-peer); the diagonal is false.
	Peer [][]bool
	// KernelCache is the folder compiled kernels are cached in.
	KernelCache string
	// Err is set when devices could not be listed.
	Err error
}

// Usable reports whether cuda devices can be opened.
func (i *Info) Usable() bool {
	return i.Err == nil && len(i.Devices) > 0 && i.NVRTC.Err == nil && i.CUBLAS.Err == nil
}

// Probe loads the libraries (without creating any context) and lists the
// devices, their memory and compute capability, and which pairs have
// peer-to-peer access. It never fails: problems are recorded in Info.
func Probe() *Info {
	info := &Info{
		Driver: LibInfo{Name: "libcuda"},
		NVRTC:  LibInfo{Name: "libnvrtc"},
		CUBLAS: LibInfo{Name: "libcublas"},
	}
	if dir, err := nvrtc.DefaultCacheDir(); err == nil {
		info.KernelCache = dir
	}
	if err := nvrtc.Load(); err != nil {
		info.NVRTC.Err = err
	} else {
		major, minor := nvrtc.Version()
		info.NVRTC.Path, info.NVRTC.Version = nvrtc.LibPath(), fmt.Sprintf("%d.%d", major, minor)
	}
	if major, minor, patch, err := cublas.LibVersion(); err != nil {
		info.CUBLAS.Err = err
	} else {
		info.CUBLAS.Path, info.CUBLAS.Version = cublas.LibPath(), fmt.Sprintf("%d.%d.%d", major, minor, patch)
	}
	if err := cu.Load(); err != nil {
		info.Driver.Err = err
		info.Err = err
		return info
	}
	v := cu.DriverVersion()
	info.Driver.Path, info.Driver.Version = cu.LibPath(), fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	n, err := cu.DeviceCount()
	if err != nil {
		info.Err = err
		return info
	}
	devs := make([]cu.Device, 0, n)
	for i := 0; i < n; i++ {
		dev, err := cu.GetDevice(i)
		if err != nil {
			info.Err = err
			return info
		}
		devs = append(devs, dev)
		di := DeviceInfo{Ordinal: i}
		di.Name, _ = dev.Name()
		di.PCIBusID, _ = dev.PCIBusID()
		di.TotalMem, _ = dev.TotalMem()
		major, minor, _ := dev.ComputeCapability()
		di.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
		di.Multiprocessors, _ = dev.Attribute(cu.AttrMultiprocessorCount)
		di.L2Bytes, _ = dev.Attribute(cu.AttrL2CacheSize)
		m, _ := dev.Attribute(cu.AttrCanMapHostMemory)
		di.CanMapHostMemory = m != 0
		info.Devices = append(info.Devices, di)
	}
	info.Peer = make([][]bool, n)
	for i := range devs {
		info.Peer[i] = make([]bool, n)
		for j := range devs {
			if i != j {
				info.Peer[i][j], _ = cu.CanAccessPeer(devs[i], devs[j])
			}
		}
	}
	return info
}

// Devices lists the GPUs (an error when the driver cannot be used).
func Devices() ([]DeviceInfo, error) {
	info := Probe()
	return info.Devices, info.Err
}

// WriteText prints the probe result for `strata info`. Libraries that are
// not found are listed with their sonames, and the folders searched and
// the STRATA_CUDA_PATH hint are printed once for all of them.
func (i *Info) WriteText(w io.Writer) error {
	var b strings.Builder
	var searched []string // folders of the first library not found
	lib := func(l LibInfo) {
		var nf *cudalib.NotFoundError
		switch {
		case errors.As(l.Err, &nf):
			fmt.Fprintf(&b, "  %-10s not found (sonames %s)", l.Name, strings.Join(nf.Sonames, ", "))
			if len(nf.Errs) > 0 {
				fmt.Fprintf(&b, "; failed to load: %s", strings.Join(nf.Errs, "; "))
			}
			b.WriteString("\n")
			if searched == nil {
				searched = nf.Dirs
			}
			return
		case l.Err != nil:
			fmt.Fprintf(&b, "  %-10s not available: %v\n", l.Name, l.Err)
			return
		}
		path := l.Path
		if path == "" {
			path = "(found by the loader)"
		}
		fmt.Fprintf(&b, "  %-10s %-8s %s\n", l.Name, l.Version, path)
	}
	b.WriteString("cuda:\n")
	lib(i.Driver)
	lib(i.NVRTC)
	lib(i.CUBLAS)
	if searched != nil {
		fmt.Fprintf(&b, "  searched   %s; set %s to the folder that holds them\n", strings.Join(searched, ", "), cudalib.EnvPath)
	}
	if i.KernelCache != "" {
		fmt.Fprintf(&b, "  kernel cache %s\n", i.KernelCache)
	}
	switch {
	case i.Err != nil && i.Err == i.Driver.Err:
		b.WriteString("  devices: none (libcuda did not load, see above)\n")
	case i.Err != nil:
		fmt.Fprintf(&b, "  devices: none usable: %v\n", i.Err)
	case len(i.Devices) == 0:
		b.WriteString("  devices: none\n")
	}
	for _, d := range i.Devices {
		fmt.Fprintf(&b, "  cuda:%d  %s  sm_%s  %d SMs  %.1f GiB  L2 %d MiB  pci %s\n", d.Ordinal, d.Name,
			strings.ReplaceAll(d.ComputeCapability, ".", ""), d.Multiprocessors, float64(d.TotalMem)/(1<<30), d.L2Bytes>>20, d.PCIBusID)
	}
	if len(i.Devices) > 1 {
		var pairs []string
		for a := range i.Peer {
			for c := a + 1; c < len(i.Peer); c++ {
				if i.Peer[a][c] && i.Peer[c][a] {
					pairs = append(pairs, fmt.Sprintf("%d<->%d", a, c))
				}
			}
		}
		if len(pairs) == 0 {
			b.WriteString("  peer access: none\n")
		} else {
			fmt.Fprintf(&b, "  peer access: %s\n", strings.Join(pairs, " "))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
