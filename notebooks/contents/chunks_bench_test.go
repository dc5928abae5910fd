package contents

import (
	"encoding/base64"
	"io"
	"sync/atomic"
	"testing"
)

// countingWriter counts the bytes a store writes through its wrap hook.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	k, err := c.w.Write(p)
	c.n.Add(int64(k))
	return k, err
}

// BenchmarkChunkedUpload uploads 128 MiB in 1 MiB chunks, as JupyterLab
// sends a large file, and reports the bytes the store wrote for it.
func BenchmarkChunkedUpload(b *testing.B) {
	const chunk, chunks = 1 << 20, 128
	piece := make([]byte, chunk)
	for i := range piece {
		piece[i] = byte(i)
	}
	content := base64.StdEncoding.EncodeToString(piece)
	s, err := New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var written atomic.Int64
	s.wrap = func(w io.Writer) io.Writer { return countingWriter{w, &written} }
	b.SetBytes(chunk * chunks)
	b.ResetTimer()
	for b.Loop() {
		for i := 1; i <= chunks; i++ {
			n := i
			if i == chunks {
				n = -1
			}
			if _, _, err := s.Save("big.bin", Model{Type: TypeFile, Format: FormatBase64, Content: content, Chunk: n}); err != nil {
				b.Fatalf("chunk %d: %v", n, err)
			}
		}
	}
	b.ReportMetric(float64(written.Load())/float64(b.N)/(1<<20), "MiB-written/op")
}
