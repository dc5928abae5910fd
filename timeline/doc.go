/*
Package timeline keeps Linger's memory timelines: the trace log on disk
(Writer, Reader, File), the tables that resolve its interned strings and
sites (Dict), and the Recorder that writes a live trace and serves it to
subscribers.

A trace log (conventionally *.ltrace) records every event of one trace, as
produced by an event.Emitter, so that a trace can be analyzed and exported
after the fact, and so that a kernel that dies loses nothing already
written. It is append-only: a Writer writes frames as batches fill and never
seeks; a Reader streams it front to back, and a log whose writer was killed
reads back up to its last complete frame.

# Wire format

All integers are little-endian. "uvarint" is an unsigned LEB128 varint
(encoding/binary.AppendUvarint), "varint" its zig-zag signed form
(binary.AppendVarint). A "string" is a uvarint byte length and the bytes.

A log is a header followed by frames:

	log    = header frame*
	header = "LNGRTRC1" version:u8        (version is 1)

	frame  = type:u8 length:u32 payload:[length]u8 crc:u32

crc is the CRC-32C (Castagnoli polynomial) of the frame's type, length and
payload bytes, as written. length counts the payload only and is at most
MaxFrameSize (64 MiB); a reader refuses longer frames as corrupt. Frame
types:

	1 strings  string definitions: (id:uvarint s:string)*
	2 sites    site definitions:   (id:uvarint cell:string line:varint
	                                nframes:uvarint (func:string file:string line:varint)*)*
	3 events   first:uvarint count:uvarint event*
	4 end      the reason the trace ended, raw UTF-8; empty for a clean close

A reader skips frames of other types, after checking their crc: a newer
writer may add frames that older readers can do without. Nothing after the
end frame belongs to the trace.

Definitions give the meaning of the event.StringID and event.SiteID values
in events. A writer writes a definition before the first events frame that
uses it; an id defined twice takes its latest definition.

An events frame holds count >= 1 events with sequence numbers first,
first+1, ..., first+count-1; Seq is not written per event. Events are
encoded by event.Encoder, each relative to state that starts at zero at the
beginning of the frame (see package event for the bit layout):

  - Time, Label and Scope are differences from the previous event's.
  - Addr, Size, Size-Requested, Category, Expect and Extra are differences
    from (or, for Category and Expect, replacements of) the values of the
    previous event in the same reference slot: slot 16+Label%256 for an
    event with a label, slot Kind%16 for one without. Site is a difference
    from the previous event in that slot whose Kind has the same parity.
  - A one-byte mask (and a second one when any of the rarer fields
    changes) says which fields differ; those that don't cost nothing.

Differences are taken modulo 2^64 (2^32 for Label and Site) and written as
zig-zag uvarints, so every value round-trips, including times that go
backwards.

# Endings

A reader tells how a trace ended:

  - an end frame with an empty reason: ReadEvent returns io.EOF and End
    returns "", true (a clean Close);
  - an end frame with a reason: io.EOF, and End returns the reason, such as
    "kernel killed: signal 9" (CloseWithReason);
  - no end frame, or a torn frame: a *StopError wrapping ErrTruncated, with
    the offset of the first incomplete frame (the writer died, or is still
    writing);
  - a frame whose crc does not match, whose length exceeds MaxFrameSize, or
    whose payload does not decode: a *StopError wrapping ErrCorrupt.

In every case the events of the frames before the stop are returned first;
for an events frame whose crc matches but whose payload does not decode, so
are its events before the bad one. A corrupt length field can make a frame
look torn rather than corrupt.

A log that is still being written reads as truncated at its current end;
Reader.Resume clears the truncation so that reading goes on as the writer
appends.

# Recording live

A Recorder is the event.Sink a kernel's events go into while it runs. It
writes the trace log and lets any number of subscribers follow the trace
as it grows:

	rec, err := timeline.NewRecorder(path, timeline.RecorderOptions{})
	em := event.NewEmitter(rec, event.EmitterOptions{})
	...
	sub := rec.Subscribe(lastSeen + 1)
	for {
		b, err := sub.Next(ctx) // definitions not yet seen, then events
		...
	}

The producing goroutine pays for a copy into a single-producer
single-consumer ring and one atomic store per event; it blocks only while
the ring is full and never drops an event. The Recorder's own goroutine
encodes the events into the log (writing out a partial batch every
FlushInterval, 20 ms by default, so that a live viewer lags and a crash
loses little more than that), and keeps the latest TailSize events in
memory. Definitions travel in order with the events, so every reader
learns a name before its first use.

A subscription asks for "every event from sequence number N on, then
follow". Events still in the in-memory tail come from there; a subscriber
that starts further back, or falls that far behind, re-opens the log by
path, skips to N (Reader.SkipTo) and reads on, resuming over the log's
growing end (Reader.Resume) until it reaches the tail again. The Recorder
never lets the tail drop an event the Writer has not yet written, so the
log and the tail overlap and the hand-over has no gap and no duplicate.
The Recorder's memory is the ring, the tail and the definitions (which an
Emitter keeps too), whatever the trace length and however many
subscribers there are: a slow subscriber never holds the producer back, it
just reads the file. A client that reconnects resumes
with a new subscription from the last sequence number it received plus
one.

After Recorder.Close (or CloseWithReason, e.g. "kernel killed: signal 9")
subscribers receive what remains, then io.EOF, and Subscription.End gives
the reason.
*/
package timeline
