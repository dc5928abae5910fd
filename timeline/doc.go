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

# Format and endings

docs/trace-format.md specifies the log, version 1: a header, then frames,
each with its type, length and CRC-32C: string and site definitions, events
(encoded by event.Encoder in batches of consecutive sequence numbers), the
index frame and the end frame with the reason the trace ended. Readers
skip frame types they do not know.

The index frame, which Close writes right before the end frame, holds the
memory figures of every event per time bucket (package pyramid), as a
reader's level-of-detail index of the same events would: StoredPyramid
finds it from the end of the file, so that a reader shows a trace of any
length whole at once, before a pass over its events.

A Reader tells how the trace ended: io.EOF and End's reason for an end
frame ("" for a clean Close, "kernel killed: signal 9" after
CloseWithReason); a *StopError wrapping ErrTruncated when the log stops
without one (the writer died, or is still writing: Writing tells which,
by the lock a writer holds on its file), or ErrCorrupt for a frame that
fails its check. The events before the stop are returned first.
Reader.Resume clears a truncation, so that reading goes on as the writer
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
