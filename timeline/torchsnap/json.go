package torchsnap

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// readJSON reads a snapshot written as JSON (json.dump of the snapshot, as
// memory_viz's tools write it), streaming the trace entries: the decoder
// walks the top-level object by tokens and decodes one entry at a time.
func readJSON(r io.Reader, fn EntryFunc) (*Snapshot, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	snap := &Snapshot{}
	sk := skipped{}
	if err := expectDelim(dec, '{'); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotSnapshot, err)
	}
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return snap, jsonErr(err)
		}
		key, _ := tok.(string)
		sk.note("", key)
		switch key {
		case "segments":
			seen = true
			var raw []map[string]json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return snap, fmt.Errorf("%w: segments: %w", ErrNotSnapshot, jsonErr(err))
			}
			for i, rs := range raw {
				for k := range rs {
					sk.note("segments[]", k)
				}
				b, _ := json.Marshal(rs)
				var seg Segment
				if err := json.Unmarshal(b, &seg); err != nil {
					return snap, fmt.Errorf("%w: segments[%d]: %v", ErrNotSnapshot, i, err)
				}
				snap.Segments = append(snap.Segments, seg)
			}
		case "device_traces":
			seen = true
			if err := readJSONTraces(dec, snap, fn, sk); err != nil {
				return snap, err
			}
		case "allocator_settings":
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				return snap, jsonErr(err)
			}
			snap.Settings = map[string]string{}
			for k, v := range m {
				snap.Settings[k] = fmt.Sprint(v)
			}
		case "external_annotations":
			if err := dec.Decode(&snap.Annotations); err != nil {
				return snap, jsonErr(err)
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return snap, jsonErr(err)
			}
		}
	}
	snap.Skipped = sk.list()
	if !seen {
		return nil, fmt.Errorf("%w: the object has neither segments nor device_traces", ErrNotSnapshot)
	}
	return snap, nil
}

func readJSONTraces(dec *json.Decoder, snap *Snapshot, fn EntryFunc, sk skipped) error {
	if err := expectDelim(dec, '['); err != nil {
		return fmt.Errorf("%w: device_traces: %v", ErrNotSnapshot, err)
	}
	for dev := 0; dec.More(); dev++ {
		if err := expectDelim(dec, '['); err != nil {
			return fmt.Errorf("%w: device_traces[%d]: %v", ErrNotSnapshot, dev, err)
		}
		t := -1
		for i := 0; dec.More(); i++ {
			var e Entry
			var raw struct {
				DeviceFree *json.Number `json:"device_free"`
			}
			var msg json.RawMessage
			if err := dec.Decode(&msg); err != nil {
				return fmt.Errorf("device_traces[%d][%d]: %w", dev, i, jsonErr(err))
			}
			if err := json.Unmarshal(msg, &e); err != nil {
				return fmt.Errorf("%w: device_traces[%d][%d]: %v", ErrNotSnapshot, dev, i, err)
			}
			if json.Unmarshal(msg, &raw) == nil && raw.DeviceFree != nil {
				e.HasDeviceFree = true
			}
			var keys map[string]json.RawMessage
			if json.Unmarshal(msg, &keys) == nil {
				for k := range keys {
					sk.note("entry", k)
				}
				// compile_context and user_metadata are text, or (the
				// viewer takes either) any JSON value, kept as written.
				e.CompileContext, e.UserMetadata = jsonText(keys["compile_context"]), jsonText(keys["user_metadata"])
			}
			if e.Action == "" {
				return fmt.Errorf("%w: device_traces[%d][%d]: a trace entry without an action", ErrNotSnapshot, dev, i)
			}
			if t < 0 {
				t = len(snap.Devices)
				snap.Devices = append(snap.Devices, dev)
				snap.Entries = append(snap.Entries, 0)
			}
			snap.Entries[t]++
			if err := fn(t, &e); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil { // ]
			return jsonErr(err)
		}
	}
	_, err := dec.Token()
	return jsonErr(err)
}

// jsonText is a JSON string's text, or any other value as written.
func jsonText(raw json.RawMessage) string {
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return jsonErr(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q, found %v", want, tok)
	}
	return nil
}

// jsonErr says a JSON snapshot cut short as such.
func jsonErr(err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("snapshot cut short, read to its last whole trace entry: %w", io.ErrUnexpectedEOF)
	}
	return err
}
