package engine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"

	"linger/engine/device"
)

// ErrSafetensors is wrapped by every error about a malformed safetensors file.
var ErrSafetensors = errors.New("malformed safetensors file")

// maxHeader bounds the JSON header so a corrupt length cannot make the
// reader allocate gigabytes.
const maxHeader = 100 << 20

// stEntry is one tensor of a safetensors header.
type stEntry struct {
	DType   string   `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// stFile is a parsed safetensors file: the header's tensors, with their
// data offsets made absolute.
type stFile struct {
	tensors map[string]stEntry
	start   int64 // file offset of the data section
	r       io.ReaderAt
}

func stDTypeSize(s string) int {
	switch s {
	case "F64", "I64", "U64":
		return 8
	case "F32", "I32", "U32":
		return 4
	case "F16", "BF16", "I16", "U16":
		return 2
	case "I8", "U8", "BOOL", "F8_E4M3", "F8_E5M2":
		return 1
	}
	return 0
}

// parseSafetensors reads the header of a safetensors file of the given size:
// an 8-byte little-endian header length, then a JSON object mapping tensor
// names to {dtype, shape, data_offsets} (offsets relative to the data
// section that follows the header); "__metadata__" is ignored.
func parseSafetensors(r io.ReaderAt, size int64) (*stFile, error) {
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("read header length: %w: %w", ErrSafetensors, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxHeader || int64(n) > size-8 {
		return nil, fmt.Errorf("header length %d with file size %d: %w", n, size, ErrSafetensors)
	}
	hdr := make([]byte, n)
	if _, err := r.ReadAt(hdr, 8); err != nil {
		return nil, fmt.Errorf("read header: %w: %w", ErrSafetensors, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, fmt.Errorf("header json: %w: %w", ErrSafetensors, err)
	}
	f := &stFile{tensors: make(map[string]stEntry, len(raw)), start: 8 + int64(n), r: r}
	dataLen := size - f.start
	names := make([]string, 0, len(raw))
	for name := range raw {
		names = append(names, name)
	}
	sort.Strings(names) // deterministic error messages
	for _, name := range names {
		if name == "__metadata__" {
			continue
		}
		var e stEntry
		if err := json.Unmarshal(raw[name], &e); err != nil {
			return nil, fmt.Errorf("tensor %q: %w: %w", name, ErrSafetensors, err)
		}
		es := stDTypeSize(e.DType)
		if es == 0 {
			return nil, fmt.Errorf("tensor %q: unknown dtype %q: %w", name, e.DType, ErrSafetensors)
		}
		count := int64(1)
		for _, d := range e.Shape {
			if d < 0 || (d > 0 && count > (1<<62)/int64(d)) {
				return nil, fmt.Errorf("tensor %q: bad shape %v: %w", name, e.Shape, ErrSafetensors)
			}
			count *= int64(d)
		}
		b, end := e.Offsets[0], e.Offsets[1]
		if b < 0 || end < b || end > dataLen || end-b != count*int64(es) {
			return nil, fmt.Errorf("tensor %q: data offsets [%d,%d) for %d bytes of %v %s in %d data bytes: %w",
				name, b, end, count*int64(es), e.Shape, e.DType, dataLen, ErrSafetensors)
		}
		f.tensors[name] = e
	}
	return f, nil
}

// openSafetensors opens and parses path; the caller closes the returned file.
func openSafetensors(path string) (*stFile, *os.File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := fd.Stat()
	if err != nil {
		fd.Close()
		return nil, nil, err
	}
	f, err := parseSafetensors(fd, st.Size())
	if err != nil {
		fd.Close()
		return nil, nil, err
	}
	return f, fd, nil
}

// load checks that tensor name exists with the shape of t and, when t has
// data, that it is F32, and copies it in. With st (an accelerator's
// stream), F32 is rounded to bf16 and BF16 taken as is, and uploaded.
func (f *stFile) load(name string, t *Tensor, st device.Stream) error {
	e, ok := f.tensors[name]
	if !ok {
		return fmt.Errorf("missing tensor %q", name)
	}
	if !slices.Equal(e.Shape, t.shape) {
		return fmt.Errorf("tensor %q: shape %v in file, model needs %v", name, e.Shape, t.shape)
	}
	if st != nil {
		return f.upload(name, e, t, st)
	}
	if t.data == nil {
		return nil // meta: shapes only
	}
	if e.DType != "F32" {
		return fmt.Errorf("tensor %q: dtype %s in file: %w (cpu loads F32 only)", name, e.DType, ErrUnsupported)
	}
	buf := t.Block().Bytes()[:t.Numel()*4]
	if _, err := f.r.ReadAt(buf, f.start+e.Offsets[0]); err != nil {
		return fmt.Errorf("tensor %q: read data: %w", name, err)
	}
	if !littleEndian {
		for i := 0; i < len(buf); i += 4 {
			buf[i], buf[i+1], buf[i+2], buf[i+3] = buf[i+3], buf[i+2], buf[i+1], buf[i]
		}
	}
	return nil
}

// upload is load on an accelerator.
func (f *stFile) upload(name string, e stEntry, t *Tensor, st device.Stream) error {
	n := t.Numel()
	var buf []byte
	switch e.DType {
	case "BF16":
		buf = make([]byte, 2*n)
		if _, err := f.r.ReadAt(buf, f.start+e.Offsets[0]); err != nil {
			return fmt.Errorf("tensor %q: read data: %w", name, err)
		}
	case "F32":
		raw := make([]byte, 4*n)
		if _, err := f.r.ReadAt(raw, f.start+e.Offsets[0]); err != nil {
			return fmt.Errorf("tensor %q: read data: %w", name, err)
		}
		buf = make([]byte, 2*n)
		for i := range n {
			binary.LittleEndian.PutUint16(buf[2*i:], device.ToBF16(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))))
		}
	default:
		return fmt.Errorf("tensor %q: dtype %s in file: %w (an accelerator loads F32 and BF16)", name, e.DType, ErrUnsupported)
	}
	if err := st.Upload(t.ptr(), buf); err != nil {
		return fmt.Errorf("tensor %q: upload: %w", name, err)
	}
	return nil
}

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// WriteSafetensors writes tensors (name → shape and float32 data, row
// major) as an F32 safetensors file at path. It exists for tests and for
// exporting seeded weights; data lengths must match the shapes.
func WriteSafetensors(path string, names []string, shapes [][]int, data [][]float32) error {
	if len(names) != len(shapes) || len(names) != len(data) {
		return fmt.Errorf("write safetensors %q: %d names, %d shapes, %d data", path, len(names), len(shapes), len(data))
	}
	hdr := map[string]stEntry{}
	var off int64
	for i, name := range names {
		n := 1
		for _, d := range shapes[i] {
			n *= d
		}
		if n != len(data[i]) {
			return fmt.Errorf("write safetensors %q: tensor %q has %d values for shape %v", path, name, len(data[i]), shapes[i])
		}
		hdr[name] = stEntry{DType: "F32", Shape: shapes[i], Offsets: [2]int64{off, off + int64(4*n)}}
		off += int64(4 * n)
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return fmt.Errorf("write safetensors %q: %w", path, err)
	}
	out := make([]byte, 8, 8+len(js)+int(off))
	binary.LittleEndian.PutUint64(out, uint64(len(js)))
	out = append(out, js...)
	for _, d := range data {
		for _, v := range d {
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
		}
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("write safetensors: %w", err)
	}
	return nil
}
