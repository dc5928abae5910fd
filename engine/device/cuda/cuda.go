//go:build cuda

package cuda

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <cuda.h>

int linger_cu_init_result(int *called);

// The driver's name and text for a CUresult (NULL when it has none).
static const char *linger_cu_error_name(int r) {
	const char *name = 0;
	cuGetErrorName((CUresult)r, &name);
	return name;
}
static const char *linger_cu_error_text(int r) {
	const char *text = 0;
	cuGetErrorString((CUresult)r, &text);
	return text;
}

// The fake driver's count of launches; 0 on a real driver.
static unsigned long long linger_fake_launches(void) {
	unsigned long long (*f)(void) = (unsigned long long (*)(void))dlsym(RTLD_DEFAULT, "fakecuda_launches");
	return f ? f() : 0;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"linger/engine/device"
)

// EnvDevice names the environment variable that picks the GPU: its index
// among the driver's devices (CUDA_VISIBLE_DEVICES applies first), 0 when
// unset.
const EnvDevice = "LINGER_CUDA_DEVICE"

// Errors that name why there is no usable GPU; Open and Probe wrap one of
// them with the driver's own code and message.
var (
	// ErrNoDriver: the driver did not initialize (no kernel module, a
	// driver too old for the library, a container without the GPU).
	ErrNoDriver = errors.New("no usable CUDA driver")
	// ErrNoDevice: the driver runs but sees no GPU.
	ErrNoDevice = errors.New("no CUDA GPU")
	// ErrBadIndex: the requested device index is not one of the GPUs.
	ErrBadIndex = errors.New("CUDA device index out of range")
)

// driverError is a CUresult with the driver's name and text for it.
func driverError(call string, r int) error {
	name, text := "", ""
	if p := C.linger_cu_error_name(C.int(r)); p != nil {
		name = C.GoString(p)
	}
	if p := C.linger_cu_error_text(C.int(r)); p != nil {
		text = C.GoString(p)
	}
	if name == "" {
		name = "CUresult " + strconv.Itoa(r)
	}
	if text != "" {
		return fmt.Errorf("%s: %s (%s)", call, name, text)
	}
	return fmt.Errorf("%s: %s", call, name)
}

// cuErr turns an error of gorgonia.org/cu (its CUresult type) into one
// with the driver's name and text for the code.
func cuErr(call string, err error) error {
	if v := reflect.ValueOf(err); v.Kind() == reflect.Int {
		return driverError(call, int(v.Int()))
	}
	return fmt.Errorf("%s: %w", call, err)
}

// initError is the result of the driver's cuInit, made by cu's init, as
// an error naming the cause; nil when it succeeded.
func initError() error {
	var called C.int
	r := int(C.linger_cu_init_result(&called))
	if called == 0 {
		// cu's init always calls cuInit; this is a bug of the build.
		return fmt.Errorf("cuda: %w: cuInit was never called", ErrNoDriver)
	}
	switch r {
	case 0:
		return nil
	case int(C.CUDA_ERROR_NO_DEVICE):
		return fmt.Errorf("cuda: %w: %w", ErrNoDevice, driverError("cuInit", r))
	}
	return fmt.Errorf("cuda: %w: %w", ErrNoDriver, driverError("cuInit", r))
}

// Info is what Probe reports of a GPU.
type Info struct {
	Index             int    `json:"-"`
	Name              string `json:"device"`
	TotalBytes        uint64 `json:"total_bytes"`
	FreeBytes         uint64 `json:"free_bytes"`
	DriverVersion     int    `json:"driver_version"`
	ComputeCapability string `json:"compute_capability"`
}

// Index reads EnvDevice: 0 when unset, an error when it is not a
// non-negative integer.
func Index() (int, error) {
	s := strings.TrimSpace(os.Getenv(EnvDevice))
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("cuda: %s=%q: %w: want a device index 0, 1, ...", EnvDevice, s, ErrBadIndex)
	}
	return n, nil
}

// lookup checks that the driver is up and index names one of its GPUs.
func lookup(index int) (cu.Device, error) {
	if err := initError(); err != nil {
		return 0, err
	}
	n, err := cu.NumDevices()
	if err != nil {
		return 0, fmt.Errorf("cuda: %w", cuErr("cuDeviceGetCount", err))
	}
	if n == 0 {
		return 0, fmt.Errorf("cuda: %w: the driver reports 0 devices", ErrNoDevice)
	}
	if index < 0 || index >= n {
		return 0, fmt.Errorf("cuda: device %d: %w: the driver reports %d device(s), 0 to %d", index, ErrBadIndex, n, n-1)
	}
	d, err := cu.GetDevice(index)
	if err != nil {
		return 0, fmt.Errorf("cuda: device %d: %w", index, cuErr("cuDeviceGet", err))
	}
	return d, nil
}

// Probe reports the GPU that Open would use (EnvDevice), without keeping
// a context: name, memory, driver version and compute capability. Free
// memory is read in a context made for the purpose and destroyed after,
// so it is what a kernel process would find after making its own.
func Probe() (Info, error) {
	d, err := Open()
	if err != nil {
		return Info{}, err
	}
	info, err := d.Info()
	return info, errors.Join(err, d.Close())
}

// Device is a GPU, with the context this process holds on it. It
// implements device.Device.
type Device struct {
	index int
	dev   cu.Device
	ctx   cu.CUContext

	mu   sync.Mutex
	live map[uint64]uint64 // segment address -> size

	modMu sync.Mutex
	mod   *module // the kernels, loaded by the first NewStream
}

var _ device.Accelerator = (*Device)(nil)

// Open opens the GPU named by EnvDevice (default 0).
func Open() (*Device, error) {
	index, err := Index()
	if err != nil {
		return nil, err
	}
	return New(index)
}

// New opens GPU index: it creates this process's context on it. The
// errors name the cause: ErrNoDriver, ErrNoDevice, ErrBadIndex.
func New(index int) (*Device, error) {
	dev, err := lookup(index)
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, err := dev.MakeContext(cu.SchedAuto)
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", index, cuErr("cuCtxCreate", err))
	}
	return &Device{index: index, dev: dev, ctx: ctx, live: make(map[uint64]uint64)}, nil
}

// Close frees the segments still live and destroys the context.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.live == nil {
		return nil
	}
	var errs []error
	err := d.do(func() error {
		if err := d.unloadKernels(); err != nil {
			errs = append(errs, err)
		}
		for addr := range d.live {
			if err := cu.MemFree(cu.DevicePtr(addr)); err != nil {
				errs = append(errs, cuErr("cuMemFree", err))
			}
		}
		return nil
	})
	errs = append(errs, err)
	if err := d.ctx.Destroy(); err != nil {
		errs = append(errs, cuErr("cuCtxDestroy", err))
	}
	d.live = nil
	return errors.Join(errs...)
}

// do runs f on this goroutine's OS thread with the device's context
// current: a context is current per thread, and a goroutine may move
// between threads between two calls.
func (d *Device) do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.SetCurrentContext(d.ctx); err != nil {
		return cuErr("cuCtxSetCurrent", err)
	}
	return f()
}

// Name returns "cuda".
func (d *Device) Name() string { return "cuda" }

// Index is the device's index among the driver's GPUs.
func (d *Device) Index() int { return d.index }

// HasData returns true: segments hold data, computed by the engine's
// kernels on a Stream (NewStream). Segment.Mem is nil: the host reaches
// device memory only through copies.
func (d *Device) HasData() bool { return true }

// Alloc takes size bytes of device memory with cuMemAlloc. It fails with
// device.ErrInvalidSize for 0 and an error wrapping device.ErrOutOfMemory
// when the driver has no room.
func (d *Device) Alloc(size uint64) (device.Segment, error) {
	if size == 0 {
		return device.Segment{}, fmt.Errorf("cuda: alloc of 0 bytes: %w", device.ErrInvalidSize)
	}
	if size > 1<<62 {
		return device.Segment{}, fmt.Errorf("cuda: alloc %d bytes: %w", size, device.ErrOutOfMemory)
	}
	var ptr cu.DevicePtr
	err := d.do(func() error {
		var err error
		ptr, err = cu.MemAlloc(int64(size))
		return err
	})
	if err != nil {
		if errors.Is(err, cu.OutOfMemory) {
			free, total := d.MemInfo()
			return device.Segment{}, fmt.Errorf("cuda: alloc %d bytes with %d of %d free: %w", size, free, total, device.ErrOutOfMemory)
		}
		return device.Segment{}, fmt.Errorf("cuda: alloc %d bytes: %w", size, cuErr("cuMemAlloc", err))
	}
	addr := uint64(ptr)
	d.mu.Lock()
	d.live[addr] = size
	d.mu.Unlock()
	return device.Segment{Addr: addr, Size: size}, nil
}

// Free returns a segment with cuMemFree. Freeing a segment twice, or one
// the device did not hand out, fails with device.ErrUnknownSegment and
// changes nothing.
func (d *Device) Free(s device.Segment) error {
	d.mu.Lock()
	size, ok := d.live[s.Addr]
	if !ok || size != s.Size {
		d.mu.Unlock()
		return fmt.Errorf("cuda: free segment %#x (%d bytes): %w", s.Addr, s.Size, device.ErrUnknownSegment)
	}
	delete(d.live, s.Addr)
	d.mu.Unlock()
	if err := d.do(func() error { return cu.MemFree(cu.DevicePtr(s.Addr)) }); err != nil {
		d.mu.Lock()
		d.live[s.Addr] = size
		d.mu.Unlock()
		return fmt.Errorf("cuda: free segment %#x (%d bytes): %w", s.Addr, s.Size, cuErr("cuMemFree", err))
	}
	return nil
}

// MemInfo is cuMemGetInfo: the card's own view, which counts this
// process's context and every other process's memory. It reports 0, 0
// if the driver fails.
func (d *Device) MemInfo() (free, total uint64) {
	var f, t int64
	if err := d.do(func() error {
		var err error
		f, t, err = cu.MemInfo()
		return err
	}); err != nil {
		return 0, 0
	}
	return uint64(f), uint64(t)
}

// Info reports the device: name, memory, driver version, compute
// capability.
func (d *Device) Info() (Info, error) {
	name, err := d.dev.Name()
	if err != nil {
		return Info{}, fmt.Errorf("cuda: %w", cuErr("cuDeviceGetName", err))
	}
	major, minor, err := d.dev.ComputeCapability()
	if err != nil {
		return Info{}, fmt.Errorf("cuda: %w", cuErr("cuDeviceGetAttribute", err))
	}
	free, total := d.MemInfo()
	return Info{
		Index:             d.index,
		Name:              name,
		TotalBytes:        total,
		FreeBytes:         free,
		DriverVersion:     cu.Version(),
		ComputeCapability: fmt.Sprintf("%d.%d", major, minor),
	}, nil
}

// segment checks that [off, off+n) lies in a live segment at addr.
func (d *Device) segment(s device.Segment, off, n uint64) error {
	d.mu.Lock()
	size, ok := d.live[s.Addr]
	d.mu.Unlock()
	if !ok || size != s.Size {
		return fmt.Errorf("cuda: segment %#x (%d bytes): %w", s.Addr, s.Size, device.ErrUnknownSegment)
	}
	if off > size || n > size-off {
		return fmt.Errorf("cuda: bytes [%d, %d) outside segment %#x of %d bytes", off, off+n, s.Addr, size)
	}
	return nil
}

// CopyIn copies src to the segment s at offset off (cuMemcpyHtoD).
func (d *Device) CopyIn(s device.Segment, off uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if err := d.segment(s, off, uint64(len(src))); err != nil {
		return err
	}
	err := d.do(func() error {
		return cu.MemcpyHtoD(cu.DevicePtr(s.Addr+off), unsafe.Pointer(unsafe.SliceData(src)), int64(len(src)))
	})
	if err != nil {
		return fmt.Errorf("cuda: %w", cuErr("cuMemcpyHtoD", err))
	}
	return nil
}

// CopyOut copies len(dst) bytes of segment s at offset off into dst
// (cuMemcpyDtoH).
func (d *Device) CopyOut(dst []byte, s device.Segment, off uint64) error {
	if len(dst) == 0 {
		return nil
	}
	if err := d.segment(s, off, uint64(len(dst))); err != nil {
		return err
	}
	err := d.do(func() error {
		return cu.MemcpyDtoH(unsafe.Pointer(unsafe.SliceData(dst)), cu.DevicePtr(s.Addr+off), int64(len(dst)))
	})
	if err != nil {
		return fmt.Errorf("cuda: %w", cuErr("cuMemcpyDtoH", err))
	}
	return nil
}

// fakeLaunches is the fake driver's (engine/device/cuda/fakecuda) count
// of kernel launches, for tests; 0 on a real driver.
func fakeLaunches() uint64 { return uint64(C.linger_fake_launches()) }
