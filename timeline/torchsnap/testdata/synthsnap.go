//go:build ignore

// synthsnap writes a large synthetic memory snapshot, pickled as
// torch.cuda.memory._dump_snapshot pickles one (protocol 4, Python's
// pickler: every dict and list memoized, repeated strings, frame dicts
// and tracebacks as memo references), to measure the import at the
// sizes users bring (docs/pytorch.md):
//
//	go run timeline/torchsnap/testdata/synthsnap.go -entries 10000000 -o big.pickle
//
// Device 0's trace is blocks allocated and freed (alloc, free_requested,
// free_completed) at a thousand addresses, each entry with the fields a
// current PyTorch writes (compile_context, user_metadata), its traceback
// one of -stacks distinct ones of -frames frames (Python's and, as with
// stacks="all", C++'s), a new one appearing as the trace goes on. As
// PyTorch's py_symbolize writes them, each distinct frame is one dict,
// shared, but each allocation's traceback is a list of its own, which
// its free_requested and free_completed refer to again (the block's
// context_when_allocated); -shared writes one list per distinct
// traceback instead.
package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"os"
)

func main() {
	entries := flag.Int("entries", 10_000_000, "trace entries")
	stacks := flag.Int("stacks", 100_000, "distinct tracebacks")
	frames := flag.Int("frames", 40, "frames per traceback")
	out := flag.String("o", "big.pickle", "output file")
	shared := flag.Bool("shared", false, "one list per distinct traceback, not one per allocation")
	flag.Parse()
	f, err := os.Create(*out)
	if err != nil {
		log.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	p := &pickler{w: w, strs: map[string]int{}}
	p.write(*entries, *stacks, *frames, *shared)
	if err := w.Flush(); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
	fi, _ := os.Stat(*out)
	fmt.Printf("wrote %s: %d entries, %d bytes (%.0f B/entry)\n", *out, *entries, fi.Size(), float64(fi.Size())/float64(*entries))
}

type pickler struct {
	w    *bufio.Writer
	memo int
	strs map[string]int
}

func (p *pickler) op(b ...byte) { p.w.Write(b) }

// put memoizes the top of the stack.
func (p *pickler) put() int { p.op(0x94); p.memo++; return p.memo - 1 }

func (p *pickler) get(i int) {
	if i < 256 {
		p.op('h', byte(i))
		return
	}
	p.op('j')
	binary.Write(p.w, binary.LittleEndian, uint32(i))
}

func (p *pickler) str(s string) {
	if i, ok := p.strs[s]; ok {
		p.get(i)
		return
	}
	p.op(0x8c, byte(len(s)))
	p.w.WriteString(s)
	p.strs[s] = p.put()
}

func (p *pickler) int(v uint64) {
	switch {
	case v < 256:
		p.op('K', byte(v))
	case v < 1<<31:
		p.op('J')
		binary.Write(p.w, binary.LittleEndian, uint32(v))
	default:
		p.op(0x8a, 8)
		binary.Write(p.w, binary.LittleEndian, v)
	}
}

func (p *pickler) write(entries, nstacks, nframes int, shared bool) {
	p.op(0x80, 4)
	p.op('}')
	p.put()
	p.op('(')
	p.str("segments")
	p.op(']')
	p.put()
	p.str("device_traces")
	p.op(']')
	p.put()
	p.op(']')
	p.put()
	stackMemo := make([]int, nstacks)
	frameMemo := map[[2]int]int{}
	for i := range stackMemo {
		stackMemo[i] = -1
	}
	actions := []string{"alloc", "free_requested", "free_completed"}
	allocList := -1
	for i := range entries {
		if i%1000 == 0 {
			if i > 0 {
				p.op('e')
			}
			p.op('(')
		}
		block := i / 3
		p.op('}')
		p.put()
		p.op('(')
		p.str("action")
		p.str(actions[i%3])
		p.str("addr")
		p.int(0x7f0000000000 + uint64(block%1000)<<21)
		p.str("size")
		p.int(512 << (block % 12))
		p.str("stream")
		p.int(0)
		p.str("time_us")
		p.int(1_733_000_000_000_000 + uint64(i))
		p.str("compile_context")
		p.str("N/A")
		p.str("user_metadata")
		p.str("")
		p.str("frames")
		// The traceback of block b: the new ones come in as the trace
		// goes on, as a long run reaches new code.
		s := block % max(1, min(nstacks, 1+block/64))
		if i%3 != 0 && !shared {
			p.get(allocList) // the free's context is the block's, when it was allocated
		} else if stackMemo[s] >= 0 && shared {
			p.get(stackMemo[s])
		} else {
			p.op(']')
			stackMemo[s] = p.put()
			allocList = stackMemo[s]
			p.op('(')
			for fr := range nframes {
				// A frame is shared by the tracebacks that pass through
				// it: the outer ones by many, the inner ones by few.
				key := [2]int{fr, s % (1 + fr*fr)}
				if m, ok := frameMemo[key]; ok {
					p.get(m)
					continue
				}
				p.op('}')
				frameMemo[key] = p.put()
				p.op('(')
				p.str("name")
				if fr%2 == 0 {
					p.str(fmt.Sprintf("at::native::kernel_%d_%d(at::Tensor const&)", fr, key[1]))
					p.str("filename")
					p.str("??")
					p.str("line")
					p.int(0)
				} else {
					p.str(fmt.Sprintf("forward_%d", key[1]))
					p.str("filename")
					p.str(fmt.Sprintf("/home/u/model/layer_%d.py", fr))
					p.str("line")
					p.int(uint64(10 + key[1]%500))
				}
				p.op('u')
			}
			p.op('e')
		}
		p.op('u')
	}
	p.op('e', 'a') // the last APPENDS, then device 0's list into device_traces
	p.op('u', '.') // SETITEMS of the root, STOP
}
