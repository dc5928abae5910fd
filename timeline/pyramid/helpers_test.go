package pyramid

import (
	"bytes"
	"compress/flate"
	"io"
	"testing"
)

func decodeRaw(t *testing.T, enc []byte) []byte {
	t.Helper()
	raw, err := io.ReadAll(flate.NewReader(bytes.NewReader(enc)))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func deflate(t *testing.T, raw []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.BestSpeed)
	w.Write(raw)
	w.Close()
	return b.Bytes()
}
